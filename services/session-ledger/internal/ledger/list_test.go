package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Sessions are listed a page at a time from the ledger's catalog, oldest
// first or most recently active first, filtered by a match; a bad order,
// cursor or limit is refused as malformed.
func TestListPages(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("s%d", i)
		r.start(t, id)
		ids = append(ids, id)
	}
	pages := func(f api.ListRequest) (got []string, total int) {
		t.Helper()
		for n := 0; ; n++ {
			p, err := r.c.ListPage(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Sessions) > f.Limit && f.Limit > 0 {
				t.Fatalf("a page of %d with limit %d", len(p.Sessions), f.Limit)
			}
			for _, s := range p.Sessions {
				got = append(got, s.ID)
			}
			total = p.Total
			if p.Next == "" || n > 10 {
				return got, total
			}
			f.After = p.Next
		}
	}
	if got, total := pages(api.ListRequest{Limit: 3}); !slices.Equal(got, ids) || total != 7 {
		t.Fatalf("pages of 3, oldest first: %v (total %d), want %v", got, total, ids)
	}
	if all, err := r.c.List(ctx, api.ListRequest{}); err != nil || len(all) != 7 {
		t.Fatalf("List: %d sessions, %v", len(all), err)
	}

	// s2 takes an event: first in the active order once its head is
	// recorded (the catalog follows the heads bucket).
	r.emit(t, "s2", chunk("news"))
	if err := r.l.FlushHeads(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, _ := pages(api.ListRequest{Order: "active", Limit: 2})
		if got[0] == "s2" {
			if len(got) != 7 {
				t.Fatalf("active order: %v, want all 7", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("active order %v: s2, appended to last, never came first", got)
		}
		time.Sleep(10 * time.Millisecond) // pacing the polls of the watch's delivery
	}

	// A listing counts each session's forks.
	for _, id := range []string{"s1-a", "s1-b"} {
		if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "s1", ID: id, At: 1}); err != nil {
			t.Fatalf("fork %s: %v", id, err)
		}
	}
	forks := map[string]int{}
	for _, s := range mustList(t, r, api.ListRequest{Match: "s1"}) {
		forks[s.ID] = s.Forks
	}
	if want := map[string]int{"s1": 2, "s1-a": 0, "s1-b": 0}; !maps.Equal(forks, want) {
		t.Fatalf("forks listed %v, want %v", forks, want)
	}

	// A closed session is listed with its outcome.
	r.emit(t, "s3", &events.SessionClosed{Outcome: "failed", Reason: "the tests fail"})
	if got := mustList(t, r, api.ListRequest{Match: "s3"}); len(got) != 1 || got[0].Status != "closed" || got[0].Outcome != "failed" {
		t.Fatalf("s3 after its close is listed as %+v, want closed with outcome failed", got)
	}
	if got := mustList(t, r, api.ListRequest{Match: "s4"}); len(got) != 1 || got[0].Outcome != "" {
		t.Fatalf("s4, open, is listed as %+v", got)
	}

	if got, total := pages(api.ListRequest{Match: "S5"}); !slices.Equal(got, []string{"s5"}) || total != 1 {
		t.Fatalf("match S5: %v (total %d)", got, total)
	}
	for name, f := range map[string]api.ListRequest{
		"an unknown order": {Order: "alphabetical"},
		"a forged cursor":  {Limit: 2, After: "not-a-cursor"},
		"a negative limit": {Limit: -1},
	} {
		if _, err := r.c.ListPage(ctx, f); !errors.Is(err, api.ErrMalformed) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}

	// A task is listed as written, its lines apart (a list shows the
	// first), up to its first 200 characters; a fork's as its parent's.
	task := "# Slugs keep capitals\n\n`slug.Make` returns " + strings.Repeat("x", 300)
	if _, err := r.c.Start(ctx, "md", events.SessionStarted{Task: task}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "md", ID: "md-b"}); err != nil {
		t.Fatal(err)
	}
	want := string([]rune(task)[:199]) + "…"
	for _, s := range mustList(t, r, api.ListRequest{Match: "md"}) {
		if s.Task != want {
			t.Errorf("%s is listed with task %q, want %q", s.ID, s.Task, want)
		}
	}
}

func mustList(t *testing.T, r *rig, f api.ListRequest) []api.Session {
	t.Helper()
	all, err := r.c.List(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return all
}
