package consume_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
)

// handled records what a handler handled, per session, in order.
type handled struct {
	mu   sync.Mutex
	seqs map[string][]uint64
	bad  []string
	got  chan events.Stored
}

func newHandled() *handled {
	return &handled{seqs: map[string][]uint64{}, got: make(chan events.Stored, 256)}
}

func (h *handled) add(ctx context.Context, ev events.Stored) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := consume.Attempt(ctx); a != 1 {
		h.bad = append(h.bad, fmt.Sprintf("%s %d handled at attempt %d", ev.Session, ev.Seq, a))
	}
	h.seqs[ev.Session] = append(h.seqs[ev.Session], ev.Seq)
	h.got <- ev
}

// until waits for the handling of session id's event seq.
func (h *handled) until(t *testing.T, id string, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		select {
		case ev := <-h.got:
			if ev.Session == id && ev.Seq == seq {
				return
			}
		case <-ctx.Done():
			t.Fatalf("%s %d never handled", id, seq)
		}
	}
}

// inOrder fails unless session id's events from..to were each handled
// once, in order, at their first attempt.
func (h *handled) inOrder(t *testing.T, id string, from, to uint64) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) > 0 {
		t.Fatal(h.bad)
	}
	got := h.seqs[id]
	if len(got) != int(to-from+1) {
		t.Fatalf("%s handled %v, want %d..%d once each", id, got, from, to)
	}
	for i, seq := range got {
		if seq != from+uint64(i) {
			t.Fatalf("%s handled out of order: %v", id, got)
		}
	}
}

// ackWaitsPass returns once n ack waits have passed on the server's clock:
// a message a consumer with that ack wait holds unacked (the only
// lifecycle event stored, a session's start) is redelivered n times.
func ackWaitsPass(t *testing.T, nc *nats.Conn, ackWait time.Duration, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	cons, err := js.CreateConsumer(ctx, events.StreamSessions, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, FilterSubject: events.KindFilter(events.TokenLifecycle)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= n; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("control delivery %d: %v", i, err)
		}
		if md, _ := m.Metadata(); md == nil || md.NumDelivered != uint64(i+1) {
			t.Fatalf("control delivery %d: %+v", i, md)
		}
	}
}

// Deliveries waiting behind a handler that runs past the ack wait are kept
// alive too: none is redelivered, each is handled once, at its first
// attempt.
func TestQueuedDeliveriesOutliveTheAckWait(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	const ackWait = time.Second
	h := newHandled()
	release, started := make(chan struct{}), make(chan struct{})
	var observed sync.WaitGroup
	observed.Add(5)
	run(t, nc, c, consume.Handler{
		Name: "test-queued", Tokens: []string{events.TokenConversation}, Workers: 1, AckWait: ackWait,
		Observe: func(_ context.Context, ev events.Stored, _ uint64) {
			if ev.Seq <= 6 {
				observed.Done()
			}
		},
		Handle: func(ctx context.Context, ev events.Stored) error {
			if ev.Seq == 2 {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			h.add(ctx, ev)
			return nil
		},
	})
	if _, err := c.Start(ctx, "q", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.Emit(ctx, "q", &events.ChunkAppended{Role: "user", Content: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	observed.Wait() // the four after the first wait in the shard
	ackWaitsPass(t, nc, ackWait, 3)
	close(release)
	h.until(t, "q", 6)
	// A redelivery would have come before this one, stored after the hold.
	if _, err := c.Emit(ctx, "q", &events.ChunkAppended{Role: "user", Content: "y"}); err != nil {
		t.Fatal(err)
	}
	h.until(t, "q", 7)
	h.inOrder(t, "q", 2, 7)
}

// A shard that is full naks what comes for it instead of stalling the one
// callback: another shard's session is handled meanwhile. The naked events
// come back and are handled in their session's order, with the events
// stored after them, and their naks count as no attempts.
func TestFullShardStallsNoOtherSession(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	const workers = 2
	shardOf := func(id string) uint32 {
		f := fnv.New32a()
		f.Write([]byte(id))
		return f.Sum32() % workers
	}
	busy, other := "busy", ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprint("other-", i); shardOf(id) != shardOf(busy) {
			other = id
		}
	}
	h := newHandled()
	release, started := make(chan struct{}), make(chan struct{})
	naked := testrig.NewLogWatch("shard busy")
	testrig.Run(t, "run", func(ctx context.Context) error {
		return consume.Run(ctx, nc, consume.Handler{
			Name: "test-full", Tokens: []string{events.TokenConversation}, Workers: workers,
			Handle: func(ctx context.Context, ev events.Stored) error {
				if ev.Session == busy && ev.Seq == 2 {
					close(started)
					<-release
				}
				h.add(ctx, ev)
				return nil
			},
		}, consume.RecordInSession(c), slog.New(slog.NewTextHandler(naked, &slog.HandlerOptions{Level: slog.LevelDebug})))
	})
	for _, id := range []string{busy, other} {
		if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
			t.Fatal(err)
		}
	}
	emit := func(id string, n int) {
		for range n {
			if _, err := c.Emit(ctx, id, &events.ChunkAppended{Role: "user", Content: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const shard = workers * 64 / 2 // what a shard holds: half the consumer's MaxAckPending
	emit(busy, 1+shard+8)          // one handled, a full shard, eight more
	<-started
	<-naked.Seen()
	emit(other, 1)
	h.until(t, other, 2)
	close(release)
	emit(busy, 5) // likely while the naked ones are still out
	h.until(t, busy, 1+shard+8+5+1)
	h.inOrder(t, busy, 2, 1+shard+8+5+1)
	h.inOrder(t, other, 2, 2)
}
