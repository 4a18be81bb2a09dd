package consume_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// handoffRig is one consumer with a Local, on one shard (Workers 1), that
// handles work.done events and records what it observed and handled.
type handoffRig struct {
	t     *testing.T
	nc    *nats.Conn
	c     *client.Client
	local *consume.Local
	name  string

	mu       sync.Mutex
	observed []string // "session/seq"
	handled  []string // "session/seq"
	// block, if set for an event ("session/seq"), is closed to let the
	// Observe of its first delivery (in the Consume callback) return.
	block map[string]chan struct{}
	// fail, if set for an event, fails its first handling.
	fail map[string]bool
}

func newHandoffRig(t *testing.T, name string) *handoffRig {
	nc, c := setup(t)
	return &handoffRig{t: t, nc: nc, c: c, local: consume.NewLocal(), name: name, block: map[string]chan struct{}{}, fail: map[string]bool{}}
}

func key(ev events.Stored) string { return fmt.Sprintf("%s/%d", ev.Session, ev.Seq) }

func (h *handoffRig) handler() consume.Handler {
	return consume.Handler{
		Name: h.name, Tokens: events.Tokens(), Types: []string{events.TypeWorkDone}, Workers: 1, Local: h.local,
		Observe: func(_ context.Context, ev events.Stored, _ uint64) {
			h.mu.Lock()
			h.observed = append(h.observed, key(ev))
			b := h.block[key(ev)]
			delete(h.block, key(ev))
			h.mu.Unlock()
			if b != nil {
				<-b
			}
		},
		Handle: func(_ context.Context, ev events.Stored) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.fail[key(ev)] {
				delete(h.fail, key(ev))
				return errors.New("first handling fails")
			}
			h.handled = append(h.handled, key(ev))
			return nil
		},
	}
}

func (h *handoffRig) run() *testrig.Service {
	hd := h.handler()
	return testrig.Run(h.t, h.name, func(ctx context.Context) error {
		return consume.Run(ctx, h.nc, hd, consume.RecordInSession(h.c), quiet)
	})
}

// emit appends data to session id and returns the stored event and its
// stream sequence, as a hand-off carries them.
func (h *handoffRig) emit(id string, data any) (events.Stored, uint64) {
	h.t.Helper()
	ctx := context.Background()
	a, err := h.c.Emit(ctx, id, data)
	if err != nil {
		h.t.Fatal(err)
	}
	evs, err := h.c.Log(ctx, id, client.Range{From: a.Seq, To: a.Seq})
	if err != nil || len(evs) != 1 {
		h.t.Fatalf("read %s %d back: %v %v", id, a.Seq, evs, err)
	}
	return evs[0], a.StreamSeq
}

func (h *handoffRig) start(id string) {
	h.t.Helper()
	if _, err := h.c.Start(context.Background(), id, events.SessionStarted{}); err != nil {
		h.t.Fatal(err)
	}
}

// count is how often the event was handled (successfully), and what was.
func (h *handoffRig) count(k string) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.handled {
		if v == k {
			n++
		}
	}
	return n, strings.Join(h.handled, " ")
}

// settled waits until the consumer has nothing pending or unacked and has
// delivered at least up to stream sequence seq, with no redelivery: every
// delivery was acked the first time.
func (h *handoffRig) settled(seq uint64) {
	h.t.Helper()
	js, _ := jetstream.New(h.nc)
	testrig.Eventually(h.t, 30*time.Second, "consumer settled", func() (bool, string) {
		cons, err := js.Consumer(context.Background(), events.StreamSessions, h.name)
		if err != nil {
			return false, err.Error()
		}
		ci, err := cons.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream >= seq,
			fmt.Sprintf("ack pending %d, pending %d, ack floor %d, redelivered %d", ci.NumAckPending, ci.NumPending, ci.AckFloor.Stream, ci.NumRedelivered)
	})
}

// A hand-off is handled at once, while its delivery is still held up, and
// the delivery is then acked without being handled again; a duplicated
// hand-off is dropped.
func TestHandOffIsHandledOnceAndItsDeliveryAckedUnhandled(t *testing.T) {
	h := newHandoffRig(t, "test-handoff")
	h.run()
	h.start("h1")
	h.start("h2")
	h.emit("h1", &events.ChunkAppended{Role: "user", Content: "x"})
	// Hold the Consume callback up on h2's event 2, so no delivery after it
	// arrives: h1's work.done waits in the client meanwhile.
	release := make(chan struct{})
	h.mu.Lock()
	h.block["h2/2"] = release
	h.mu.Unlock()
	h.emit("h2", &events.ChunkAppended{Role: "user", Content: "y"})
	testrig.Eventually(t, 30*time.Second, "h1/2 and h2/2 observed", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return strings.Contains(strings.Join(h.observed, " "), "h1/2") && len(h.block) == 0, strings.Join(h.observed, " ")
	})
	ev, seq := h.emit("h1", &events.WorkDone{WorkID: "a"})
	h.local.Hand(ev, seq)
	h.local.Hand(ev, seq) // duplicated
	testrig.Eventually(t, 30*time.Second, "the hand-off handled", func() (bool, string) {
		n, all := h.count("h1/3")
		return n == 1, all
	})
	h.mu.Lock()
	if got := strings.Join(h.observed, " "); !strings.HasSuffix(got, "h2/2 h1/3") {
		t.Errorf("observed %s: the hand-off was not shown to Observe before it was handled", got)
	}
	h.mu.Unlock()
	close(release)
	h.settled(seq)
	if n, all := h.count("h1/3"); n != 1 {
		t.Fatalf("h1/3 handled %d times (%s), want once", n, all)
	}
}

// A hand-off that comes before its session's previous event waits for it
// (it never overtakes an earlier delivery); one that comes after its own
// delivery, late, is dropped.
func TestHandOffWaitsForItsSessionsEarlierEventsAndALateOneIsDropped(t *testing.T) {
	h := newHandoffRig(t, "test-handoff-order")
	h.run()
	h.start("o")
	release := make(chan struct{})
	h.mu.Lock()
	h.block["o/2"] = release
	h.mu.Unlock()
	h.emit("o", &events.WorkDone{WorkID: "a"}) // 2, its Observe held up
	ev, seq := h.emit("o", &events.WorkDone{WorkID: "b"})
	h.local.Hand(ev, seq) // parked: o/2 has not been received
	close(release)
	h.settled(seq)
	if n, all := h.count("o/3"); n != 1 || all != "o/2 o/3" {
		t.Fatalf("handled %s, want o/2 then o/3, once each", all)
	}
	// Late: o/3's delivery came first. A sentinel handed after it on the
	// same shard shows the late one was not queued before it.
	h.local.Hand(ev, seq)
	ev4, seq4 := h.emit("o", &events.WorkDone{WorkID: "c"})
	h.local.Hand(ev4, seq4)
	h.settled(seq4)
	if n, all := h.count("o/4"); n != 1 || all != "o/2 o/3 o/4" {
		t.Fatalf("handled %s, want o/2 o/3 o/4, once each", all)
	}
}

// A hand-off whose handling fails leaves the event to its delivery, which
// handles it as usual.
func TestFailedHandOffIsHandledByItsDelivery(t *testing.T) {
	h := newHandoffRig(t, "test-handoff-fail")
	h.run()
	h.start("f1")
	h.start("f2")
	release := make(chan struct{})
	h.mu.Lock()
	h.block["f2/2"] = release
	h.fail["f1/2"] = true
	h.mu.Unlock()
	h.emit("f2", &events.ChunkAppended{Role: "user", Content: "y"})
	testrig.Eventually(t, 30*time.Second, "f2/2 observed", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.block) == 0, strings.Join(h.observed, " ")
	})
	ev, seq := h.emit("f1", &events.WorkDone{WorkID: "a"})
	h.local.Hand(ev, seq)
	testrig.Eventually(t, 30*time.Second, "the hand-off tried", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.fail["f1/2"], strings.Join(h.handled, " ")
	})
	close(release)
	h.settled(seq)
	if n, all := h.count("f1/2"); n != 1 {
		t.Fatalf("f1/2 handled %d times (%s), want once, by its delivery", n, all)
	}
}

// A consumer that stops with a hand-off taken and not handled (here: its
// handling fails as the process goes down, as a crash would leave it) loses
// nothing: the event's delivery is not acked, and the next consumer handles
// it, once.
func TestHandOffPendingAtAStopIsNotLost(t *testing.T) {
	h := newHandoffRig(t, "test-handoff-stop")
	gate := make(chan struct{})
	var stopping atomic.Bool
	hd := h.handler()
	handle := hd.Handle
	hd.Handle = func(ctx context.Context, ev events.Stored) error {
		switch key(ev) {
		case "s/2":
			<-gate // the shard is busy while s/3 is handed
		case "s/3":
			if stopping.Load() {
				return errors.New("the process is going down")
			}
		}
		return handle(ctx, ev)
	}
	first := testrig.Run(t, "first", func(ctx context.Context) error {
		return consume.Run(ctx, h.nc, hd, consume.RecordInSession(h.c), quiet)
	})
	h.start("s")
	h.emit("s", &events.WorkDone{WorkID: "a"})
	testrig.Eventually(t, 30*time.Second, "s/2 observed", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return strings.Contains(strings.Join(h.observed, " "), "s/2"), strings.Join(h.observed, " ")
	})
	ev, seq := h.emit("s", &events.WorkDone{WorkID: "b"})
	h.local.Hand(ev, seq)
	stopping.Store(true)
	stopped := make(chan error, 1)
	go func() { stopped <- first.Stop() }()
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n, all := h.count("s/3"); n != 0 {
		t.Fatalf("s/3 handled %d times (%s) by the consumer that stopped", n, all)
	}
	h.local.Hand(ev, seq) // after the stop: dropped
	h.run()               // the next consumer
	h.settled(seq)
	if n, all := h.count("s/3"); n != 1 {
		t.Fatalf("s/3 handled %d times (%s), want once, by the next consumer", n, all)
	}
}

// Hand-offs a consumer cannot take in order, or that name nothing it
// handles, do nothing: a handler that does not receive every kind ignores
// its Local (and says so), and a hand-off without a stream sequence or a
// session, or of a type not handled, is dropped before it reaches a shard.
// Either way each event is handled once, from its delivery.
func TestHandOffsAConsumerCannotTakeAreIgnored(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tokens []string
		hand   func(ev events.Stored, seq uint64) (events.Stored, uint64)
	}{
		{"not-every-kind", []string{events.TokenLifecycle, events.TokenControl, events.TokenConversation},
			func(ev events.Stored, seq uint64) (events.Stored, uint64) { return ev, seq }},
		{"no-stream-seq", events.Tokens(), func(ev events.Stored, _ uint64) (events.Stored, uint64) { return ev, 0 }},
		{"no-session", events.Tokens(), func(ev events.Stored, seq uint64) (events.Stored, uint64) {
			ev.Session = ""
			return ev, seq
		}},
		{"not-handled", events.Tokens(), func(ev events.Stored, seq uint64) (events.Stored, uint64) {
			ev.Type = events.TypeChunkAppended
			return ev, seq
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := testrig.NewLogWatch("hand-off")
			log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
			local := consume.NewLocal()
			var mu sync.Mutex
			handled := map[string]int{}
			name := "test-ignored-" + tc.name
			testrig.Run(t, name, func(ctx context.Context) error {
				return consume.Run(ctx, nc, consume.Handler{
					Name: name, Tokens: tc.tokens, Types: []string{events.TypeWorkDone}, Workers: 1, Local: local,
					Handle: func(_ context.Context, ev events.Stored) error {
						mu.Lock()
						defer mu.Unlock()
						handled[ev.ID]++
						return nil
					},
				}, consume.RecordInSession(c), log)
			})
			id := "i-" + tc.name
			if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
				t.Fatal(err)
			}
			a, err := c.Emit(ctx, id, &events.WorkDone{WorkID: "a"})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := c.Log(ctx, id, client.Range{From: a.Seq, To: a.Seq})
			if err != nil || len(evs) != 1 {
				t.Fatalf("read back: %v %v", evs, err)
			}
			local.Hand(tc.hand(evs[0], a.StreamSeq))
			testrig.Eventually(t, 30*time.Second, "handled", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return handled[a.ID] > 0, fmt.Sprint(handled)
			})
			// The session's next event is handled after it, on the same
			// shard: nothing of the ignored hand-off is still to come.
			b, err := c.Emit(ctx, id, &events.WorkDone{WorkID: "b"})
			if err != nil {
				t.Fatal(err)
			}
			testrig.Eventually(t, 30*time.Second, "the next handled", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return handled[b.ID] > 0, fmt.Sprint(handled)
			})
			mu.Lock()
			defer mu.Unlock()
			if handled[a.ID] != 1 {
				t.Errorf("handled %d times, want once", handled[a.ID])
			}
			logged := sink.String()
			if strings.Contains(logged, `"msg":"hand-off"`) || strings.Contains(logged, `"handed":true`) {
				t.Errorf("a hand-off reached a shard:\n%s", logged)
			}
			if ignored := strings.Contains(logged, "hand-offs ignored"); ignored != (tc.name == "not-every-kind") {
				t.Errorf("warned of ignored hand-offs: %v\n%s", ignored, logged)
			}
		})
	}
}
