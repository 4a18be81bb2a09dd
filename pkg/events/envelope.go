package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/openrath/rath/internal/jsonscan"
)

// Rath's CloudEvents extension attributes.
const (
	// ExtSeq is the event's 1-based position in its session's logical log,
	// assigned by the ledger. A CloudEvents Integer.
	ExtSeq = "rathseq"
	// ExtPrev is the hash of the previous event of the logical log (absent on
	// the first event of a root session).
	ExtPrev = "rathprev"
	// ExtHash is the event's own chain hash; see ComputeHash.
	ExtHash = "rathhash"
	// ExtExpectedSeq, set by a proposer, is the head sequence it expects the
	// session to have; a different head rejects the proposal as stale.
	ExtExpectedSeq = "rathexpectedseq"
	// ExtCausation is the ID of the event that caused this one.
	ExtCausation = "causationid"
	// ExtCorrelation groups the events of one unit of work (a turn, a request).
	ExtCorrelation = "correlationid"
	// ExtTraceparent is the W3C trace context of the producer (CloudEvents
	// distributed tracing extension).
	ExtTraceparent = "traceparent"
	// ExtActor is who proposed the event (tenant/user, Principal.String),
	// set by the ledger from the subject the proposal arrived on; a proposed
	// value is discarded.
	ExtActor = "rathactor"
	// ExtTenant, on the event that starts a session (session.started, or the
	// fork's first event), is the tenant the session belongs to.
	ExtTenant = "rathtenant"
	// ExtOnBehalf is the principal (tenant/user) a service proposed the
	// event for: the memory service appends memory events as itself, on
	// behalf of whoever asked it. The ledger keeps it only when the
	// proposer is one of Rath's services and the value is a valid actor;
	// anyone else's is discarded, like a proposed ExtActor.
	ExtOnBehalf = "rathfor"
)

// ContentTypeStructured is the NATS Content-Type of a structured-mode CloudEvent.
const ContentTypeStructured = "application/cloudevents+json"

// NewID returns a new event ID: a UUIDv7, so IDs sort by creation time.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// rathNamespace is the UUID namespace of derived event IDs.
var rathNamespace = uuid.MustParse("6f1c2a5e-9b1d-4c3e-8a52-0d7e4b9c1f30")

// DerivedID returns an event ID determined by its parts (a UUIDv5), for
// events a handler emits in response to another event: a redelivered event
// makes the same IDs, so its outputs are stored once.
func DerivedID(parts ...string) string {
	return uuid.NewSHA1(rathNamespace, []byte(strings.Join(parts, "\x00"))).String()
}

// Option sets an optional envelope attribute in New.
type Option func(*event.Event)

// WithID sets the event ID (default: a new UUIDv7). Producers that may retry
// must choose the ID once, so that a retry is stored once.
func WithID(id string) Option { return func(e *event.Event) { e.SetID(id) } }

// WithSource sets the CloudEvents source (default "rath").
func WithSource(src string) Option { return func(e *event.Event) { e.SetSource(src) } }

// WithTime sets the event time (default now, UTC).
func WithTime(t time.Time) Option { return func(e *event.Event) { e.SetTime(t.UTC()) } }

// WithCausation records the ID of the event that caused this one.
func WithCausation(id string) Option {
	return func(e *event.Event) { e.SetExtension(ExtCausation, id) }
}

// WithCorrelation records the correlation ID.
func WithCorrelation(id string) Option {
	return func(e *event.Event) { e.SetExtension(ExtCorrelation, id) }
}

// WithTraceparent records a W3C traceparent.
func WithTraceparent(tp string) Option {
	return func(e *event.Event) { e.SetExtension(ExtTraceparent, tp) }
}

// WithOnBehalf names the principal a service proposes the event for
// (ExtOnBehalf). The ledger discards it unless the proposer is a service.
func WithOnBehalf(p Principal) Option {
	return func(e *event.Event) { e.SetExtension(ExtOnBehalf, p.String()) }
}

// WithExpectedSeq makes the proposal conditional on the session's head sequence.
func WithExpectedSeq(seq uint64) Option {
	return func(e *event.Event) { e.SetExtension(ExtExpectedSeq, int64(seq)) }
}

// New builds a proposal for session sessionID carrying data, a value of a
// registered kind. The session ID may be empty on a session start: the ledger
// then assigns one.
func New(sessionID string, data any, opts ...Option) (event.Event, error) {
	k, ok := KindOf(data)
	if !ok {
		return event.Event{}, fmt.Errorf("new event: %T is not a registered event kind", data)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return event.Event{}, fmt.Errorf("new %s event: %w", k.Type, err)
	}
	return newEvent(k, sessionID, raw, opts), nil
}

// NewRaw builds a proposal of type typ with data given as JSON, for callers
// that hold data as bytes (a CLI, a bridge). The ledger validates the data
// against the type's schema.
func NewRaw(sessionID, typ string, data json.RawMessage, opts ...Option) (event.Event, error) {
	k, ok := Lookup(typ)
	if !ok {
		return event.Event{}, &UnknownTypeError{Type: typ}
	}
	if !json.Valid(data) {
		return event.Event{}, fmt.Errorf("new %s event: data is not valid JSON", typ)
	}
	return newEvent(k, sessionID, data, opts), nil
}

func newEvent(k Kind, sessionID string, data []byte, opts []Option) event.Event {
	e := event.New()
	e.SetID(NewID())
	e.SetSource("rath")
	e.SetType(k.Type)
	if sessionID != "" {
		e.SetSubject(sessionID)
	}
	e.SetTime(time.Now().UTC())
	e.SetDataSchema(k.DataSchema())
	e.SetDataContentType(event.ApplicationJSON)
	e.DataEncoded = data // JSON, written as "data" (not data_base64)
	for _, o := range opts {
		o(&e)
	}
	return e
}

// Seq returns the ledger-assigned sequence of a stored event (0 if absent).
func Seq(e event.Event) uint64 { return uintExt(e, ExtSeq) }

// ExpectedSeq returns the proposer's expected head sequence, if it set one.
func ExpectedSeq(e event.Event) (uint64, bool, error) {
	v, ok := extension(e, ExtExpectedSeq)
	if !ok {
		return 0, false, nil
	}
	n, err := types.ToInteger(v)
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("extension %s must be a non-negative integer, got %v", ExtExpectedSeq, v)
	}
	return uint64(n), true, nil
}

// Prev returns the previous event's chain hash.
func Prev(e event.Event) string { return stringExt(e, ExtPrev) }

// Hash returns the event's own chain hash.
func Hash(e event.Event) string { return stringExt(e, ExtHash) }

// Sig returns the ledger's signature of the event (see SigningKey).
func Sig(e event.Event) string { return stringExt(e, ExtSig) }

// Causation returns the causation ID.
func Causation(e event.Event) string { return stringExt(e, ExtCausation) }

// Correlation returns the correlation ID.
func Correlation(e event.Event) string { return stringExt(e, ExtCorrelation) }

// Traceparent returns the W3C traceparent.
func Traceparent(e event.Event) string { return stringExt(e, ExtTraceparent) }

// Actor returns who proposed the event, as the ledger stamped it.
func Actor(e event.Event) string { return stringExt(e, ExtActor) }

// Tenant returns the tenant a session's first event names.
func Tenant(e event.Event) string { return stringExt(e, ExtTenant) }

// OnBehalf returns on whose behalf a service proposed the event.
func OnBehalf(e event.Event) string { return stringExt(e, ExtOnBehalf) }

// extension reads one extension attribute. Event.Extensions copies the whole
// map on every call, which the ledger's append path did for each attribute it
// read (6 µs an event in bench 1b).
func extension(e event.Event, name string) (any, bool) {
	if c, ok := e.Context.(*event.EventContextV1); ok {
		v, ok := c.Extensions[name]
		return v, ok
	}
	v, ok := e.Extensions()[name]
	return v, ok
}

func stringExt(e event.Event, name string) string {
	v, ok := extension(e, name)
	if !ok {
		return ""
	}
	s, err := types.ToString(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return s
}

func uintExt(e event.Event, name string) uint64 {
	v, ok := extension(e, name)
	if !ok {
		return 0
	}
	n, err := types.ToInteger(v)
	if err != nil || n < 0 {
		return 0
	}
	return uint64(n)
}

// Data decodes the event's data into a new value of its registered kind.
func Data(e event.Event) (any, error) { return DecodeData(e.Type(), e.Data()) }

// Marshal returns the structured-mode JSON of an event.
// It is the SDK's encoding with its whitespace removed (data given with
// some) and strings as they are: json.Marshal would compact it through a
// scan that also escapes <, > and &, which on a 16 KB result cost a client
// as much as everything else of an append. Encoding that is not JSON goes
// to json.Marshal, which names the problem.
func Marshal(e event.Event) ([]byte, error) {
	if b, err := e.MarshalJSON(); err == nil {
		if v := jsontext.Value(b); v.Compact() == nil {
			return v, nil
		}
	}
	return json.Marshal(e)
}

// Unmarshal parses a structured-mode JSON CloudEvent.
func Unmarshal(b []byte) (event.Event, error) {
	// json.Unmarshal would check the syntax and then scan the value again
	// before handing it to the SDK's decoder: it is checked once here, by
	// the JSON v2 prototype's scanner in json.Valid's terms (a quarter of
	// its time on a 16 KB result), and the decoder called directly.
	if !validJSON(b) {
		var probe any
		err := json.Unmarshal(b, &probe) // names the syntax error
		return event.Event{}, fmt.Errorf("not JSON: %w", err)
	}
	if e, ok := unmarshalAroundData(b); ok {
		return e, nil
	}
	var e event.Event
	if err := e.UnmarshalJSON(b); err != nil {
		return event.Event{}, err
	}
	return e, nil
}

// dataAroundBytes is the size of data above which Unmarshal decodes the
// envelope without it.
const dataAroundBytes = 1024

// unmarshalAroundData decodes a CloudEvent of valid JSON b whose data is
// large JSON without the data, which it then takes as it stands: the SDK's
// decoder would copy a long string with escapes a byte at a time only to
// keep its bytes, a tool's result being such a string. It declines (false)
// whenever the SDK would do anything else with the data (data_base64, data
// named twice, another specversion or media type), and Unmarshal asks the
// SDK. FuzzUnmarshal holds the two equal.
func unmarshalAroundData(b []byte) (event.Event, bool) {
	start, end, ok := dataMember(b)
	if !ok || end-start < dataAroundBytes {
		return event.Event{}, false
	}
	envelope := make([]byte, 0, len(b)-(end-start)+4)
	envelope = append(append(append(envelope, b[:start]...), "null"...), b[end:]...)
	var e event.Event
	if err := e.UnmarshalJSON(envelope); err != nil || e.SpecVersion() != event.CloudEventsVersionV1 || e.DataBase64 {
		return event.Event{}, false
	}
	switch mt, _ := e.Context.GetDataMediaType(); mt {
	case "", event.ApplicationJSON, event.TextJSON, event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON:
	default:
		return event.Event{}, false // the SDK reads such data as a string
	}
	e.DataEncoded = bytes.Clone(b[start:end])
	return e, true
}

// dataMember finds the value of the member "data" of the JSON object b:
// false if there is none, or more than one, or a member named data_base64,
// or a name with an escape.
func dataMember(b []byte) (start, end int, ok bool) {
	i := jsonscan.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	for i++; ; i++ {
		i = jsonscan.SkipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return start, end, ok
		}
		nameEnd := jsonscan.StringEnd(b, i)
		if nameEnd < 0 {
			return 0, 0, false
		}
		name := b[i+1 : nameEnd-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			return 0, 0, false // a name with escapes may spell data
		}
		i = jsonscan.SkipSpace(b, nameEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		vStart := jsonscan.SkipSpace(b, i+1)
		vEnd := jsonscan.ValueEnd(b, vStart)
		if vEnd < 0 {
			return 0, 0, false
		}
		switch string(name) {
		case "data":
			if ok {
				return 0, 0, false
			}
			start, end, ok = vStart, vEnd, true
		case "data_base64":
			return 0, 0, false
		}
		if i = jsonscan.SkipSpace(b, vEnd); i >= len(b) || b[i] != ',' {
			return start, end, ok
		}
	}
}

// validJSON is json.Valid: invalid UTF-8 and repeated names are left to
// the checks after it (checkText, memberTwice). FuzzValidJSON holds the two
// equal.
func validJSON(b []byte) bool {
	return jsontext.Value(b).IsValid(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
}
