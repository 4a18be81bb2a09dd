// Package replay compares session trees event by event: it reads a
// session's whole tree (its root and every fork), pairs the branches of two
// trees by their lineage position, normalises their events (dropping what
// legitimately differs between two runs of the same work) and finds the
// first divergence. It also tells a tree's external inputs apart from what
// Rath's services produced, and contrasts two branches (`rath diff`).
package replay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Branch is one session of a tree: its own events (not the prefix it
// inherits from its parent), in sequence order.
type Branch struct {
	ID string
	// Pos names the branch by lineage position: "root", and "P.i" for the
	// i-th fork (from 1) of branch P, forks ordered by fork point, then by
	// the time of their fork event.
	Pos      string
	Parent   *Branch
	ForkSeq  uint64
	Events   []events.Stored
	Children []*Branch
}

// Head is the branch's last sequence.
func (b *Branch) Head() uint64 {
	if len(b.Events) == 0 {
		return b.ForkSeq
	}
	return b.Events[len(b.Events)-1].Seq
}

// Closed reports whether the branch's last event closes it.
func (b *Branch) Closed() bool {
	return len(b.Events) > 0 && b.Events[len(b.Events)-1].Type == events.TypeSessionClosed
}

// Tree is a root session and every fork of it, recursively.
type Tree struct {
	Root *Branch
	// Branches are in tree order: the root, then depth first, children by
	// position.
	Branches []*Branch
	byID     map[string]*Branch
}

// Branch returns the branch with the session ID, or nil.
func (t *Tree) Branch(id string) *Branch { return t.byID[id] }

// Logical is a branch's logical log: its ancestors' events up to each fork
// point, then its own.
func (t *Tree) Logical(b *Branch) []events.Stored {
	if b.Parent == nil {
		return b.Events
	}
	var out []events.Stored
	for _, e := range t.Logical(b.Parent) {
		if e.Seq <= b.ForkSeq {
			out = append(out, e)
		}
	}
	return append(out, b.Events...)
}

// Stored is every branch's own events in the order they were stored (by
// time, then tree order and sequence): each event once.
func (t *Tree) Stored() []events.Stored {
	type at struct {
		ev     events.Stored
		branch int
	}
	var all []at
	for i, b := range t.Branches {
		for _, e := range b.Events {
			all = append(all, at{e, i})
		}
	}
	slices.SortStableFunc(all, func(a, b at) int {
		return cmp.Or(a.ev.Time.Compare(b.ev.Time), cmp.Compare(a.branch, b.branch), cmp.Compare(a.ev.Seq, b.ev.Seq))
	})
	out := make([]events.Stored, len(all))
	for i, a := range all {
		out[i] = a.ev
	}
	return out
}

// Events counts the tree's own events.
func (t *Tree) Events() int {
	n := 0
	for _, b := range t.Branches {
		n += len(b.Events)
	}
	return n
}

// NewTree builds the tree of the branches' own events (session.NewTree
// reads and links them). Every branch must start with rath.session.started
// (exactly one root) or rath.session.forked naming a parent that is held.
func NewTree(own map[string][]events.Stored) (*Tree, error) {
	st, err := session.NewTree("", own)
	if err != nil {
		return nil, err
	}
	switch roots := st.Roots(); {
	case len(roots) == 0:
		return nil, fmt.Errorf("no root session among %d branches", len(own))
	case len(roots) > 1:
		return nil, fmt.Errorf("two roots: %s and %s", roots[0].ID, roots[1].ID)
	}
	t := &Tree{byID: make(map[string]*Branch, len(own))}
	var walk func(sb *session.Branch, parent *Branch, pos string)
	walk = func(sb *session.Branch, parent *Branch, pos string) {
		b := &Branch{ID: sb.ID, Pos: pos, Parent: parent, ForkSeq: sb.ForkSeq, Events: sb.Events}
		t.byID[b.ID] = b
		t.Branches = append(t.Branches, b)
		if parent != nil {
			parent.Children = append(parent.Children, b)
		}
		for i, c := range sb.Children {
			walk(c, b, pos+"."+strconv.Itoa(i+1))
		}
	}
	walk(st.Roots()[0], nil, "root")
	t.Root = t.Branches[0]
	return t, nil
}

// Read reads the whole tree of session's root from the ledger: every
// branch's own events up to the head its lineage reported.
func Read(ctx context.Context, c *client.Client, session string) (*Tree, error) {
	g, err := c.Lineage(ctx, session)
	if err != nil {
		return nil, err
	}
	own := map[string][]events.Stored{}
	var walk func(n *api.Node) error
	walk = func(n *api.Node) error {
		if n == nil {
			return nil
		}
		evs, err := OwnEvents(ctx, c, n.Session, n.ForkSeq+1, n.Head)
		if err != nil {
			return err
		}
		own[n.Session] = evs
		for _, ch := range n.Children {
			if err := walk(ch); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(g.Root); err != nil {
		return nil, fmt.Errorf("tree of %s: %w", session, err)
	}
	t, err := NewTree(own)
	if err != nil {
		return nil, fmt.Errorf("tree of %s: %w", session, err)
	}
	return t, nil
}

// OwnEvents reads a session's events from..to (to 0: the head), page by
// page.
func OwnEvents(ctx context.Context, c *client.Client, id string, from, to uint64) ([]events.Stored, error) {
	var out []events.Stored
	err := c.Events(ctx, id, client.Range{From: from, To: to}, func(ev events.Stored) error {
		out = append(out, ev)
		return nil
	})
	return out, err
}
