package session_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

var t0 = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

func ev(t *testing.T, id string, seq uint64, at int, data any) events.Stored {
	t.Helper()
	typ := events.TypeChunkAppended
	switch data.(type) {
	case *events.SessionStarted:
		typ = events.TypeSessionStarted
	case *events.SessionForked:
		typ = events.TypeSessionForked
	}
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: fmt.Sprintf("%s-%d", id, seq), Type: typ, Session: id, Seq: seq, Time: t0.Add(time.Duration(at) * time.Second), Data: raw}
}

func chunk(s string) *events.ChunkAppended { return &events.ChunkAppended{Role: "user", Content: s} }

// A root with two forks (the earlier fork point first, whatever the maps'
// order) and a fork of a fork, plus a second root: the root of the session
// asked about comes first, each followed depth first by its forks; logical
// logs, paths and event lookups follow the fork points.
func TestTree(t *testing.T) {
	own := map[string][]events.Stored{
		"r":  {ev(t, "r", 1, 0, &events.SessionStarted{Task: "t"}), ev(t, "r", 2, 1, chunk("a")), ev(t, "r", 3, 2, chunk("b"))},
		"f2": {ev(t, "f2", 3, 5, &events.SessionForked{Parent: "r", AtSeq: 2}), ev(t, "f2", 4, 6, chunk("c"))},
		"f1": {ev(t, "f1", 2, 7, &events.SessionForked{Parent: "r", AtSeq: 1})},
		"g":  {ev(t, "g", 5, 8, &events.SessionForked{Parent: "f2", AtSeq: 4})},
		"o":  {ev(t, "o", 1, -5, &events.SessionStarted{Task: "other"})},
	}
	tr, err := session.NewTree("g", own)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, b := range tr.Branches() {
		order = append(order, b.ID)
	}
	if got := strings.Join(order, " "); got != "r f1 f2 g o" {
		t.Fatalf("order %q", got)
	}
	if got := tr.RootOf("g"); got != "r" {
		t.Errorf("root of g: %s", got)
	}
	if got := strings.Join(tr.Ancestry("g"), " "); got != "r f2 g" {
		t.Errorf("ancestry of g: %s", got)
	}
	var seqs []string
	for _, e := range tr.Logical("g") {
		seqs = append(seqs, fmt.Sprintf("%s:%d", e.Session, e.Seq))
	}
	if got := strings.Join(seqs, " "); got != "r:1 r:2 f2:3 f2:4 g:5" {
		t.Errorf("logical log of g: %s", got)
	}
	if p := tr.Path("g"); len(p) != 3 || p[0].To != 2 || p[1].From != 3 || p[1].To != 4 || p[2].From != 5 {
		t.Errorf("path of g: %+v", p)
	}
	if e, ok := tr.Event("g", 2); !ok || e.Session != "r" {
		t.Errorf("event 2 of g: %+v %v", e, ok)
	}
	if _, ok := tr.Event("f1", 3); ok {
		t.Error("f1 has an event 3 (r's, after its fork point)")
	}
	if b := tr.Branch("f2"); b.Parent != "r" || b.ForkSeq != 2 || b.Fork == nil || b.Head().Seq != 4 {
		t.Errorf("f2: %+v", b)
	}
	if roots := tr.Roots(); len(roots) != 2 || roots[0].ID != "r" || roots[0].Start == nil {
		t.Errorf("roots: %+v", roots)
	}
}

func TestTreeRefuses(t *testing.T) {
	start := ev(t, "r", 1, 0, &events.SessionStarted{Task: "t"})
	for name, c := range map[string]struct {
		own  map[string][]events.Stored
		says string
	}{
		"an empty branch":      {map[string][]events.Stored{"r": nil}, "branch r has no events"},
		"a headless branch":    {map[string][]events.Stored{"x": {ev(t, "x", 2, 0, chunk("a"))}}, "not a start or a fork"},
		"a parent not read":    {map[string][]events.Stored{"f": {ev(t, "f", 2, 0, &events.SessionForked{Parent: "p", AtSeq: 1})}}, "forks from p, which is not among"},
		"forks forming a loop": {map[string][]events.Stored{"r": {start}, "a": {ev(t, "a", 2, 0, &events.SessionForked{Parent: "b", AtSeq: 1})}, "b": {ev(t, "b", 2, 0, &events.SessionForked{Parent: "a", AtSeq: 1})}}, "form a cycle"},
	} {
		if _, err := session.NewTree("r", c.own); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", name, err, c.says)
		}
	}
}
