package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// answer is the events of one model answer, as the agent worker records it.
func answer(t *testing.T, id, turn string) []event.Event {
	t.Helper()
	data := []any{
		chunk("reading the file"),
		&events.ToolRequested{CallID: turn + "-0", Tool: "read", Arguments: []byte(`{"path":"a.go"}`), Agent: "coder"},
		usage(10, 5),
		&events.TurnCompleted{TurnID: turn, Agent: "coder", StopReason: "tool_use", ToolCalls: 1},
	}
	out := make([]event.Event, len(data))
	for i, d := range data {
		ev, err := events.New(id, d, events.WithID(fmt.Sprintf("%s-%s-%d", id, turn, i)))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ev
	}
	return out
}

func TestAtomicAppendStoresAnAnswerInOneBatch(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "at-1")
	acks, err := r.c.AppendAtomic(ctx, answer(t, "at-1", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != 4 {
		t.Fatalf("%d acks, want 4", len(acks))
	}
	for i, a := range acks {
		if a.Seq != uint64(2+i) || a.Duplicate || a.Sig == "" {
			t.Fatalf("ack %d: %+v, want seq %d, fresh, signed", i, a, 2+i)
		}
		if i > 0 && a.StreamSeq != acks[i-1].StreamSeq+1 {
			t.Fatalf("stream sequences not consecutive: %d after %d", a.StreamSeq, acks[i-1].StreamSeq)
		}
	}
	// The acks name what is stored: each event's own sequence, hash and
	// stream sequence.
	log, err := r.c.Log(ctx, "at-1", client.Range{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range log {
		if ev.Seq != acks[i].Seq || ev.Hash != acks[i].Hash || ev.ID != acks[i].ID || ev.Sig != acks[i].Sig {
			t.Fatalf("stored %d/%s/%s, ack says %d/%s/%s", ev.Seq, ev.ID, ev.Hash, acks[i].Seq, acks[i].ID, acks[i].Hash)
		}
	}
	st, err := r.c.Overview(ctx, api.StateRequest{Session: "at-1"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Seq != 5 || st.Usage.Total.In != 10 {
		t.Fatalf("state at %d with %d tokens in, want 5 and 10", st.Seq, st.Usage.Total.In)
	}
	r.verifyOK(t, "at-1")

	// Proposed again (a redelivered turn): the same acks, nothing stored twice.
	again, err := r.c.AppendAtomic(ctx, answer(t, "at-1", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		if !again[i].Duplicate || again[i].Seq != acks[i].Seq || again[i].Hash != acks[i].Hash {
			t.Fatalf("retry ack %d: %+v, want the original %+v marked duplicate", i, again[i], acks[i])
		}
	}
	// And again through a ledger that never saw it (no cache of recent acks).
	r2 := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "ledger-b")
	again2, err := r2.l.AppendAtomic(ctx, answer(t, "at-1", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(again2) != 4 || !again2[3].Duplicate || again2[3].Seq != 5 {
		t.Fatalf("retry on another ledger: %+v", again2)
	}
	head(t, r, "at-1", 5)
}

// head checks the session's head.
func head(t *testing.T, r *rig, id string, want uint64) {
	t.Helper()
	ov, err := r.c.Overview(context.Background(), api.StateRequest{Session: id, Tail: 1, Clip: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ov.Seq != want {
		t.Fatalf("%s is at %d, want %d", id, ov.Seq, want)
	}
}

// Each refusal refuses the whole: nothing of the batch is stored, the
// refusal names the event it is about, and it is recorded.
func TestAtomicAppendIsAllOrNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "an-1")
	r.start(t, "an-2")
	r.emit(t, "an-1", chunk("first"))

	bad := func(edit func([]event.Event) []event.Event) []event.Event {
		return edit(answer(t, "an-1", "t1"))
	}
	cases := []struct {
		name string
		evs  []event.Event
		code api.Code
		says string
	}{
		{"schema", bad(func(evs []event.Event) []event.Event {
			_ = evs[2].SetData(event.ApplicationJSON, map[string]any{"agent": 7})
			return evs
		}), api.CodeSchema, "event 2 of the atomic append"},
		{"two sessions", bad(func(evs []event.Event) []event.Event {
			evs[3].SetSubject("an-2")
			return evs
		}), api.CodeMalformed, "event 3 of the atomic append: an atomic append is for one session"},
		{"stale head", bad(func(evs []event.Event) []event.Event {
			evs[0].SetExtension(events.ExtExpectedSeq, 7)
			return evs
		}), api.CodeStale, "expected head 7"},
		{"expectation not first", bad(func(evs []event.Event) []event.Event {
			evs[1].SetExtension(events.ExtExpectedSeq, 3)
			return evs
		}), api.CodeMalformed, "only the first event"},
		{"same ID twice", bad(func(evs []event.Event) []event.Event {
			evs[2].SetID(evs[1].ID())
			return evs
		}), api.CodeMalformed, "appears twice"},
		{"unknown type", bad(func(evs []event.Event) []event.Event {
			evs[1].SetType("rath.made.up")
			return evs
		}), api.CodeUnknownType, "event 1"},
		{"ledger operation", bad(func(evs []event.Event) []event.Event {
			evs[1].SetType(events.TypeSessionForked)
			return evs
		}), api.CodeUseOperation, "event 1"},
		{"missing session", func() []event.Event {
			evs := answer(t, "an-missing", "t1")
			return evs
		}(), api.CodeNotFound, "does not exist"},
		{"closes mid-batch", bad(func(evs []event.Event) []event.Event {
			closed, err := events.New("an-1", &events.SessionClosed{Reason: "done"})
			if err != nil {
				t.Fatal(err)
			}
			return []event.Event{evs[0], closed, evs[2]}
		}), api.CodeClosed, "event 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.c.AppendAtomic(ctx, c.evs)
			wantCode(t, err, c.code)
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("refusal %q does not say %q", err, c.says)
			}
			head(t, r, "an-1", 2)
		})
	}
	if n := len(r.rejections(t, "an-1")); n < 6 {
		t.Fatalf("%d rejections recorded for an-1, want one per refused batch", n)
	}
	// After all that the session takes the answer whole.
	if _, err := r.c.AppendAtomic(ctx, answer(t, "an-1", "t1")); err != nil {
		t.Fatal(err)
	}
	head(t, r, "an-1", 6)
	r.verifyOK(t, "an-1")
}

// A batch proposed again must be the same events: one with some events
// stored and others new is refused, and nothing more is stored.
func TestAtomicAppendRefusesAPartlyStoredBatch(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "ap-1")
	evs := answer(t, "ap-1", "t1")
	if _, err := r.c.AppendAtomic(ctx, evs[:2]); err != nil {
		t.Fatal(err)
	}
	_, err := r.c.AppendAtomic(ctx, evs)
	wantCode(t, err, api.CodeDuplicateID)
	head(t, r, "ap-1", 3)
}

// Two ledgers appending answers to the same sessions: every answer is
// stored whole and contiguous, and every chain verifies.
func TestTwoLedgersRaceAtomicAppends(t *testing.T) {
	_, nc1 := natstest.Start(t)
	a := serveOn(t, nc1, "a")
	b := serveOn(t, natstest.Connect(t, nc1.ConnectedUrl()), "b")
	ctx := context.Background()
	const sessions, turns = 3, 8
	for s := range sessions {
		a.start(t, fmt.Sprintf("ar-%d", s))
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*turns)
	for k := range turns {
		for s := range sessions {
			wg.Add(1)
			go func(l *rig) {
				defer wg.Done()
				id := fmt.Sprintf("ar-%d", s)
				if _, err := l.l.AppendAtomic(ctx, answer(t, id, fmt.Sprintf("t%d", k))); err != nil {
					errs <- fmt.Errorf("%s turn %d: %w", id, k, err)
				}
			}([]*rig{a, b}[k%2])
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for s := range sessions {
		id := fmt.Sprintf("ar-%d", s)
		log, err := a.c.Log(ctx, id, client.Range{From: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 4*turns {
			t.Fatalf("%s holds %d events, want %d", id, len(log), 4*turns)
		}
		// Each answer's four events are contiguous and in order.
		for i := 0; i < len(log); i += 4 {
			turn := strings.TrimPrefix(log[i].ID, id+"-")
			turn = strings.TrimSuffix(turn, "-0")
			for j := range 4 {
				if want := fmt.Sprintf("%s-%s-%d", id, turn, j); log[i+j].ID != want {
					t.Fatalf("%s at %d: %s, want %s", id, log[i+j].Seq, log[i+j].ID, want)
				}
			}
		}
		a.verifyOK(t, id)
	}
}

// A body that is not a JSON array of events, an empty array, an event that
// does not parse, or more events than an atomic batch holds: each refused
// with a code naming it and recorded, nothing stored.
func TestMalformedAtomicAppend(t *testing.T) {
	r := newRig(t)
	r.start(t, "am")
	good := mustEvent(t, "am", chunk("fine"))
	raw, _ := good.MarshalJSON()
	tooMany := "[" + strings.Repeat(string(raw)+",", eventstore.MaxAtomic) + string(raw) + "]"
	for _, c := range []struct {
		body string
		code api.Code
	}{
		{`{"not":"an array"}`, api.CodeMalformed},
		{`[{"specversion":"1.0"`, api.CodeMalformed},
		{`[]`, api.CodeMalformed},
		{`[{"specversion":"1.0","id":"x"},` + string(raw) + `]`, api.CodeMalformed},
		{tooMany, api.CodeTooLarge},
	} {
		reply, err := r.nc.Request(events.DefaultClient.Ledger(events.OpAtomic), []byte(c.body), testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(api.HeaderError); code != string(c.code) {
			t.Fatalf("%.60s: error header %q, want %s; body %.200s", c.body, code, c.code, reply.Data)
		}
	}
	if n := len(r.rejections(t, "unknown")); n < 3 {
		t.Fatalf("%d rejections recorded without a session, want one per refused body", n)
	}
	head(t, r, "am", 1)
}
