package client

import (
	"context"
	"slices"

	"golang.org/x/sync/errgroup"
)

// pendingConcurrency bounds the state requests PendingIn has in flight.
const pendingConcurrency = 8

// PendingIn lists the approvals each of the sessions ids waits for, in the
// order of ids, asking for up to eight sessions' overviews at a time: one
// state request per session (more for a session with more gated calls in
// flight than its overview holds), so its cost is linear in the sessions,
// but not their latency. There is no cheaper question to ask the ledger: a
// fork's pending approvals are its parent's up to the fork point, which the
// ledger does not fold when it forks (a fork costs the same at any point),
// so no index of the ledger's knows them without reading each session.
func (c *Client) PendingIn(ctx context.Context, ids []string) ([]PendingApproval, error) {
	each := make([][]PendingApproval, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pendingConcurrency)
	for i, id := range ids {
		g.Go(func() error {
			p, err := c.Pending(gctx, id)
			each[i] = p
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(each...), nil
}
