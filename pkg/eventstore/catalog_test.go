package eventstore

import (
	"slices"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/ledgerapi"
)

// Page orders entries oldest first or most recently active first and pages
// them with cursors that resume after the last entry shown.
func TestPage(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	entries := func() []Entry {
		var out []Entry
		for i, id := range []string{"c", "a", "d", "b"} { // created c, a, d, b
			out = append(out, Entry{Record: ledgerapi.Session{ID: id, Created: t0.Add(time.Duration(i) * time.Second)},
				Active: t0.Add(time.Duration(10-len(id)*i) * time.Minute)}) // active: c, a, d, b newest last…
		}
		out[1].Active = t0.Add(time.Hour) // a is the most recently active
		return out
	}
	ids := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	var got []string
	q := Query{Limit: 3}
	for {
		page, next, total, err := Page(entries(), q)
		if err != nil || total != 4 {
			t.Fatalf("page: %v, total %d", err, total)
		}
		got = append(got, ids(page)...)
		if next == "" {
			break
		}
		q.After = next
	}
	if !slices.Equal(got, []string{"c", "a", "d", "b"}) {
		t.Fatalf("oldest first in pages of 3: %v", got)
	}
	page, _, _, err := Page(entries(), Query{Order: ByActive, Limit: 1})
	if err != nil || ids(page)[0] != "a" {
		t.Fatalf("most recently active first: %v, %v", ids(page), err)
	}
	if _, _, _, err := Page(entries(), Query{After: "1.2"}); err == nil {
		t.Error("a cursor of two parts was accepted")
	}
	if _, _, _, err := Page(entries(), Query{Order: "size"}); err == nil {
		t.Error("an unknown order was accepted")
	}
}
