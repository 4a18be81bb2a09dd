package worker

import (
	"context"
	"fmt"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/session"
)

// compact compacts the session's transcript before a turn when the context
// the model would see is estimated above the workflow's threshold. The
// summary is extractive (session.PlanCompaction), whatever the provider:
// deterministic, free, and it cannot invent facts; the durable facts stay in
// the state and are listed in the summary. The event's ID derives from the
// turn request, so a redelivered turn records the compaction once. It
// returns the state with the compaction in force.
func (t *job) compact(ctx context.Context, st *session.State, c workflow.Compaction) (*session.State, error) {
	if c.MaxContextTokens <= 0 || session.ContextTokens(st) <= c.MaxContextTokens {
		return st, nil
	}
	plan, ok := session.PlanCompaction(st, c.Keep())
	if !ok {
		return st, nil
	}
	if err := t.emit(ctx, "compacted", &plan); err != nil {
		return nil, fmt.Errorf("compact session %s before turn %s: %w", t.ev.Session, t.req.TurnID, err)
	}
	t.w.log.Info("transcript compacted", "session", t.ev.Session, "turn", t.req.TurnID, "from", plan.FromSeq, "to", plan.ToSeq,
		"tokens_before", plan.TokensBefore, "tokens_after", plan.TokensAfter)
	out := *st
	out.Compactions = append(append([]session.Compaction(nil), st.Compactions...), session.Compaction{
		Seq: st.Seq + 1, FromSeq: plan.FromSeq, ToSeq: plan.ToSeq, Summary: plan.Summary,
		TokensBefore: plan.TokensBefore, TokensAfter: plan.TokensAfter,
	})
	return &out, nil
}
