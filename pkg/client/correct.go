package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Correction is a person's correction of a session at a point of its log:
// rewind to At, correct, resume. Exactly one of Say and CallID is set.
type Correction struct {
	// Session is the session corrected; At the last of its sequences the
	// correction keeps (0: its head).
	Session string
	At      uint64
	// ID is the fork's session ID; empty lets the ledger choose. Reason is
	// the fork's reason; empty: one naming the correction.
	ID     string
	Reason string
	Labels map[string]string
	// Say is a user message to the agents.
	Say string
	// CallID names a tool call requested at At and not finished there;
	// Result (and ExitCode) is what a person says it returned, in place of
	// running it.
	CallID   string
	Result   string
	ExitCode int
}

// Corrected is what Correct appended: the fork and the correction's last
// event.
type Corrected struct {
	Fork       api.Ack `json:"fork"`
	Correction api.Ack `json:"correction"`
	// Agent is the agent whose turn resumes the loop on the fork.
	Agent string `json:"agent"`
}

// ErrNotResumable is returned (wrapped, with the reason and what to do) by
// Correct for a point the agent loop cannot resume from: inside a turn,
// with a tool call in flight other than the one corrected, or before any
// agent's turn ended.
var ErrNotResumable = errors.New("the agent loop cannot resume there")

// Correct forks session r.Session at r.At and appends a person's correction to the
// fork: a user message (rath.conversation.chunk.appended, role user) or a
// tool call's result (a tool chunk and rath.tool.call.completed), each
// marked correction. The client's authenticated identity, which the ledger
// stamps on both the fork and the correction, is their author. On the
// fork the selector gives the agent of the last turn its next turn (a
// user correction: rule "correction"; a result: the built-in "continue"),
// so the loop resumes there.
//
// Over the protocol it is a fork, then the correction's appends to the fork
// (docs/protocol.md, "Rewind, correct, resume"). The point is checked
// first, on the session's state at At (folded from its log: a read linear in
// the session, once per correction): see ErrNotResumable.
func (c *Client) Correct(ctx context.Context, r Correction) (Corrected, error) {
	if (r.Say == "") == (r.CallID == "") {
		return Corrected{}, fmt.Errorf("correct %s: give a message or a tool call's result, exactly one", r.Session)
	}
	st, err := c.StateAt(ctx, r.Session, r.At)
	if err != nil {
		return Corrected{}, fmt.Errorf("correct %s at %d: %w", r.Session, r.At, err)
	}
	if r.At == 0 {
		r.At = st.Seq
	}
	call, err := resumable(st, r)
	if err != nil {
		return Corrected{}, fmt.Errorf("correct %s at %d: %w", r.Session, r.At, err)
	}
	if r.Reason == "" {
		r.Reason = "a person's correction: a message to the agents"
		if call != nil {
			r.Reason = fmt.Sprintf("a person's correction: the result of %s call %s", call.Tool, call.CallID)
		}
	}
	fork, err := c.Fork(ctx, api.ForkRequest{Parent: r.Session, At: r.At, ID: r.ID, Reason: r.Reason, Labels: r.Labels})
	if err != nil {
		return Corrected{}, fmt.Errorf("correct %s: %w", r.Session, err)
	}
	// IDs derived from the fork event: the correction is one of the fork,
	// and caused by it.
	opts := func(what string) []events.Option {
		return []events.Option{events.WithID(events.DerivedID(fork.ID, "correction", what)), events.WithCausation(fork.ID)}
	}
	var ack api.Ack
	if call == nil {
		ack, err = c.Emit(ctx, fork.Session, &events.ChunkAppended{Role: events.RoleUser, Content: r.Say, Correction: true}, opts("say")...)
	} else {
		// The tool chunk first, as a runner records a result: the model
		// reads it, and the completion routes the next turn.
		_, err = c.Emit(ctx, fork.Session, &events.ChunkAppended{Role: events.RoleTool, Agent: call.Agent, Content: r.Result,
			ToolCallID: call.CallID, Correction: true}, opts("chunk")...)
		if err == nil {
			ack, err = c.Emit(ctx, fork.Session, &events.ToolCompleted{CallID: call.CallID, Tool: call.Tool, Result: r.Result,
				ExitCode: r.ExitCode, Correction: true}, opts("result")...)
		}
	}
	if err != nil {
		return Corrected{Fork: fork}, fmt.Errorf("correct %s on its fork %s: %w", r.Session, fork.Session, err)
	}
	return Corrected{Fork: fork, Correction: ack, Agent: st.LastAgent}, nil
}

// resumable checks that the loop resumes after a correction at st: no turn
// in flight, no tool call in flight but the one corrected (nobody would
// finish it in the fork), and an agent to resume. It returns the corrected
// call, if any.
func resumable(st *session.State, r Correction) (*session.Tool, error) {
	if st.Turn != nil {
		return nil, fmt.Errorf("%w: the turn of %s (requested at %d) is in flight at %d; correct between turns, after its end",
			ErrNotResumable, st.Turn.Agent, st.Turn.Seq, st.Seq)
	}
	var call *session.Tool
	if r.CallID != "" {
		call = st.Tools[r.CallID]
		switch {
		case call == nil:
			return nil, fmt.Errorf("%w: %s has no tool call %s at %d", ErrNotResumable, st.ID, r.CallID, st.Seq)
		case call.Status == session.ToolCompleted || call.Status == session.ToolFailed:
			return nil, fmt.Errorf("%w: tool call %s had %s by %d; correct it before its result, at %d",
				ErrNotResumable, r.CallID, call.Status, st.Seq, call.Seqs[len(call.Seqs)-1]-1)
		}
		if g := st.GateOf(r.CallID); g.ApprovalID != "" && g.Outcome == "" {
			return nil, fmt.Errorf("%w: tool call %s waits for approval %s; approve or reject it instead (rath approve, rath reject)",
				ErrNotResumable, r.CallID, g.ApprovalID)
		}
	}
	var open []string
	for id, t := range st.Tools {
		if id != r.CallID && (t.Status == session.ToolRequested || t.Status == session.ToolRunning) {
			open = append(open, id)
		}
	}
	if len(open) > 0 {
		slices.Sort(open)
		return nil, fmt.Errorf("%w: tool call %s is in flight at %d and nothing would finish it on the fork; correct after its result",
			ErrNotResumable, strings.Join(open, ", "), st.Seq)
	}
	if st.LastAgent == "" {
		return nil, fmt.Errorf("%w: no agent's turn has ended by %d, so there is no agent to resume", ErrNotResumable, st.Seq)
	}
	return call, nil
}
