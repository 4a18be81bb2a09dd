package memory

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
)

// testBackend is the contract every Backend passes: conditional appends,
// the last record, positions that grow, and a follower that sees every
// record in order, old and new.
func testBackend(t *testing.T, b Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rec, pos, err := b.Last(ctx, "a"); rec != nil || pos != 0 || err != nil {
		t.Fatalf("Last of a new item = %v, %d, %v", rec, pos, err)
	}
	p1, err := b.Append(ctx, memoryapi.Record{ItemID: "a", Op: memoryapi.OpWrite, Version: 1, Versions: 1, Content: "one"}, 0, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, memoryapi.Record{ItemID: "a", Op: memoryapi.OpWrite, Version: 1, Versions: 1, Content: "rival"}, 0, "w1b"); !errors.Is(err, ErrConflict) {
		t.Fatalf("append on a stale position: %v, want ErrConflict", err)
	}
	p2, err := b.Append(ctx, memoryapi.Record{ItemID: "b", Op: memoryapi.OpWrite, Version: 1, Versions: 1, Content: "two"}, 0, "w2")
	if err != nil || p2 <= p1 {
		t.Fatalf("second append at %d after %d: %v", p2, p1, err)
	}
	rec, pos, err := b.Last(ctx, "a")
	if err != nil || rec == nil || pos != p1 || rec.Content != "one" {
		t.Fatalf("Last(a) = %+v, %d, %v", rec, pos, err)
	}
	if head, err := b.Head(ctx); err != nil || head != p2 {
		t.Fatalf("Head = %d, %v; want %d", head, err, p2)
	}
	got := make(chan string, 4)
	fctx, stop := context.WithCancel(ctx)
	wait, err := b.Follow(fctx, func(r memoryapi.Record, _ uint64) error { got <- r.Content; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, memoryapi.Record{ItemID: "a", Op: memoryapi.OpWrite, Version: 2, Versions: 2, Content: "three"}, p1, "w3"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one", "two", "three"} {
		select {
		case c := <-got:
			if c != want {
				t.Fatalf("followed %q, want %q", c, want)
			}
		case <-ctx.Done():
			t.Fatalf("follower never saw %q", want)
		}
	}
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestJetStreamBackend(t *testing.T) {
	_, nc := natstest.Start(t)
	b, err := OpenJetStream(context.Background(), nc, StreamConfig{Replicas: 1, DedupeWindow: 10 * time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// Opening twice is harmless.
	if _, err := OpenJetStream(context.Background(), nc, StreamConfig{Replicas: 1, DedupeWindow: 10 * time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	testBackend(t, b)
}
