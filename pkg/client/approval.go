package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Approve grants a pending approval of a session (rath.approval.granted).
// The approver the session records is the client's authenticated identity,
// which the ledger stamps on the event; comment is free text. The ledger
// refuses an approval the session never requested (ledgerapi.ErrApprovalUnknown)
// and one decided already (ledgerapi.ErrApprovalSettled).
func (c *Client) Approve(ctx context.Context, id, approvalID, comment string) (api.Ack, error) {
	a, err := c.Emit(ctx, id, &events.ApprovalGranted{ApprovalID: approvalID, Comment: comment})
	if err != nil {
		return api.Ack{}, fmt.Errorf("approve %s of %s: %w", approvalID, id, err)
	}
	return a, nil
}

// Reject refuses a pending approval of a session (rath.approval.rejected);
// a gated tool call fails with reason, which its agent reads as the call's
// result. reason is required. Refusals as for Approve.
func (c *Client) Reject(ctx context.Context, id, approvalID, reason string) (api.Ack, error) {
	if reason == "" {
		return api.Ack{}, fmt.Errorf("reject %s of %s: %w", approvalID, id, ErrNoReason)
	}
	a, err := c.Emit(ctx, id, &events.ApprovalRejected{ApprovalID: approvalID, Reason: reason})
	if err != nil {
		return api.Ack{}, fmt.Errorf("reject %s of %s: %w", approvalID, id, err)
	}
	return a, nil
}

// ErrNoReason is returned by Reject without a reason: the agent of a gated
// call reads the reason as the call's result.
var ErrNoReason = errors.New("a rejection needs a reason")

// PendingApproval is an approval a session waits for.
type PendingApproval struct {
	Session    string `json:"session"`
	ApprovalID string `json:"approval_id"`
	Action     string `json:"action"`
	Approver   string `json:"approver,omitempty"`
	// CallID, Tool, Agent and Arguments are the gated tool call's, when a
	// gate asked for the approval. Arguments are left out above 1 KiB
	// (ArgumentsSize says how long; they are in the call's event).
	CallID        string          `json:"call_id,omitempty"`
	Tool          string          `json:"tool,omitempty"`
	Agent         string          `json:"agent,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	ArgumentsSize int             `json:"arguments_size,omitempty"`
	Gate          string          `json:"gate,omitempty"`
	Seq           uint64          `json:"seq"`
	Requested     time.Time       `json:"requested"`
	RequestedBy   string          `json:"requested_by,omitempty"`
	// Deadline is when the approval expires undecided (RFC 3339; "" for
	// none), OnTimeout what follows then (reject, close, escalate), and
	// EscalatedFrom the role first asked when Approver is an escalation's.
	Deadline      string `json:"deadline,omitempty"`
	OnTimeout     string `json:"on_timeout,omitempty"`
	EscalatedFrom string `json:"escalated_from,omitempty"`
}

// Pending lists the approvals session id waits for, oldest first, from the
// session's overview (at most session.MaxOpen of them, as the overview
// keeps), each with its gated call. A gated call the overview's calls in
// flight leave out (more than MaxOpen open) is asked for by name.
func (c *Client) Pending(ctx context.Context, id string) ([]PendingApproval, error) {
	ov, err := c.Overview(ctx, api.StateRequest{Session: id})
	if err != nil {
		return nil, fmt.Errorf("pending approvals of %s: %w", id, err)
	}
	var missing []string
	for _, a := range ov.Approvals.Waiting {
		if a.CallID != "" && !slices.ContainsFunc(calls(ov), func(t session.ToolEntry) bool { return t.CallID == a.CallID }) {
			missing = append(missing, a.CallID)
		}
	}
	if len(missing) > 0 {
		more, err := c.Overview(ctx, api.StateRequest{Session: id, ToolCalls: missing[:min(len(missing), session.MaxOpen)]})
		if err != nil {
			return nil, fmt.Errorf("pending approvals of %s: %w", id, err)
		}
		ov.Tools.Asked = more.Tools.Asked
	}
	return PendingOf(ov), nil
}

// calls are the tool calls an overview holds whole: those in flight and
// those asked for by name.
func calls(ov *session.Overview) []session.ToolEntry {
	return append(slices.Clip(ov.Tools.Open), ov.Tools.Asked...)
}

// PendingOf lists the approvals an overview shows waiting, oldest first,
// each joined with its gated call from the overview's calls in flight (or
// asked for).
func PendingOf(ov *session.Overview) []PendingApproval {
	out := make([]PendingApproval, 0, len(ov.Approvals.Waiting))
	held := calls(ov)
	for _, a := range ov.Approvals.Waiting {
		p := PendingApproval{Session: ov.ID, ApprovalID: a.ID, Action: a.Action, Approver: a.Approver, CallID: a.CallID,
			Tool: a.Tool, Gate: a.Gate, Seq: a.Seq, Requested: a.Requested, RequestedBy: a.RequestedBy,
			Deadline: a.Deadline, OnTimeout: a.OnTimeout, EscalatedFrom: a.EscalatedFrom}
		if i := slices.IndexFunc(held, func(t session.ToolEntry) bool { return t.CallID == a.CallID }); a.CallID != "" && i >= 0 {
			t := held[i]
			p.Agent, p.Arguments, p.ArgumentsSize = t.Agent, t.Arguments, t.ArgumentsSize
		}
		out = append(out, p)
	}
	return out
}
