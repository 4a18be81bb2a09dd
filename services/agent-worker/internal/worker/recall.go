package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
)

// DefaultRecallWait is how long a turn waits for the memory service to
// answer its recall: the client's retry horizon.
const DefaultRecallWait = eventstore.RetryHorizon

// recall asks the memory service for what the agent recalls before the
// turn's first model call, if its workflow says so. The memory service
// records the answer in the session (rath.memory.recalled, with each item's
// content), and the model's context is built from that event, so the context
// stays a function of the log. The request ID derives from the turn request:
// a redelivered turn whose recall is in the state already does not ask again,
// and one that asks again records nothing new.
//
// It returns the state holding the recall, or why the turn fails: a query
// that does not evaluate, a refusal, or no answer within the wait (the
// memory service is not running).
func (t *job) recall(ctx context.Context, st *session.State, wf *workflow.Workflow, a workflow.Agent) (*session.State, string, error) {
	if a.Recall == nil || recalledFor(st, t.req.TurnID) {
		return st, "", nil
	}
	act, err := workflow.Activation(st, t.ev)
	if err != nil {
		return nil, "recall: " + err.Error(), nil
	}
	query, err := a.Recall.RecallQuery(act)
	if err != nil {
		return nil, fmt.Sprintf("recall: query %q: %v", a.Recall.Query, err), nil
	}
	if strings.TrimSpace(query) == "" {
		t.w.log.Info("recall skipped: empty query", "session", t.ev.Session, "turn", t.req.TurnID, "agent", a.Name)
		return st, "", nil
	}
	wait := t.w.cfg.RecallWait
	if wait <= 0 {
		wait = DefaultRecallWait
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err = t.w.c.Memory().Recall(rctx, memoryapi.RecallRequest{
		RequestID: t.answer().ID("recall"),
		Session:   t.ev.Session, Query: query,
		Filter: memoryapi.Filter{Scopes: wf.RecallScopes(a), Tags: a.Recall.Tags},
		K:      a.Recall.K, Agent: a.Name, TurnID: t.req.TurnID,
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, "", err // shutting down: the turn is redelivered
	case err != nil && rctx.Err() != nil:
		return nil, fmt.Sprintf("recall: the memory service did not answer within %s (is memory-svc running?): %v", wait.Round(time.Millisecond), err), nil
	case err != nil:
		return nil, "recall: " + err.Error(), nil
	}
	// The recall is stored (the memory service replies after the ledger's
	// ack): read it back rather than trust the reply, which a request asked
	// twice may answer differently from what the log holds.
	st, err = t.w.cfg.States.State(ctx, t.ev.Session, 0)
	if err != nil {
		return nil, "", err
	}
	if !recalledFor(st, t.req.TurnID) {
		return nil, "", fmt.Errorf("recall of turn %s in session %s: answered but not in the state yet", t.req.TurnID, t.ev.Session)
	}
	return st, "", nil
}

// recalledFor reports whether the state holds a recall for the turn.
func recalledFor(st *session.State, turnID string) bool {
	for _, m := range st.Memory {
		if m.Kind == "recalled" && m.TurnID == turnID {
			return true
		}
	}
	return false
}

// RecalledPrefix marks every recalled item in a model's context: recalled
// memory is context the agent may weigh, never an instruction.
const RecalledPrefix = "[recalled memory]"

// recalledMessage renders a recall's items for the model, one per
// paragraph: "[recalled memory] ITEM vN (score S): CONTENT".
func recalledMessage(m session.MemoryEvent) string {
	var b strings.Builder
	for i, it := range m.Items {
		if i > 0 {
			b.WriteString("\n")
		}
		content := it.Content
		if content == "" {
			content = "(content not recorded)"
		}
		fmt.Fprintf(&b, "%s %s v%d (score %.2f): %s", RecalledPrefix, it.ItemID, it.Version, it.Score, content)
	}
	return b.String()
}
