package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Pause stops routing new work to a session (rath.session.paused); the
// ledger still takes its events.
func (c *Client) Pause(ctx context.Context, id, reason string) (api.Ack, error) {
	return c.Emit(ctx, id, &events.SessionPaused{Reason: reason})
}

// Resume lets a paused session take work again (rath.session.resumed).
func (c *Client) Resume(ctx context.Context, id, reason string) (api.Ack, error) {
	return c.Emit(ctx, id, &events.SessionResumed{Reason: reason})
}

// Close ends a session with how it ended (rath.session.closed):
//
//	c.Close(ctx, id, events.SessionClosed{Outcome: "succeeded", Reason: "the tests pass"})
//
// After it the ledger takes only the session's archive.
func (c *Client) Close(ctx context.Context, id string, closed events.SessionClosed) (api.Ack, error) {
	return c.Emit(ctx, id, &closed)
}

// Archive asks the ledger to archive a closed session now, and with
// req.Purge to purge its events from the hot stream too.
func (c *Client) Archive(ctx context.Context, req api.ArchiveRequest) (api.ArchiveReply, error) {
	var r api.ArchiveReply
	if err := c.request(ctx, c.as.Ledger(events.OpArchive), req, &r); err != nil {
		return api.ArchiveReply{}, fmt.Errorf("archive %s: %w", req.Session, err)
	}
	return r, nil
}

// ErrNothingToCompact is returned by Compact when the transcript has no
// chunk to compact beyond the ones it keeps.
var ErrNothingToCompact = errors.New("nothing to compact")

// Compact compacts a session's transcript now, keeping its last keepLast
// chunks: the summary is the deterministic extractive one the agent worker
// writes too (session.PlanCompaction). It is appended conditionally on the
// head it was planned on, and planned again if the session moved on.
func (c *Client) Compact(ctx context.Context, id string, keepLast int) (api.Ack, events.TranscriptCompacted, error) {
	for attempt := 0; ; attempt++ {
		st, err := c.State(ctx, id)
		if err != nil {
			return api.Ack{}, events.TranscriptCompacted{}, fmt.Errorf("compact: %w", err)
		}
		plan, ok := session.PlanCompaction(st, keepLast)
		if !ok {
			chunks := "chunks"
			if len(st.Chunks) == 1 {
				chunks = "chunk"
			}
			return api.Ack{}, events.TranscriptCompacted{}, fmt.Errorf("compact %s: %w: %d %s, keeping the last %d", id, ErrNothingToCompact, len(st.Chunks), chunks, keepLast)
		}
		a, err := c.Emit(ctx, id, &plan, events.WithExpectedSeq(st.Seq))
		if errors.Is(err, api.ErrStale) && attempt < 3 {
			continue
		}
		return a, plan, err
	}
}
