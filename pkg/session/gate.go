package session

import (
	"fmt"

	"github.com/openrath/rath/pkg/events"
)

// Who decides the gate of a tool call (ADR 0025 and its amendment). The
// ledger stamps every event with its proposer (events.Stored.Actor), which
// no tenant can take: these are Rath's own service principals.
var (
	// GateKeeper is the agent worker's principal. It evaluates the
	// workflow's gates for every call of an answer (a model's, or a served
	// agent's: pkg/agentserver runs as it) and records a gated call after
	// its approval request in one atomic append, so a call it proposes is
	// gated by the approval the call names, or by none.
	GateKeeper = events.Service("agent-worker").String()
	// Screener is the tool runner's principal. It decides the gate of every
	// call proposed by anyone else (a tenant's user, an operator, a custom
	// tool server, a served agent running as another principal) where the
	// call is executed, and records its decision: the call's approval
	// request, or rath.tool.call.cleared. Only its decisions count.
	Screener = events.Service("tool-runner").String()
)

// ScreenedClear is Tool.Screened for a call the tool runner cleared: no
// gate holds it.
const ScreenedClear = "cleared"

// Gate is what a session's state says about running a tool call: whether
// it waits for an approval and how that approval was decided.
type Gate struct {
	// Unscreened: nobody has decided the call's gate yet (it was proposed
	// by someone other than the agent worker, in a session with a
	// workflow). It waits for the tool runner, which decides it; no runner
	// runs it before.
	Unscreened bool
	// ApprovalID is the approval the call waits for; "" for a call no gate
	// holds (it may run).
	ApprovalID string
	// Outcome is the approval's outcome: "" while pending (or when the
	// approval is not in the state, or was asked again by someone who does
	// not decide gates: the call is held), ApprovalGranted,
	// ApprovalRejected or ApprovalExpired.
	Outcome string
	// Reason is a rejection's reason.
	Reason string
	// Actor decided.
	Actor string
}

// Rejection is what a call whose approval was rejected fails with: the
// reason and who rejected it, which its agent reads as the call's result.
func (g Gate) Rejection() string {
	if g.Outcome == ApprovalExpired {
		return fmt.Sprintf("the call was not approved in time (approval %s): %s", g.ApprovalID, g.Reason)
	}
	who := g.Actor
	if who == "" {
		who = "an unknown actor"
	}
	return fmt.Sprintf("the call was rejected by %s (approval %s): %s", who, g.ApprovalID, g.Reason)
}

// Refused reports whether the call under the gate will never run: its
// approval was rejected or expired. It fails with Rejection.
func (g Gate) Refused() bool { return g.Outcome == ApprovalRejected || g.Outcome == ApprovalExpired }

// Runnable reports whether a call under the gate may run now: its gate is
// decided, and it is not gated or its approval is granted.
func (g Gate) Runnable() bool {
	return !g.Unscreened && (g.ApprovalID == "" || g.Outcome == ApprovalGranted)
}

// GateOf is the gate of the tool call callID: every runner (the tool
// runner, pkg/toolserver, any other) asks it before running a call, so a
// gated call runs only once its approval is granted, wherever and whenever
// the call is delivered, whoever proposed it. A call the state does not
// hold has no gate.
//
// The approval that gates a call is the one the agent worker recorded with
// it, for a call it proposed; for any other call, the one the tool runner
// asked for when it screened the call, which it may also have cleared
// (Unscreened until then). A session without a workflow has no gates
// (only the approval its call names, whoever asked for it, holds it). An
// approval counts only as its gate keeper asked for it: one asked again by
// another principal holds the call for ever. A call its caller runs
// (events.RunnerCaller) has no gate: no Rath runner runs it, so none
// screens it or waits for an approval of it.
func (s *State) GateOf(callID string) Gate {
	t := s.Tools[callID]
	if t == nil || t.Runner == events.RunnerCaller {
		return Gate{}
	}
	id, keeper := "", GateKeeper
	switch {
	case t.ProposedBy == GateKeeper:
		id = t.Approval
	case t.Screened == ScreenedClear:
		return Gate{}
	case t.Screened != "":
		id, keeper = t.Screened, Screener
	case s.WorkflowRef == "":
		// No workflow, no gates: an approval the call names can only
		// hold it longer than it had to be.
		id, keeper = t.Approval, ""
	default:
		return Gate{Unscreened: true}
	}
	if id == "" {
		return Gate{}
	}
	a, ok := s.Approvals[id]
	if !ok || keeper != "" && a.RequestedBy != keeper || a.CallID != callID {
		return Gate{ApprovalID: id}
	}
	return Gate{ApprovalID: id, Outcome: a.Outcome, Reason: a.Reason, Actor: a.Actor}
}

// GatedCall returns the request of the tool call that approval id gates,
// rebuilt from the state, so a runner woken by the approval's decision can
// run the call; nil when the approval gates no call the state holds.
func (s *State) GatedCall(id string) *events.ToolRequested {
	a, ok := s.Approvals[id]
	if !ok || a.CallID == "" || s.GateOf(a.CallID).ApprovalID != id {
		return nil
	}
	return s.Call(a.CallID)
}

// Call returns the request of tool call callID, rebuilt from the state
// (with the approval that gates it, if any); nil when the state holds no
// such call.
func (s *State) Call(callID string) *events.ToolRequested {
	t := s.Tools[callID]
	if t == nil {
		return nil
	}
	return &events.ToolRequested{CallID: t.CallID, Tool: t.Tool, Arguments: t.Arguments, Agent: t.Agent, ApprovalID: s.GateOf(callID).ApprovalID, Runner: t.Runner}
}

// screen folds the tool runner's decision about the gate of a call that
// the agent worker did not propose: its approval request (approval) or its
// clearance (ScreenedClear). Only the screener decides, once per request:
// the first decision stands, and a new request of the call needs a new one.
func (s *State) screen(callID, actor, decision string) {
	t := s.Tools[callID]
	if t == nil || actor != Screener || t.ProposedBy == GateKeeper || t.Screened != "" {
		return
	}
	c := *t // entries are replaced, never changed in place: View shares them
	c.Screened = decision
	s.Tools[callID] = &c
}
