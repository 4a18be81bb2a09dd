package eval

import (
	"context"
	"fmt"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// OutcomeSuperseded is the outcome a workflow's fork route closes the
// session it forks with: the work goes on on the fork.
const OutcomeSuperseded = "superseded"

// maxBranches bounds how many superseding forks a run is followed through.
const maxBranches = 64

// successor returns the fork that carries on a session closed superseded:
// its newest child in the lineage, with the sequence it was forked at; ""
// when it has none.
func successor(ctx context.Context, c *client.Client, id string) (string, uint64, error) {
	g, err := c.Lineage(ctx, id)
	if err != nil {
		return "", 0, fmt.Errorf("lineage of %s: %w", id, err)
	}
	n := find(g.Root, id)
	if n == nil || len(n.Children) == 0 {
		return "", 0, nil
	}
	child := n.Children[len(n.Children)-1]
	return child.Session, child.ForkSeq, nil
}

func find(n *api.Node, id string) *api.Node {
	if n == nil {
		return nil
	}
	if n.Session == id {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, id); f != nil {
			return f
		}
	}
	return nil
}

// branch is a session of a run's chain: the started session, or a fork
// that superseded the one before it, forked at Fork.
type branch struct {
	ID   string
	Fork uint64
}

// chain follows a recorded run from its started session through every fork
// that superseded the branch before it, and returns the branches, the
// started one first, ending at the branch that carried the work on.
func chain(ctx context.Context, c *client.Client, root string, outcome string) ([]branch, error) {
	bs := []branch{{ID: root}}
	for outcome == OutcomeSuperseded && len(bs) < maxBranches {
		next, at, err := successor(ctx, c, bs[len(bs)-1].ID)
		if err != nil || next == "" {
			return bs, err
		}
		bs = append(bs, branch{ID: next, Fork: at})
		st, err := c.State(ctx, next)
		if err != nil {
			return bs, fmt.Errorf("state of %s: %w", next, err)
		}
		outcome = ""
		if st.Status == session.StatusClosed || st.Status == session.StatusArchived {
			outcome = st.Outcome
		}
	}
	return bs, nil
}

// spent is the usage of a run's superseded branches that its final branch
// does not hold: each superseded branch's own events after the point its
// successor was forked at.
func spent(ctx context.Context, c *client.Client, bs []branch) (session.Usage, error) {
	var u session.Usage
	for i := 0; i+1 < len(bs); i++ {
		evs, err := c.Log(ctx, bs[i].ID, client.Range{From: bs[i+1].Fork + 1})
		if err != nil {
			return u, fmt.Errorf("log of %s: %w", bs[i].ID, err)
		}
		for _, ev := range evs {
			if ev.Type != events.TypeModelCalled && ev.Type != events.TypeUsageRecorded {
				continue
			}
			d, err := events.DecodeData(ev.Type, ev.Data)
			if err != nil {
				return u, fmt.Errorf("event %d of %s: %w", ev.Seq, bs[i].ID, err)
			}
			u.AddEvent(d)
		}
	}
	return u, nil
}
