package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// screen decides the gate of a call that nobody has decided yet: one the
// agent worker did not propose (a tenant's user, an operator, a custom
// tool server or a served agent running as another principal), in a
// session with a workflow. The gate is decided here, where calls are
// executed, for every tool, the custom servers' too, which cannot evaluate
// a workflow's conditions themselves (ADR 0025, amendment).
//
// The decision is an answer to the request (ev) with one derived ID,
// whatever it is: the call's rath.approval.requested, the same event, with
// the same timers and escalation, as the agent worker records for a gated
// call of a model's answer; or rath.tool.call.cleared. A redelivered
// request therefore records one decision, and the state returned is read
// from the log after it, so the call is run (or held) as the log says,
// not as this delivery evaluated. A tool server runs the call only once
// the decision is in the log, so none runs it before.
//
// It returns the state with the decision; why, when the call's gates
// cannot be decided or the decision is refused (the call fails); a nil
// state when the session is closed.
func (r *Runner) screen(ctx context.Context, ev events.Stored, req *events.ToolRequested, st *session.State) (_ *session.State, why string, _ error) {
	wf, err := r.workflows.Get(ctx, st.WorkflowRef)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
		return st, fmt.Sprintf("the call's gates cannot be decided: %v", err), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("screen call %s: %w", req.CallID, err)
	}
	proposer := st.Tools[req.CallID].ProposedBy
	var decision any = &events.ToolCleared{CallID: req.CallID, Tool: req.Tool}
	if m, gated := wf.Workflow.ScreenFor(st, ev.Session, ev.ID, req); gated {
		decision = m.Request(req, time.Now())
		r.log.Info("call held for approval where it runs", "session", ev.Session, "call", req.CallID, "tool", req.Tool,
			"proposer", proposer, "gate", m.Gate, "approval", m.ApprovalID, "approver", m.Approver, "condition_err", m.Err)
	}
	ack, err := answer.To(ev, Durable, Source).Emit(ctx, r.c, decision, "gate")
	if errors.Is(err, api.ErrClosed) {
		return nil, "", nil
	}
	if api.Permanent(err) {
		// Refused (an approval of that ID asked already, by someone who
		// does not decide gates): the call fails rather than run unheld.
		return st, fmt.Sprintf("the tool runner could not record the call's gate: %v", err), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("screen call %s: %w", req.CallID, err)
	}
	if st, err = r.states.StateSince(ctx, ev.Session, ack.Seq); err != nil {
		return nil, "", fmt.Errorf("screen call %s: %w", req.CallID, err)
	}
	return st, "", nil
}
