package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

// Events reads a range longer than one ledger page, in order, and stops
// when its function says so.
func TestEventsReadsEveryPage(t *testing.T) {
	_, nc := natstest.Start(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, nc, service.ConfigIn(t.TempDir()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { stop(); <-done })
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "long", events.SessionStarted{Task: "many events"}); err != nil {
		t.Fatal(err)
	}
	const n = api.MaxLogPage + 300
	for sent := 1; sent < n; {
		var batch []event.Event
		for ; sent < n && len(batch) < api.MaxBatch; sent++ {
			ev, err := events.New("long", &events.ChunkAppended{Role: events.RoleUser, Content: "x"})
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ev)
		}
		res, err := c.AppendBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	var seqs []uint64
	if err := c.Events(ctx, "long", 1, 0, func(ev events.Stored) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != n || seqs[0] != 1 || seqs[n-1] != n {
		t.Fatalf("read %d events (%v…), want 1..%d", len(seqs), seqs[:min(3, len(seqs))], n)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, s)
		}
	}
	seqs = seqs[:0]
	if err := c.Events(ctx, "long", 990, 1010, func(ev events.Stored) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil || len(seqs) != 21 || seqs[0] != 990 {
		t.Fatalf("range 990..1010: %v %v", seqs, err)
	}
	stopHere := errors.New("enough")
	count := 0
	err = c.Events(ctx, "long", 1, 0, func(events.Stored) error {
		if count++; count == 5 {
			return stopHere
		}
		return nil
	})
	if !errors.Is(err, stopHere) || count != 5 {
		t.Fatalf("stopped after %d with %v", count, err)
	}
}
