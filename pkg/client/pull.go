package client

import (
	"context"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Pull asks the ledger for the next events of a durable feed of the
// client's tenant (api.PullRequest): none when the feed has nothing for
// now. Each event pulled must be settled (Settle), or the feed delivers it
// again after api.PullAckWait; until then the feed delivers nothing else.
func (c *Client) Pull(ctx context.Context, r api.PullRequest) (api.PullReply, error) {
	var reply api.PullReply
	if err := c.request(ctx, c.as.Ledger(events.OpPull), r, &reply); err != nil {
		return api.PullReply{}, fmt.Errorf("pull feed %s: %w", r.Consumer, err)
	}
	return reply, nil
}

// Settle acks a pulled event, or with r.Nack gives it back to its feed to
// be delivered again after r.DelayMS, or with r.Progress keeps it (its ack
// wait starts again).
func (c *Client) Settle(ctx context.Context, r api.SettleRequest) error {
	var reply api.Settled
	if err := c.request(ctx, c.as.Ledger(events.OpSettle), r, &reply); err != nil {
		what := "ack"
		switch {
		case r.Nack:
			what = "nack"
		case r.Progress:
			what = "progress"
		}
		return fmt.Errorf("%s in feed %s: %w", what, r.Consumer, err)
	}
	return nil
}
