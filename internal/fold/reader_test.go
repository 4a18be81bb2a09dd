package fold_test

import (
	"errors"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// TestPagedReadsResumeWhereTheyStopped: a log read a page at a time, each
// page stopping at the event the next starts with (as the ledger's log
// pages do), reads every event once and in order, also when the session is
// archived and purged between two pages.
func TestPagedReadsResumeWhereTheyStopped(t *testing.T) {
	r := newRig(t)
	r.start(t, "p1")
	r.turn(t, "p1", 0)
	r.turn(t, "p1", 1)
	r.emit(t, "p1", &events.SessionClosed{Outcome: "succeeded", Reason: "done"})
	head := r.head(t, "p1")
	reader := r.cache(t, 0).Reader()
	errPage := errors.New("page full")
	page := func(from uint64, size int) (seqs []uint64) {
		t.Helper()
		err := reader.OwnEvents(r.ctx, "p1", from, 0, func(ev events.Stored, _ eventstore.Msg) error {
			if len(seqs) == size {
				return errPage
			}
			seqs = append(seqs, ev.Seq)
			return nil
		})
		if err != nil && !errors.Is(err, errPage) {
			t.Fatalf("page from %d: %v", from, err)
		}
		return seqs
	}
	var all []uint64
	for from, n := uint64(1), 0; from <= head; n++ {
		if n == 3 {
			if _, err := r.c.Archive(r.ctx, api.ArchiveRequest{Session: "p1", Purge: true}); err != nil {
				t.Fatal(err)
			}
			head = r.head(t, "p1") // the archive's own event
		}
		got := page(from, 3) // pages of 3: never aligned with snapshots every 4
		if len(got) == 0 {
			t.Fatalf("no events from %d (head %d)", from, head)
		}
		all = append(all, got...)
		from = got[len(got)-1] + 1
	}
	for i, seq := range all {
		if seq != uint64(i+1) {
			t.Fatalf("pages read %v, want 1..%d once each", all, head)
		}
	}
	if uint64(len(all)) != head {
		t.Fatalf("pages read %d events, want %d", len(all), head)
	}
	// A bounded read from a remembered point stops where it is told to.
	if got := page(5, 100); len(got) != int(head-4) || got[0] != 5 {
		t.Fatalf("read from 5: %v", got)
	}
	var bounded []uint64
	if err := reader.OwnEvents(r.ctx, "p1", 4, 6, func(ev events.Stored, _ eventstore.Msg) error {
		bounded = append(bounded, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(bounded) != 3 || bounded[0] != 4 || bounded[2] != 6 {
		t.Fatalf("read 4..6: %v", bounded)
	}
}
