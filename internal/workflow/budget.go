package workflow

import (
	"fmt"
	"time"

	"github.com/openrath/rath/pkg/session"
)

// Exceeded reports the first budget, in the order max_turns, max_tokens,
// max_tool_calls, wall_time, that the session has reached, with a reason such
// as "budget max_turns=6 reached (6 turns)". A budget is reached at its
// limit, not past it: max_turns=6 allows six turns and no seventh. Wall time
// runs from started (st.Created when started is zero) to now. The session is
// then closed with outcome OutcomeBudget.
func (w *Workflow) Exceeded(st *session.State, started, now time.Time) (reason string, exceeded bool) {
	b := w.Budgets
	if turns := st.Counts.Turns + st.Counts.TurnsFailed; b.MaxTurns > 0 && turns >= b.MaxTurns {
		return fmt.Sprintf("budget max_turns=%d reached (%d turns)", b.MaxTurns, turns), true
	}
	if tokens := st.Usage.Total.In + st.Usage.Total.Out; b.MaxTokens > 0 && tokens >= b.MaxTokens {
		return fmt.Sprintf("budget max_tokens=%d reached (%d tokens)", b.MaxTokens, tokens), true
	}
	if b.MaxToolCalls > 0 && st.Counts.ToolCalls >= b.MaxToolCalls {
		return fmt.Sprintf("budget max_tool_calls=%d reached (%d tool calls)", b.MaxToolCalls, st.Counts.ToolCalls), true
	}
	if started.IsZero() {
		started = st.Created
	}
	if elapsed := now.Sub(started); b.WallTime > 0 && !started.IsZero() && elapsed >= b.WallTime {
		return fmt.Sprintf("budget wall_time=%s reached (%s elapsed)", b.WallTime, elapsed.Round(time.Second)), true
	}
	return "", false
}
