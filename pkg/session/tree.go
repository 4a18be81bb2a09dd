package session

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/openrath/rath/pkg/events"
)

// Tree is a set of sessions as stored, linked by their forks: each branch's
// own events (not the prefix it inherits), in sequence order. It is the one
// reader of session trees: the dossier and replay's comparisons build theirs
// on it.
type Tree struct {
	byID  map[string]*Branch
	order []*Branch
	logs  map[string][]events.Stored // Logical's results
}

// Branch is one session of a Tree.
type Branch struct {
	ID string
	// Parent is the session it forks from, "" for a root; ForkSeq the
	// parent's sequence it forks at.
	Parent  string
	ForkSeq uint64
	// Start is a root's first event's data, Fork a fork's.
	Start *events.SessionStarted
	Fork  *events.SessionForked
	// Events are the branch's own events, in sequence order.
	Events []events.Stored
	// Children are the branches that fork from it, by fork point, then by
	// the time of their fork event, then by ID.
	Children []*Branch
}

// Head is the branch's last event.
func (b *Branch) Head() events.Stored { return b.Events[len(b.Events)-1] }

// NewTree links branches given by their own events. Each must start with a
// rath.session.started (a root) or a rath.session.forked naming a parent
// that is given. The branches are ordered roots first (the root of first,
// then by the time of their first event), each followed depth first by its
// children.
func NewTree(first string, own map[string][]events.Stored) (*Tree, error) {
	t := &Tree{byID: make(map[string]*Branch, len(own)), logs: map[string][]events.Stored{}}
	for id, evs := range own {
		if len(evs) == 0 {
			return nil, fmt.Errorf("branch %s has no events", id)
		}
		b := &Branch{ID: id, Events: evs}
		data, err := evs[0].Decode()
		if err != nil {
			return nil, fmt.Errorf("branch %s, seq %d: %w", id, evs[0].Seq, err)
		}
		switch d := data.(type) {
		case *events.SessionStarted:
			b.Start = d
		case *events.SessionForked:
			b.Parent, b.ForkSeq, b.Fork = d.Parent, d.AtSeq, d
		default:
			return nil, fmt.Errorf("branch %s: its first event (seq %d) is a %s, not a start or a fork", id, evs[0].Seq, evs[0].Type)
		}
		t.byID[id] = b
	}
	var roots []*Branch
	for _, b := range t.byID {
		if b.Parent == "" {
			roots = append(roots, b)
			continue
		}
		p, ok := t.byID[b.Parent]
		if !ok {
			return nil, fmt.Errorf("branch %s forks from %s, which is not among the branches read", b.ID, b.Parent)
		}
		p.Children = append(p.Children, b)
	}
	for _, b := range t.byID {
		slices.SortFunc(b.Children, func(x, y *Branch) int {
			return cmp.Or(cmp.Compare(x.ForkSeq, y.ForkSeq), x.Events[0].Time.Compare(y.Events[0].Time), cmp.Compare(x.ID, y.ID))
		})
	}
	top := t.RootOf(first)
	slices.SortFunc(roots, func(x, y *Branch) int {
		if x.ID == top || y.ID == top {
			return cmp.Compare(boolInt(y.ID == top), boolInt(x.ID == top))
		}
		return cmp.Or(x.Events[0].Time.Compare(y.Events[0].Time), cmp.Compare(x.ID, y.ID))
	})
	seen := map[string]bool{}
	var walk func(b *Branch)
	walk = func(b *Branch) {
		if seen[b.ID] {
			return
		}
		seen[b.ID] = true
		t.order = append(t.order, b)
		for _, c := range b.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	if len(t.order) != len(t.byID) {
		return nil, fmt.Errorf("%d of %d branches are not reachable from a root: their fork links form a cycle", len(t.byID)-len(t.order), len(t.byID))
	}
	return t, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Branches are the tree's branches in its order.
func (t *Tree) Branches() []*Branch { return t.order }

// Roots are the branches that fork from nothing, in the tree's order.
func (t *Tree) Roots() []*Branch {
	var out []*Branch
	for _, b := range t.order {
		if b.Parent == "" {
			out = append(out, b)
		}
	}
	return out
}

// Branch returns the branch with the session ID, or nil.
func (t *Tree) Branch(id string) *Branch { return t.byID[id] }

// RootOf follows fork links up from id (id itself when it is not held).
func (t *Tree) RootOf(id string) string {
	for range len(t.byID) + 1 {
		b, ok := t.byID[id]
		if !ok || b.Parent == "" {
			return id
		}
		id = b.Parent
	}
	return id
}

// Ancestry is id's fork ancestry, root first, id last.
func (t *Tree) Ancestry(id string) []string {
	var out []string
	for cur := id; cur != ""; {
		b, ok := t.byID[cur]
		if !ok || len(out) > len(t.byID) {
			break
		}
		out = append(out, cur)
		cur = b.Parent
	}
	slices.Reverse(out)
	return out
}

// Path is id's logical log as runs of each session's own events, root
// first; the last run (id's own) ends at its head.
func (t *Tree) Path(id string) []events.Segment {
	anc := t.Ancestry(id)
	out := make([]events.Segment, len(anc))
	for i, s := range anc {
		evs := t.byID[s].Events
		out[i] = events.Segment{Session: s, From: evs[0].Seq, To: evs[len(evs)-1].Seq}
		if i+1 < len(anc) {
			out[i].To = t.byID[anc[i+1]].ForkSeq
		}
	}
	return out
}

// Logical is id's logical log: its ancestry's events up to each fork point,
// then its own. The slice is shared: do not modify it.
func (t *Tree) Logical(id string) []events.Stored {
	if l, ok := t.logs[id]; ok {
		return l
	}
	var out []events.Stored
	for _, seg := range t.Path(id) {
		for _, e := range t.byID[seg.Session].Events {
			if e.Seq >= seg.From && e.Seq <= seg.To {
				out = append(out, e)
			}
		}
	}
	t.logs[id] = out
	return out
}

// Event returns event seq of id's logical log.
func (t *Tree) Event(id string, seq uint64) (events.Stored, bool) {
	for _, seg := range t.Path(id) {
		if seq < seg.From || seq > seg.To {
			continue
		}
		evs := t.byID[seg.Session].Events
		if i, ok := slices.BinarySearchFunc(evs, seq, func(e events.Stored, s uint64) int { return cmp.Compare(e.Seq, s) }); ok {
			return evs[i], true
		}
	}
	return events.Stored{}, false
}
