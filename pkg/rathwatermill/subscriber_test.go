package rathwatermill_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/rathwatermill"
)

func subscriber(t *testing.T, c *client.Client, consumer string, types ...string) *rathwatermill.Subscriber {
	t.Helper()
	s, err := rathwatermill.NewSubscriber(c, rathwatermill.SubscriberConfig{Consumer: consumer, Types: types})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func subscribe(t *testing.T, s *rathwatermill.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	ch, err := s.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// next receives a message; the test's deadline bounds the wait.
func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	msg, ok := <-ch
	if !ok {
		t.Fatal("the subscription ended")
	}
	return msg
}

func emitWork(t *testing.T, c *client.Client, sessionID string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if _, err := c.Emit(ctx, sessionID, &events.WorkPending{WorkID: id, Kind: "task"}); err != nil {
			t.Fatal(err)
		}
	}
}

func workID(t *testing.T, msg *message.Message) string {
	t.Helper()
	var w events.WorkPending
	if err := json.Unmarshal(msg.Payload, &w); err != nil {
		t.Fatalf("payload %s: %v", msg.Payload, err)
	}
	return w.WorkID
}

// A feed resumes where its consumer left it: a new subscriber of the same
// consumer, after the first closed, gets the event the first had not acked
// and then the rest, never the acked one; a new consumer starts at the
// first event.
func TestSubscriberResumesAfterRestart(t *testing.T) {
	c := rig(t)
	if _, err := c.Start(context.Background(), "resume", events.SessionStarted{Task: "resume"}); err != nil {
		t.Fatal(err)
	}
	emitWork(t, c, "resume", "w1", "w2", "w3")

	first := subscriber(t, c, "resumer", events.TypeWorkPending)
	ch := subscribe(t, first, rathwatermill.TopicAll)
	if m := next(t, ch); workID(t, m) != "w1" {
		t.Fatalf("first delivery %s, want w1", workID(t, m))
	} else {
		m.Ack()
	}
	if m := next(t, ch); workID(t, m) != "w2" {
		t.Fatalf("second delivery %s, want w2", workID(t, m))
	}
	// Closed with w2 delivered and not acked: it goes back to the feed.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	again := subscribe(t, subscriber(t, c, "resumer", events.TypeWorkPending), rathwatermill.TopicAll)
	for _, want := range []string{"w2", "w3"} {
		m := next(t, again)
		if got := workID(t, m); got != want {
			t.Fatalf("after the restart: %s, want %s", got, want)
		}
		if want == "w2" && m.Metadata.Get(rathwatermill.MetadataDelivered) != "2" {
			t.Errorf("w2 delivered %s times, want 2", m.Metadata.Get(rathwatermill.MetadataDelivered))
		}
		m.Ack()
	}

	fresh := subscribe(t, subscriber(t, c, "another", events.TypeWorkPending), "resume")
	if m := next(t, fresh); workID(t, m) != "w1" {
		t.Fatalf("a new consumer starts at %s, want w1", workID(t, m))
	}
}

// Several subscribers of one consumer on every session receive each
// session's events in order, a nacked event again before the next of its
// session.
func TestTopicAllKeepsEachSessionsOrder(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	for _, id := range []string{"order-a", "order-b"} {
		if _, err := c.Start(ctx, id, events.SessionStarted{Task: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		emitWork(t, c, "order-a", "a"+strconv.Itoa(i))
		emitWork(t, c, "order-b", "b"+strconv.Itoa(i))
	}
	merged := make(chan *message.Message)
	for range 3 {
		ch := subscribe(t, subscriber(t, c, "ordered", events.TypeWorkPending), rathwatermill.TopicAll)
		go func() {
			for m := range ch {
				merged <- m
			}
		}()
	}
	var got []string
	nacked := false
	for len(got) < 10 {
		m := <-merged
		id := workID(t, m)
		if id == "a2" && !nacked {
			nacked = true
			m.Nack()
			continue
		}
		got = append(got, id)
		m.Ack()
	}
	last := map[byte]int{'a': -1, 'b': -1}
	for _, id := range got {
		n, _ := strconv.Atoi(id[1:])
		if n != last[id[0]]+1 {
			t.Fatalf("out of order: %v", got)
		}
		last[id[0]] = n
	}
}

// The publisher's refusals are the ledger's, named.
func TestPublisherRefusalsNameTheProblem(t *testing.T) {
	c := rig(t)
	if _, err := c.Start(context.Background(), "refusals", events.SessionStarted{Task: "refusals"}); err != nil {
		t.Fatal(err)
	}
	pub, err := rathwatermill.NewPublisher(c, rathwatermill.PublisherConfig{Marshaler: rathwatermill.JSONMarshaler{Type: events.TypeWorkDone}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	msg := func(payload string, md ...string) *message.Message {
		m := message.NewMessage(events.NewID(), []byte(payload))
		for i := 0; i+1 < len(md); i += 2 {
			m.Metadata.Set(md[i], md[i+1])
		}
		return m
	}
	cases := []struct {
		name  string
		topic string
		msg   *message.Message
		is    error
		words string
	}{
		{"schema", "refusals", msg(`{}`), api.ErrSchema, "work_id"},
		{"stale", "refusals", msg(`{"work_id":"w"}`, rathwatermill.MetadataExpectedSeq, "7"), api.ErrStale, "stale"},
		{"missing session", "nowhere", msg(`{"work_id":"w"}`), api.ErrNotFound, "nowhere"},
		{"unknown type", "refusals", msg(`{}`, rathwatermill.MetadataType, "rath.nope"), nil, "rath.nope"},
		{"not JSON", "refusals", msg(`x`), nil, "not valid JSON"},
		{"no session", rathwatermill.TopicAll, msg(`{"work_id":"w"}`), nil, rathwatermill.MetadataSession},
		{"bad topic", "a.b", msg(`{"work_id":"w"}`), nil, "a.b"},
	}
	for _, tc := range cases {
		err := pub.Publish(tc.topic, tc.msg)
		if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.is, tc.words)
		}
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("refusals", msg(`{"work_id":"w"}`)); !errors.Is(err, rathwatermill.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// A published message comes back as it was sent (UUID, payload as JSON,
// metadata),
// is stored as an event with an ID derived from its session and UUID, with
// its correlation ID, and publishing it again stores nothing twice.
func TestPublishedMessageRoundTrips(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	if _, err := c.Start(ctx, "trip", events.SessionStarted{Task: "trip"}); err != nil {
		t.Fatal(err)
	}
	pub, err := rathwatermill.NewPublisher(c, rathwatermill.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sent := message.NewMessage("uuid-1", []byte(`{"work_id":"w1","outcome":"ok"}`))
	sent.Metadata.Set(rathwatermill.MetadataType, events.TypeWorkDone)
	sent.Metadata.Set(rathwatermill.MetadataSession, "trip")
	sent.Metadata.Set("correlation_id", "corr-1")
	sent.Metadata.Set("note", "kept")
	for range 2 {
		if err := pub.Publish(rathwatermill.TopicAll, sent); err != nil {
			t.Fatal(err)
		}
	}
	log, err := c.Log(ctx, "trip", client.Range{})
	if err != nil || len(log) != 2 {
		t.Fatalf("log: %d events, %v; want the start and one event", len(log), err)
	}
	if ev := log[1]; ev.ID != events.DerivedID("watermill", "trip", "uuid-1") || ev.Correlation != "corr-1" || ev.Actor != acme.String() {
		t.Fatalf("stored %+v", ev)
	}
	m := next(t, subscribe(t, subscriber(t, c, "trip", events.TypeWorkDone), "trip"))
	m.Ack()
	// The data comes back as stored: the same JSON, in canonical form.
	if m.UUID != "uuid-1" || string(m.Payload) != `{"outcome":"ok","work_id":"w1"}` {
		t.Fatalf("received %s %s", m.UUID, m.Payload)
	}
	for k, want := range map[string]string{
		"note": "kept", "correlation_id": "corr-1", rathwatermill.MetadataSession: "trip",
		rathwatermill.MetadataType: events.TypeWorkDone, rathwatermill.MetadataSeq: "2",
		rathwatermill.MetadataActor: acme.String(), rathwatermill.MetadataEventID: log[1].ID,
	} {
		if got := m.Metadata.Get(k); got != want {
			t.Errorf("metadata %s = %q, want %q", k, got, want)
		}
	}
}
