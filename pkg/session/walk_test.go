package session_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// golden is a log of every registered kind, each with its golden wire data
// (pkg/events/testdata), after a start: the catalog as a session's log.
func golden(t *testing.T, id string) []events.Stored {
	t.Helper()
	var evs []events.Stored
	add := func(typ string, raw []byte) {
		seq := uint64(len(evs) + 1)
		evs = append(evs, events.Stored{ID: fmt.Sprintf("%s-%d", id, seq), Type: typ, Session: id, Seq: seq, Hash: fmt.Sprintf("h%d", seq),
			Time: time.Date(2026, 1, 1, 0, 0, int(seq), 0, time.UTC), Actor: "acme/ana", Data: raw})
	}
	add(events.TypeSessionStarted, json.RawMessage(`{"task":"t"}`))
	for _, k := range events.Kinds() {
		raw, err := os.ReadFile(filepath.Join("..", "events", "testdata", k.Schema))
		if err != nil {
			t.Fatal(err)
		}
		add(k.Type, raw)
	}
	return evs
}

// Walk without hooks folds a log to the state Apply folds it to, for every
// registered kind.
func TestWalkWithoutHooksIsApply(t *testing.T) {
	evs := golden(t, "s")
	want := fold(evs...)
	got := &session.State{}
	if err := session.Walk(got, evs, session.Hooks{}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("walk:\n%s\napply:\n%s", marshal(t, got), marshal(t, want))
	}
	// Each prefix too: the kinds one by one.
	for n := range evs {
		got, want := &session.State{}, fold(evs[:n+1]...)
		if err := session.Walk(got, evs[:n+1], session.Hooks{}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: walk and apply differ", evs[n].Type)
		}
	}
}

// Hooks see every step with its decoded data, the state before and after
// it, and each step once.
func TestWalkHooks(t *testing.T) {
	evs := golden(t, "s")
	var before, after []uint64
	err := session.Walk(&session.State{}, evs, session.Hooks{
		Before: func(s *session.State, e session.Step) {
			if s.Seq != e.Seq-1 || e.Merged {
				t.Errorf("before %d: state at %d, merged %v", e.Seq, s.Seq, e.Merged)
			}
			if k, ok := events.KindOf(e.Data); !ok || k.Type != e.Type {
				t.Errorf("step %d: data %T for %s", e.Seq, e.Data, e.Type)
			}
			before = append(before, e.Seq)
		},
		After: func(s *session.State, e session.Step) {
			if s.Seq != e.Seq {
				t.Errorf("after %d: state at %d", e.Seq, s.Seq)
			}
			after = append(after, e.Seq)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != len(evs) || !reflect.DeepEqual(before, after) {
		t.Fatalf("before %v, after %v", before, after)
	}
}

// A merge takes in, through Read, the events its state does not cover yet,
// a nested merge's first, all before the merge itself, each once; the
// coverage says how the state holds each event.
func TestWalkMerges(t *testing.T) {
	own := map[string][]events.Stored{
		"p": {stored(t, "p", 1, &events.SessionStarted{}), stored(t, "p", 2, &events.ChunkAppended{Role: "user", Content: "p2"})},
		"y": {stored(t, "y", 1, &events.SessionStarted{}), stored(t, "y", 2, &events.ChunkAppended{Role: "user", Content: "y2"})},
	}
	own["x"] = []events.Stored{
		stored(t, "x", 3, &events.SessionForked{Parent: "p", AtSeq: 2}),
		stored(t, "x", 4, &events.ChunkAppended{Role: "user", Content: "x4"}),
		stored(t, "x", 5, &events.SessionMerged{Source: "y", Segments: []events.Segment{{Session: "y", From: 1, To: 2}}}),
	}
	// c forks p too, and takes in x's fork (p 1–2, which it holds already),
	// x's own events and, through x's merge, y's.
	c := []events.Stored{
		own["p"][0], own["p"][1],
		stored(t, "c", 3, &events.SessionForked{Parent: "p", AtSeq: 2}),
		stored(t, "c", 4, &events.SessionMerged{Source: "x", Segments: []events.Segment{{Session: "p", From: 1, To: 2}, {Session: "x", From: 3, To: 5}}}),
	}
	read := func(seg events.Segment, fn func(events.Stored) error) error {
		for _, e := range own[seg.Session] {
			if e.Seq >= seg.From && e.Seq <= seg.To {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var steps []string
	st := &session.State{}
	err := session.Walk(st, c, session.Hooks{Read: read, After: func(_ *session.State, e session.Step) {
		steps = append(steps, fmt.Sprintf("%s%d merged=%v", e.Session, e.Seq, e.Merged))
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p1 merged=false", "p2 merged=false", "c3 merged=false",
		"x3 merged=true", "x4 merged=true", "y1 merged=true", "y2 merged=true", "x5 merged=true", "c4 merged=false"}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if len(st.Chunks) != 3 || st.Counts.Merged != 5 || st.Seq != 4 {
		t.Fatalf("chunks %d merged %d seq %d", len(st.Chunks), st.Counts.Merged, st.Seq)
	}
	for _, tc := range []struct {
		id   string
		seq  uint64
		want session.Coverage
	}{
		{"p", 2, session.CoveredByPath}, {"p", 3, session.NotCovered}, {"c", 9, session.CoveredByPath},
		{"x", 4, session.CoveredByMerge}, {"y", 2, session.CoveredByMerge}, {"y", 3, session.NotCovered}, {"z", 1, session.NotCovered},
	} {
		if got := st.Coverage(tc.id, tc.seq); got != tc.want || st.Covers(tc.id, tc.seq) != (tc.want != session.NotCovered) {
			t.Errorf("coverage of %s %d: %v, want %v", tc.id, tc.seq, got, tc.want)
		}
	}
	// A read that fails fails the walk, naming the merge.
	err = session.Walk(&session.State{}, c, session.Hooks{Read: func(events.Segment, func(events.Stored) error) error { return fmt.Errorf("gone") }})
	if err == nil || err.Error() != "fold merge of x at 4: gone" {
		t.Fatalf("err %v", err)
	}
}
