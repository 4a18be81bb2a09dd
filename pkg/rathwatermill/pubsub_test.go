package rathwatermill_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/rathwatermill"
)

// acme is the tenant's user the tests read and write as: no JetStream
// access, only the ledger and its tenant's live subjects.
var acme = events.Principal{Tenant: "acme", User: "worker"}

// rig starts a server, a tenant's user and a ledger, and returns the
// user's client.
func rig(t *testing.T) *client.Client {
	t.Helper()
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	// The user first: adding one reloads the server (natstest.ConnectUser).
	nc := natstest.ConnectUser(t, url, acme)
	testrig.Ledger(t, url)
	c, err := client.New(nc, client.As(acme), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// chunkMarshaler carries the suite's opaque payloads ("x", "42") as the
// content of a conversation chunk: Rath's data is typed JSON, checked
// against the type's schema, which a raw payload is not.
type chunkMarshaler struct{ rathwatermill.JSONMarshaler }

func (m chunkMarshaler) Marshal(sessionID string, msg *message.Message) (event.Event, error) {
	data, err := json.Marshal(events.ChunkAppended{Role: events.RoleUser, Content: string(msg.Payload)})
	if err != nil {
		return event.Event{}, err
	}
	cp := msg.Copy()
	cp.Payload = data
	cp.Metadata.Set(rathwatermill.MetadataType, events.TypeChunkAppended)
	return m.JSONMarshaler.Marshal(sessionID, cp)
}

func (m chunkMarshaler) Unmarshal(ev events.Stored) (*message.Message, error) {
	msg, err := m.JSONMarshaler.Unmarshal(ev)
	if err != nil {
		return nil, err
	}
	var chunk events.ChunkAppended
	if err := json.Unmarshal(msg.Payload, &chunk); err != nil {
		return nil, fmt.Errorf("event %d of %s: %w", ev.Seq, ev.Session, err)
	}
	msg.Payload = []byte(chunk.Content)
	return msg, nil
}

// TestUniversalPubSub runs Watermill's own Pub/Sub suite against a real
// ledger on an embedded JetStream. A topic is a session (started by the
// publisher when missing); the subscriber delivers its chunks, not the
// start. The features declared:
//
//   - ConsumerGroups: a Consumer is a durable feed; each group reads every
//     event, members of one group share them.
//   - ExactlyOnceDelivery false: at least once (an event delivered and not
//     acked when a subscriber closes, or whose ack is lost, comes again).
//   - GuaranteedOrder: a feed has one event outstanding, so even ten
//     subscribers of one group receive a session's events in order, and
//     nothing follows an event until it is acked (TestNoAck).
//   - Persistent: sessions are kept for good and feeds are durable.
//   - NewSubscriberReceivesOldMessages false: a new subscriber of an
//     existing group continues where the group is; a new group (Consumer)
//     starts at the first event, which TestConsumerGroups checks.
//   - RestartServiceCommand none: the server is embedded, not a service a
//     command restarts; TestSubscriberResumesAfterRestart restarts the
//     subscriber instead.
//   - ForceShort: the suite's short message counts, for two shared cores.
func TestUniversalPubSub(t *testing.T) {
	c := rig(t)
	features := tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  true,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
		ForceShort:                       true,
	}
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub, err := rathwatermill.NewPublisher(c, rathwatermill.PublisherConfig{Marshaler: chunkMarshaler{}, StartMissing: true, Task: "watermill suite"})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := rathwatermill.NewSubscriber(c, rathwatermill.SubscriberConfig{
			Consumer:  group,
			Types:     []string{events.TypeChunkAppended},
			Marshaler: chunkMarshaler{},
			NackDelay: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "suite") },
		newPubSub)
}
