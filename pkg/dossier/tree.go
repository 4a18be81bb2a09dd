package dossier

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/openrath/rath/pkg/events"
)

// tree is the session tree as stored: each branch's own events, in sequence
// order, and where each branch forks from.
type tree struct {
	own   map[string][]events.Stored
	info  map[string]*branchInfo
	order []string // roots first by export interest, then depth first
	logs  map[string][]events.Stored
	// blobs are the results and diffs events reference, by reference.
	blobs map[string][]byte
}

type branchInfo struct {
	parent  string
	forkSeq uint64
	fork    *events.SessionForked
	start   *events.SessionStarted
}

// newTree checks that every branch starts with a start or a fork event and
// that every fork's parent is held, and orders the branches: the root of
// session first, then depth first, children by fork point.
func newTree(session string, own map[string][]events.Stored) (*tree, error) {
	t := &tree{own: own, info: make(map[string]*branchInfo, len(own)), logs: map[string][]events.Stored{}}
	for id, evs := range own {
		if len(evs) == 0 {
			return nil, fmt.Errorf("branch %s has no events", id)
		}
		first := evs[0]
		data, err := first.Decode()
		if err != nil {
			return nil, fmt.Errorf("branch %s, seq %d: %w", id, first.Seq, err)
		}
		switch d := data.(type) {
		case *events.SessionStarted:
			t.info[id] = &branchInfo{start: d}
		case *events.SessionForked:
			t.info[id] = &branchInfo{parent: d.Parent, forkSeq: d.AtSeq, fork: d}
		default:
			return nil, fmt.Errorf("branch %s: its first event (seq %d) is a %s, not a start or a fork", id, first.Seq, first.Type)
		}
	}
	children := map[string][]string{}
	var roots []string
	for id, in := range t.info {
		if in.parent == "" {
			roots = append(roots, id)
			continue
		}
		if _, ok := t.info[in.parent]; !ok {
			return nil, fmt.Errorf("branch %s forks from %s, which the dossier does not hold", id, in.parent)
		}
		children[in.parent] = append(children[in.parent], id)
	}
	for p, cs := range children {
		slices.SortFunc(cs, func(a, b string) int {
			return cmp.Or(cmp.Compare(t.info[a].forkSeq, t.info[b].forkSeq),
				t.own[a][0].Time.Compare(t.own[b][0].Time), cmp.Compare(a, b))
		})
		children[p] = cs
	}
	first := t.rootOf(session)
	slices.SortFunc(roots, func(a, b string) int {
		if a == first || b == first {
			return cmp.Compare(boolInt(b == first), boolInt(a == first))
		}
		return cmp.Or(t.own[a][0].Time.Compare(t.own[b][0].Time), cmp.Compare(a, b))
	})
	seen := map[string]bool{}
	var walk func(id string)
	walk = func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		t.order = append(t.order, id)
		for _, c := range children[id] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	if len(t.order) != len(t.info) {
		return nil, fmt.Errorf("the branches' fork links form a cycle")
	}
	return t, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rootOf follows fork links up from id (id itself when it is not held).
func (t *tree) rootOf(id string) string {
	for range len(t.info) + 1 {
		in, ok := t.info[id]
		if !ok || in.parent == "" {
			return id
		}
		id = in.parent
	}
	return id
}

// ancestry is id's fork ancestry, root first, id last.
func (t *tree) ancestry(id string) []string {
	var out []string
	for cur := id; cur != ""; cur = t.info[cur].parent {
		out = append(out, cur)
		if len(out) > len(t.info) {
			break
		}
	}
	slices.Reverse(out)
	return out
}

// path is id's logical log as runs of each session's own events, root
// first; the last run (id's own) ends at its head.
func (t *tree) path(id string) []events.Segment {
	anc := t.ancestry(id)
	out := make([]events.Segment, len(anc))
	for i, s := range anc {
		evs := t.own[s]
		out[i] = events.Segment{Session: s, From: evs[0].Seq, To: evs[len(evs)-1].Seq}
		if i+1 < len(anc) {
			out[i].To = t.info[anc[i+1]].forkSeq
		}
	}
	return out
}

// logical is id's logical log: its ancestry's events up to each fork point,
// then its own.
func (t *tree) logical(id string) []events.Stored {
	if l, ok := t.logs[id]; ok {
		return l
	}
	var out []events.Stored
	for _, seg := range t.path(id) {
		for _, e := range t.own[seg.Session] {
			if e.Seq >= seg.From && e.Seq <= seg.To {
				out = append(out, e)
			}
		}
	}
	t.logs[id] = out
	return out
}

// event returns event seq of id's logical log.
func (t *tree) event(id string, seq uint64) (events.Stored, bool) {
	for _, seg := range t.path(id) {
		if seq < seg.From || seq > seg.To {
			continue
		}
		evs := t.own[seg.Session]
		i, ok := slices.BinarySearchFunc(evs, seq, func(e events.Stored, s uint64) int { return cmp.Compare(e.Seq, s) })
		if ok {
			return evs[i], true
		}
	}
	return events.Stored{}, false
}

// head is the last event of id's log.
func (t *tree) head(id string) events.Stored {
	evs := t.own[id]
	return evs[len(evs)-1]
}
