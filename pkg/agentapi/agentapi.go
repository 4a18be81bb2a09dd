// Package agentapi is the agent worker's request API for served agents
// (pkg/agentserver, ADR 0038): a program serving agent X asks what a
// pending turn of X is (ReqTurn: the agent's system prompt and tools, from
// the session's workflow) and hands the worker its answer (ReqRecord),
// which the worker checks and records with the same code that records a
// model's answer (internal/turn), under the agent's own source
// (rath/agent/X). Gates, and so CEL, run in the worker only.
//
// Requests go to rath.agent.<tenant>.<user>.<op> (events.Principal.Agent):
// the NATS server lets an identity publish under its own name only, so the
// subject names who asks. The worker answers only the identity served
// programs run with, the agent worker's (rath/agent-worker); refusals are
// pkg/ledgerapi errors with the codes below.
package agentapi

import (
	"encoding/json"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Request operations, the last token of the subject.
const (
	ReqTurn   = "turn"
	ReqRecord = "record"
)

// Queue is the queue group every agent worker answers in.
const Queue = "agent-worker"

// MaxRequestBytes bounds a request's body: an answer larger than this is
// refused as too large (and could not be stored as one atomic append).
const MaxRequestBytes = 512 << 10

// ReservedName is the one agent name that cannot be served: a served
// agent's durable consumer, agent-<name>, would be the agent worker's.
const ReservedName = "worker"

// ValidName reports whether name can name a served agent: a workflow
// agent's name (a CEL identifier: letters, digits and _, not starting with
// a digit), of at most 64 bytes.
func ValidName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Refusals particular to this API, besides ledgerapi's malformed,
// session_not_found, too_large and unavailable.
const (
	// CodeForbidden: the asker may not answer turns (its identity is not
	// the one served programs run with).
	CodeForbidden api.Code = "forbidden"
	// CodeNotPending: the named turn is not pending at the named sequence
	// (another turn, another agent's, ended, superseded, or answered
	// already otherwise than this answer).
	CodeNotPending api.Code = "turn_not_pending"
	// CodeNotServed: the session's workflow does not declare the agent
	// served (its turns are the agent worker's), or the session cannot run
	// the turn at all (the worker fails such a turn itself).
	CodeNotServed api.Code = "agent_not_served"
)

// Sentinels for errors.Is.
var (
	ErrForbidden  = &api.Error{Code: CodeForbidden}
	ErrNotPending = &api.Error{Code: CodeNotPending}
	ErrNotServed  = &api.Error{Code: CodeNotServed}
)

// Turn names a pending turn: the turn request stored at Seq in Session,
// with its turn ID, asked of Agent.
type Turn struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	TurnID  string `json:"turn_id"`
	Agent   string `json:"agent"`
}

// TurnReply is what the workflow says of the turn's agent.
type TurnReply struct {
	System string `json:"system,omitempty"`
	// Tools are the names of the tools the workflow lets the agent call.
	Tools []string `json:"tools,omitempty"`
}

// RecordRequest hands the worker the answer to a turn: exactly one of
// Answer and Failure.
type RecordRequest struct {
	Turn
	Answer *Answer `json:"answer,omitempty"`
	// Failure ends the turn as failed, with this reason (the agent's
	// error).
	Failure string `json:"failure,omitempty"`
}

// Answer is a served agent's answer (agentserver.Answer on the wire).
type Answer struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Provider and Model name what answered; empty: "go" and the agent.
	Provider  string `json:"provider,omitempty"`
	Model     string `json:"model,omitempty"`
	TokensIn  int64  `json:"tokens_in,omitempty"`
	TokensOut int64  `json:"tokens_out,omitempty"`
	LatencyMS int64  `json:"latency_ms,omitempty"`
}

// ToolCall is a tool call an answer asks for.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// RecordReply says how the turn ended: "completed" or "failed". A request
// asked again with the same answer gets the same reply, and nothing more
// is recorded.
type RecordReply struct {
	Outcome string `json:"outcome"`
}

// Outcomes of RecordReply.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
)
