package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// Events reads a range longer than one ledger page, in order, and stops
// when its function says so.
func TestEventsReadsEveryPage(t *testing.T) {
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	ctx := context.Background()
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
	if err := c.Events(ctx, "long", client.Range{}, func(ev events.Stored) error {
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
	if err := c.Events(ctx, "long", client.Range{From: 990, To: 1010}, func(ev events.Stored) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil || len(seqs) != 21 || seqs[0] != 990 {
		t.Fatalf("range 990..1010: %v %v", seqs, err)
	}
	stopHere := errors.New("enough")
	count := 0
	err = c.Events(ctx, "long", client.Range{From: 1}, func(events.Stored) error {
		if count++; count == 5 {
			return stopHere
		}
		return nil
	})
	if !errors.Is(err, stopHere) || count != 5 {
		t.Fatalf("stopped after %d with %v", count, err)
	}
	count = 0
	if err := c.Events(ctx, "long", client.Range{From: 200, Limit: api.MaxLogPage + 5}, func(events.Stored) error { count++; return nil }); err != nil || count != api.MaxLogPage+5 {
		t.Fatalf("a limit beyond one page: %d events, %v", count, err)
	}

	// Log returns the whole range whatever the ledger's page size; a limit
	// takes the first events of the range.
	for _, tc := range []struct {
		r           client.Range
		first, last uint64
	}{
		{client.Range{}, 1, n},
		{client.Range{From: 1100}, 1100, n},
		{client.Range{From: 7, To: 7}, 7, 7},
		{client.Range{Limit: 3}, 1, 3},
		{client.Range{From: 995, Limit: 10}, 995, 1004},
		{client.Range{From: 10, To: 1200, Limit: api.MaxLogPage + 1}, 10, 10 + api.MaxLogPage},
	} {
		got, err := c.Log(ctx, "long", tc.r)
		want := int(tc.last - tc.first + 1)
		if err != nil || len(got) != want || got[0].Seq != tc.first || got[len(got)-1].Seq != tc.last {
			t.Errorf("Log(%+v): %d events, want %d..%d (%v)", tc.r, len(got), tc.first, tc.last, err)
		}
		raw, err := c.LogRaw(ctx, "long", tc.r)
		if err != nil || len(raw) != want {
			t.Errorf("LogRaw(%+v): %d events, want %d (%v)", tc.r, len(raw), want, err)
		}
	}
}
