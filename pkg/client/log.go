package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Range selects events of a session's logical log (its fork ancestry
// included): those with From <= seq <= To, the first Limit of them. Each
// zero field selects everything, so the zero Range is the whole log: From
// 0 starts at the first event, To 0 ends at the head, Limit 0 sets no
// limit.
//
//	c.Log(ctx, id, client.Range{})                 // the whole log
//	c.Log(ctx, id, client.Range{From: 12})         // from event 12 to the head
//	c.Log(ctx, id, client.Range{From: 12, To: 12}) // event 12 only
//	c.Log(ctx, id, client.Range{Limit: 50})        // the first 50 events
type Range struct {
	From  uint64
	To    uint64
	Limit int
}

// Log returns the events of a session's logical log that r selects, asking
// for as many pages as that takes (a page is bounded in events and in
// bytes). Events reads the same one event at a time, without holding the
// whole range.
func (c *Client) Log(ctx context.Context, id string, r Range) ([]events.Stored, error) {
	raws, err := c.LogRaw(ctx, id, r)
	if err != nil {
		return nil, err
	}
	out := make([]events.Stored, 0, len(raws))
	for _, raw := range raws {
		ev, err := events.ParseStored(raw)
		if err != nil {
			return nil, fmt.Errorf("log of %s: %w", id, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Events calls fn for each event of a session's logical log that r
// selects, in order, a ledger page at a time; an error from fn stops it
// and is returned. With r.To 0 it reads until a page ends at the head, so
// it also sees events appended while it reads.
func (c *Client) Events(ctx context.Context, id string, r Range, fn func(events.Stored) error) error {
	left := r.Limit
	for r.To == 0 || r.From <= r.To {
		n := api.MaxLogPage
		if r.Limit > 0 {
			n = min(n, left)
		}
		page, err := c.Log(ctx, id, Range{From: r.From, To: r.To, Limit: n})
		if err != nil {
			return err
		}
		for _, ev := range page {
			if err := fn(ev); err != nil {
				return err
			}
		}
		// Log reads pages until it has n events or the range ends.
		if len(page) < n {
			return nil
		}
		if r.Limit > 0 {
			if left -= len(page); left == 0 {
				return nil
			}
		}
		r.From = page[len(page)-1].Seq + 1
	}
	return nil
}

// LogRaw is Log returning each event as stored JSON.
func (c *Client) LogRaw(ctx context.Context, id string, r Range) ([]json.RawMessage, error) {
	var out []json.RawMessage
	from := r.From
	for {
		page := api.MaxLogPage
		if r.Limit > 0 {
			page = min(page, r.Limit-len(out))
		}
		var reply api.LogReply
		if err := c.request(ctx, c.as.Ledger(events.OpLog), api.LogRequest{Session: id, From: from, To: r.To, Limit: page}, &reply); err != nil {
			return nil, fmt.Errorf("log of %s: %w", id, err)
		}
		out = append(out, reply.Events...)
		if !reply.More || len(reply.Events) == 0 || r.Limit > 0 && len(out) >= r.Limit {
			return out, nil
		}
		var last struct {
			Seq uint64 `json:"rathseq"`
		}
		if err := json.Unmarshal(reply.Events[len(reply.Events)-1], &last); err != nil {
			return nil, fmt.Errorf("log of %s: %w", id, err)
		}
		from = last.Seq + 1
	}
}
