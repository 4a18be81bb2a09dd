package rathwatermill

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
)

// Metadata keys the marshalers read and write. On a delivered message they
// describe the stored event; on a published one they shape the proposal.
// Every other key is carried, as a JSON object, in the event's extension
// ExtMetadata, and comes back on delivery.
const (
	// MetadataSession is the event's session. On a message published to
	// TopicAll it names the session to propose into.
	MetadataSession = "rath_session"
	// MetadataType is the event type: on a published message it overrides
	// JSONMarshaler.Type.
	MetadataType = "rath_type"
	// MetadataEventID is the stored event's ID (delivered only). A
	// message's UUID is the UUID it was published with, when it was
	// published through a Publisher, and the event ID otherwise.
	MetadataEventID = "rath_event_id"
	// MetadataSeq is the event's sequence in its session (delivered only).
	MetadataSeq = "rath_seq"
	// MetadataActor is the principal that proposed the event (delivered only).
	MetadataActor = "rath_actor"
	// MetadataSource is the event's CloudEvents source.
	MetadataSource = "rath_source"
	// MetadataCausation is the ID of the event that caused this one
	// (the causationid extension).
	MetadataCausation = "rath_causation_id"
	// MetadataExpectedSeq, on a published message, makes the proposal
	// conditional on the session's head (the rathexpectedseq extension):
	// a different head refuses it with stale_sequence.
	MetadataExpectedSeq = "rath_expected_seq"
	// MetadataDelivered is how many times the feed has delivered the event
	// (1 the first time; delivered only).
	MetadataDelivered = "rath_delivered"
)

// MetadataCorrelation is Watermill's correlation ID key (the CorrelationID
// middleware's), carried as the event's correlationid extension.
const MetadataCorrelation = middleware.CorrelationIDMetadataKey

// CloudEvents extensions a published message's event carries.
const (
	// ExtUUID is the Watermill message's UUID. The event's own ID is
	// derived from the session and this UUID, so that the same message
	// published to two sessions is two events, and published again (a
	// router's retry) is stored once.
	ExtUUID = "wmuuid"
	// ExtMetadata holds the message's other metadata as a JSON object.
	ExtMetadata = "wmmetadata"
)

// Marshaler turns a message into a proposal for a session, and a stored
// event into a message.
type Marshaler interface {
	Marshal(sessionID string, msg *message.Message) (event.Event, error)
	Unmarshal(ev events.Stored) (*message.Message, error)
}

// JSONMarshaler is the default marshaler: a message's payload is the
// event's data (JSON, checked by the ledger against the type's schema; an
// empty payload is {}), its metadata the attributes above. A delivered
// payload is the data as stored: the same JSON value, in the canonical form
// the chain hash covers (keys sorted, no spaces), not the bytes published.
type JSONMarshaler struct {
	// Type is the event type of a message without MetadataType.
	Type string
	// Source is the events' CloudEvents source (default "rath/watermill").
	Source string
}

// reserved are the metadata keys that map to attributes, not ExtMetadata.
var reserved = map[string]bool{
	MetadataSession: true, MetadataType: true, MetadataEventID: true, MetadataSeq: true,
	MetadataActor: true, MetadataSource: true, MetadataCausation: true, MetadataExpectedSeq: true,
	MetadataDelivered: true, MetadataCorrelation: true,
}

// Marshal builds the proposal of msg for a session.
func (m JSONMarshaler) Marshal(sessionID string, msg *message.Message) (event.Event, error) {
	typ := msg.Metadata.Get(MetadataType)
	if typ == "" {
		typ = m.Type
	}
	if typ == "" {
		return event.Event{}, fmt.Errorf("message %s names no event type: set its %s metadata or the marshaler's Type", msg.UUID, MetadataType)
	}
	source := msg.Metadata.Get(MetadataSource)
	if source == "" {
		source = m.Source
	}
	if source == "" {
		source = "rath/watermill"
	}
	opts := []events.Option{events.WithID(events.DerivedID("watermill", sessionID, msg.UUID)), events.WithSource(source)}
	if v := msg.Metadata.Get(MetadataExpectedSeq); v != "" {
		seq, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return event.Event{}, fmt.Errorf("message %s: %s %q: want a sequence number", msg.UUID, MetadataExpectedSeq, v)
		}
		opts = append(opts, events.WithExpectedSeq(seq))
	}
	if v := msg.Metadata.Get(MetadataCorrelation); v != "" {
		opts = append(opts, events.WithCorrelation(v))
	}
	if v := msg.Metadata.Get(MetadataCausation); v != "" {
		opts = append(opts, events.WithCausation(v))
	}
	data := json.RawMessage(msg.Payload)
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	ev, err := events.NewRaw(sessionID, typ, data, opts...)
	if err != nil {
		return event.Event{}, fmt.Errorf("message %s: %w", msg.UUID, err)
	}
	ev.SetExtension(ExtUUID, msg.UUID)
	extra := map[string]string{}
	for k, v := range msg.Metadata {
		if !reserved[k] {
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		b, err := json.Marshal(extra)
		if err != nil {
			return event.Event{}, fmt.Errorf("message %s: metadata: %w", msg.UUID, err)
		}
		ev.SetExtension(ExtMetadata, string(b))
	}
	return ev, nil
}

// carried are the extensions of a stored event that Marshal wrote.
type carried struct {
	UUID     string `json:"wmuuid"`
	Metadata string `json:"wmmetadata"`
}

// Unmarshal builds the message of a stored event: its data as payload.
func (m JSONMarshaler) Unmarshal(ev events.Stored) (*message.Message, error) {
	var c carried
	if err := json.Unmarshal(ev.Raw, &c); err != nil {
		return nil, fmt.Errorf("event %d of %s: %w", ev.Seq, ev.Session, err)
	}
	uuid := c.UUID
	if uuid == "" {
		uuid = ev.ID
	}
	msg := message.NewMessage(uuid, append([]byte(nil), ev.Data...))
	if c.Metadata != "" {
		var extra map[string]string
		if err := json.Unmarshal([]byte(c.Metadata), &extra); err != nil {
			return nil, fmt.Errorf("event %d of %s: %s: %w", ev.Seq, ev.Session, ExtMetadata, err)
		}
		for k, v := range extra {
			msg.Metadata.Set(k, v)
		}
	}
	msg.Metadata.Set(MetadataSession, ev.Session)
	msg.Metadata.Set(MetadataType, ev.Type)
	msg.Metadata.Set(MetadataEventID, ev.ID)
	msg.Metadata.Set(MetadataSeq, strconv.FormatUint(ev.Seq, 10))
	msg.Metadata.Set(MetadataSource, ev.Source)
	if ev.Actor != "" {
		msg.Metadata.Set(MetadataActor, ev.Actor)
	}
	if ev.Causation != "" {
		msg.Metadata.Set(MetadataCausation, ev.Causation)
	}
	if ev.Correlation != "" {
		msg.Metadata.Set(MetadataCorrelation, ev.Correlation)
	}
	return msg, nil
}
