package client

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Watch calls fn for each event of a session's logical log from sequence from
// (0 or 1: the start, through its fork ancestry) in order, then for each new
// event as it is stored, until ctx ends or fn returns an error. No event is
// skipped or repeated: live events that arrive while the history is read are
// held back, and a gap in the live feed is filled from the log. A session
// that does not exist yet is waited for: its events arrive once it starts.
func (c *Client) Watch(ctx context.Context, id string, from uint64, fn func(events.Stored) error) error {
	live := make(chan *nats.Msg, 4096)
	sub, err := c.nc.ChanSubscribe(events.LiveFilter(id), live)
	if err != nil {
		return fmt.Errorf("watch %s: %w", id, err)
	}
	defer sub.Unsubscribe()
	// The subscription must be in place before the history is read, or an
	// event stored in between would be missed.
	if err := c.nc.FlushTimeout(c.timeout); err != nil {
		return fmt.Errorf("watch %s: %w", id, err)
	}
	next := max(from, 1)
	catchUp := func(to uint64) error {
		for {
			page, err := c.Log(ctx, id, next, to, api.MaxLogPage)
			if api.CodeOf(err) == api.CodeNotFound {
				return nil // not started yet: the live feed brings its events
			}
			if err != nil {
				return err
			}
			for _, ev := range page {
				if err := fn(ev); err != nil {
					return err
				}
				next = ev.Seq + 1
			}
			if len(page) < api.MaxLogPage || (to != 0 && next > to) {
				return nil
			}
		}
	}
	if err := catchUp(0); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-live:
			ev, err := events.ParseStored(m.Data)
			if err != nil {
				return fmt.Errorf("watch %s: %w", id, err)
			}
			if ev.Seq < next {
				continue // already delivered from the log
			}
			if ev.Seq > next {
				if err := catchUp(ev.Seq - 1); err != nil {
					return err
				}
			}
			if err := fn(ev); err != nil {
				return err
			}
			next = ev.Seq + 1
		}
	}
}
