package dossier

import (
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// tree is the session tree as stored (session.Tree: each branch's own
// events, linked by their forks, roots first, then depth first) with the
// blobs its events reference.
type tree struct {
	*session.Tree
	// blobs are the results and diffs events reference, by reference.
	blobs map[string][]byte
}

// newTree links the branches and orders them: the root of id first, then
// depth first, children by fork point.
func newTree(id string, own map[string][]events.Stored) (*tree, error) {
	t, err := session.NewTree(id, own)
	if err != nil {
		return nil, err
	}
	return &tree{Tree: t}, nil
}

// head is the last event of id's own log.
func (t *tree) head(id string) events.Stored { return t.Branch(id).Head() }

// read reads a run of a branch's own events for session.Walk (none when
// the tree does not hold the branch).
func (t *tree) read(seg events.Segment, fn func(events.Stored) error) error {
	b := t.Branch(seg.Session)
	if b == nil {
		return nil
	}
	for _, e := range b.Events {
		if e.Seq >= seg.From && e.Seq <= seg.To {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
