package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// Two ledgers on one JetStream, racing appends to the same sessions: each
// accepted event is stored once, sequences are gap-free, chains verify.
func TestTwoLedgersRaceOnTheSameSessions(t *testing.T) {
	_, nc1 := natstest.Start(t)
	a := serveOn(t, nc1, "a")
	nc2 := natstest.Connect(t, nc1.ConnectedUrl())
	b := serveOn(t, nc2, "b")
	ledgers := []*rig{a, b}
	ctx := context.Background()

	const sessions, writers, perWriter = 4, 4, 15
	for s := 0; s < sessions; s++ {
		a.start(t, fmt.Sprintf("race-%d", s))
	}
	var (
		mu    sync.Mutex
		acked = map[string]uint64{}
		wg    sync.WaitGroup
		errs  = make(chan error, sessions*writers)
	)
	for s := 0; s < sessions; s++ {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(id string, l *rig) {
				defer wg.Done()
				for i := 0; i < perWriter; i++ {
					ev, _ := events.New(id, chunk(fmt.Sprintf("w%d-%d", w, i)))
					// Call the ledger directly (not over the queue group) so
					// both ledgers certainly serve this session at once.
					ack, err := l.l.Append(ctx, ev)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					acked[ack.ID] = ack.Seq
					mu.Unlock()
				}
			}(fmt.Sprintf("race-%d", s), ledgers[w%2])
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append: %v", err)
	}
	for s := 0; s < sessions; s++ {
		id := fmt.Sprintf("race-%d", s)
		log, err := a.c.Log(ctx, id, client.Range{From: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 1+writers*perWriter {
			t.Fatalf("%s holds %d events, want %d", id, len(log), 1+writers*perWriter)
		}
		seen := map[string]bool{}
		for i, ev := range log {
			if ev.Seq != uint64(i+1) {
				t.Fatalf("%s: event %d has seq %d", id, i, ev.Seq)
			}
			if seen[ev.ID] {
				t.Fatalf("%s: %s stored twice", id, ev.ID)
			}
			seen[ev.ID] = true
			if seq, ok := acked[ev.ID]; ok && seq != ev.Seq {
				t.Fatalf("%s: %s acked as %d, stored as %d", id, ev.ID, seq, ev.Seq)
			}
		}
		a.verifyOK(t, id)
		// Both ledgers agree on the head, whichever wrote last.
		sa, _ := a.l.State(ctx, id, 0)
		sb, _ := b.l.State(ctx, id, 0)
		if sa.Hash != sb.Hash || sa.Seq != sb.Seq {
			t.Fatalf("%s: ledgers disagree: %d/%s vs %d/%s", id, sa.Seq, sa.Hash, sb.Seq, sb.Hash)
		}
	}
}

// A fresh ledger (empty cache) rebuilds every session from snapshots and
// the events after them, and continues the chains.
func TestNewLedgerRecoversFromTheStream(t *testing.T) {
	_, nc := natstest.Start(t)
	a := serveOn(t, nc, "a")
	ctx := context.Background()
	a.start(t, "rec")
	for i := 0; i < 3*testK+1; i++ {
		a.emit(t, "rec", usage(1, 1))
	}
	want, _ := a.l.State(ctx, "rec", 0)

	b := serveOn(t, natstest.Connect(t, nc.ConnectedUrl()), "b")
	got, err := b.l.State(ctx, "rec", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "recovered state", got, want)
	ack, err := b.l.Append(ctx, mustEvent(t, "rec", chunk("after recovery")))
	if err != nil || ack.Seq != want.Seq+1 {
		t.Fatalf("append after recovery: %+v %v", ack, err)
	}
	a.verifyOK(t, "rec")
}

func mustEvent(t *testing.T, id string, data any) event.Event {
	t.Helper()
	ev, err := events.New(id, data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
