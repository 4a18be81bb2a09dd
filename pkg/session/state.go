// Package session holds the state of a Rath session and the fold that builds it
// from the session's events. Apply is the only place that interprets session
// events; every service that needs "the state of S at N" folds with it.
package session

import (
	"encoding/json"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// Status is a session's lifecycle state.
type Status string

// Session statuses. A session is open from its start (or fork) on, and its
// status is active while open and not paused: Rath has no separate "open"
// status, because nothing routes an opened session differently from one with
// agent work (the selector routes the first turn from the start event). A
// paused session still takes events but is routed no new work; resumed is an
// event that makes it active again, not a status. Closed takes only archival
// events; archived is final (a purge is an event of an archived session).
const (
	StatusActive   Status = "active"
	StatusPaused   Status = "paused"
	StatusClosed   Status = "closed"
	StatusArchived Status = "archived"
)

// Ended reports whether the session takes no more work: closed or archived.
func (s Status) Ended() bool { return s == StatusClosed || s == StatusArchived }

// State is a session folded up to Seq.
type State struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	Status Status `json:"status"`
	// StatusBy is the authenticated actor (tenant/user) of the last
	// lifecycle change: the start, fork, pause, resume, close or archive.
	StatusBy     string            `json:"status_by,omitempty"`
	Workflow     string            `json:"workflow,omitempty"`
	WorkflowHash string            `json:"workflow_hash,omitempty"`
	WorkflowRef  string            `json:"workflow_ref,omitempty"`
	Task         string            `json:"task,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Created      time.Time         `json:"created"`
	Updated      time.Time         `json:"updated"`
	CloseReason  string            `json:"close_reason,omitempty"`
	Outcome      string            `json:"outcome,omitempty"`

	Lineage Lineage `json:"lineage"`

	Chunks      []Chunk      `json:"chunks,omitempty"`
	Compactions []Compaction `json:"compactions,omitempty"`

	// Archive is where the session's events were archived, once they were.
	Archive *Archive `json:"archive,omitempty"`

	Usage Usage `json:"usage"`

	Pending   map[string]Work     `json:"pending,omitempty"`
	Approvals map[string]Approval `json:"approvals,omitempty"`
	Tools     map[string]*Tool    `json:"tools,omitempty"`
	Memory    []MemoryEvent       `json:"memory,omitempty"`
	Sandbox   *Placement          `json:"sandbox,omitempty"`
	// Moving is the move the session asked for (rath.sandbox.requested)
	// that no runner has answered yet: its tool calls wait for it.
	Moving *Move `json:"moving,omitempty"`

	// Turn is the agent turn in flight, if any. LastAgent and LastTurn are
	// the agent and ID of the last turn that ended: a request or end of that
	// turn folded again neither opens it nor counts it twice.
	Turn      *Turn  `json:"turn,omitempty"`
	LastAgent string `json:"last_agent,omitempty"`
	LastTurn  string `json:"last_turn,omitempty"`

	Decisions   []Decision   `json:"decisions,omitempty"`
	Validations []Validation `json:"validations,omitempty"`
	// Experiments are the experiments recorded (rath.experiment.recorded),
	// in log order.
	Experiments []Experiment `json:"experiments,omitempty"`
	Counts      Counts       `json:"counts"`

	// Seq and Hash are the head of the session's logical log: the last event
	// folded that belongs to this session or its fork ancestry.
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash,omitempty"`
	LastID string `json:"last_id,omitempty"`
}

// Lineage records where a session came from and what it took in.
type Lineage struct {
	Parent     string  `json:"parent,omitempty"`
	ForkSeq    uint64  `json:"fork_seq,omitempty"`
	ForkHash   string  `json:"fork_hash,omitempty"`
	ForkReason string  `json:"fork_reason,omitempty"`
	Merges     []Merge `json:"merges,omitempty"`
	// Path is the session's logical log as runs of each session's own
	// events, root first; the last run (this session's) is open (To 0).
	Path []events.Segment `json:"path,omitempty"`
	// Merged are the runs of other sessions' events taken in by merges.
	// Path and Merged together say which events' content the state holds,
	// so a merge never applies an event twice.
	Merged []events.Segment `json:"merged,omitempty"`
}

// Coverage is how a state holds the content of an event.
type Coverage int

// Coverages.
const (
	// NotCovered: the state does not hold the event.
	NotCovered Coverage = iota
	// CoveredByPath: the event is of the session's own log or of its fork
	// ancestry (Lineage.Path).
	CoveredByPath
	// CoveredByMerge: a merge took the event in (Lineage.Merged).
	CoveredByMerge
)

// Coverage says how the state holds the content of event seq of session
// id: through its own log or fork ancestry, through a merge, or not. It is
// the one answer to "does this state hold that event": the fold asks it so
// a merge never applies an event twice, the ledger when it computes a
// merge's segments, memory when it says how a session read an item.
func (s *State) Coverage(id string, seq uint64) Coverage {
	for i, runs := range [][]events.Segment{s.Lineage.Path, s.Lineage.Merged} {
		for _, r := range runs {
			if r.Session == id && seq >= r.From && (r.To == 0 || seq <= r.To) {
				return CoveredByPath + Coverage(i)
			}
		}
	}
	return NotCovered
}

// Covers reports whether the state already holds the content of event seq of
// session id, through its own log, its fork ancestry or a merge.
func (s *State) Covers(id string, seq uint64) bool { return s.Coverage(id, seq) != NotCovered }

// Awaits reports whether the session is open and turn id is its turn in
// flight: what a turn's answer needs to be recorded.
func (s *State) Awaits(id string) bool {
	return !s.Status.Ended() && s.Turn != nil && s.Turn.ID == id
}

// cover records that the content of event seq of session id is held.
func (s *State) cover(id string, seq uint64) {
	m := s.Lineage.Merged
	if n := len(m); n > 0 && m[n-1].Session == id && m[n-1].To+1 == seq {
		m[n-1].To = seq
		return
	}
	s.Lineage.Merged = append(m, events.Segment{Session: id, From: seq, To: seq})
}

// Merge is one merge into this session.
type Merge struct {
	Seq         uint64 `json:"seq"`
	Source      string `json:"source"`
	SourceSeq   uint64 `json:"source_seq"`
	SourceHash  string `json:"source_hash"`
	Ancestor    string `json:"ancestor"`
	AncestorSeq uint64 `json:"ancestor_seq"`
	Events      int    `json:"events"`
}

// Chunk is one piece of conversation. Origin is the session that produced it
// when it came in through a merge.
type Chunk struct {
	Seq        uint64 `json:"seq"`
	Role       string `json:"role"`
	Agent      string `json:"agent,omitempty"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Origin     string `json:"origin,omitempty"`
}

// Compaction records that chunks FromSeq..ToSeq are summarised in the model's
// context; the chunks themselves stay in State.Chunks.
type Compaction struct {
	Seq          uint64 `json:"seq"`
	FromSeq      uint64 `json:"from_seq"`
	ToSeq        uint64 `json:"to_seq"`
	Summary      string `json:"summary"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

// Archive records a session's archive bundle (rath.session.archived) and,
// once the hot stream no longer holds them, the purge of its events.
type Archive struct {
	Seq           uint64 `json:"seq"`
	BundleRef     string `json:"bundle_ref"`
	FromSeq       uint64 `json:"from_seq"`
	HeadSeq       uint64 `json:"head_seq"`
	HeadHash      string `json:"head_hash"`
	HeadStreamSeq uint64 `json:"head_stream_seq"`
	Events        int    `json:"events"`
	// PurgedSeq is the sequence of the rath.session.purged event (0: the
	// archived events are still in the hot stream).
	PurgedSeq uint64 `json:"purged_seq,omitempty"`
}

// Tokens counts model usage. The state, the dossier and rath diff count
// with it.
type Tokens struct {
	In    int64 `json:"in"`
	Out   int64 `json:"out"`
	Calls int64 `json:"calls"`
}

// Add counts in and out tokens, and a model call when call is set (usage
// recorded apart from a call counts tokens only).
func (t *Tokens) Add(in, out int64, call bool) {
	t.In += in
	t.Out += out
	if call {
		t.Calls++
	}
}

// Usage is token usage in total, by agent and by provider/model.
type Usage struct {
	Total   Tokens            `json:"total"`
	ByAgent map[string]Tokens `json:"by_agent,omitempty"`
	ByModel map[string]Tokens `json:"by_model,omitempty"`
}

// Add counts one model call's (call set) or one usage record's tokens, in
// total, for the agent and for "provider/model" (the model alone when no
// provider is named).
func (u *Usage) Add(agent, provider, model string, in, out int64, call bool) {
	u.Total.Add(in, out, call)
	if u.ByAgent == nil {
		u.ByAgent = map[string]Tokens{}
	}
	if u.ByModel == nil {
		u.ByModel = map[string]Tokens{}
	}
	a := u.ByAgent[agent]
	a.Add(in, out, call)
	u.ByAgent[agent] = a
	key := model
	if provider != "" {
		key = provider + "/" + model
	}
	m := u.ByModel[key]
	m.Add(in, out, call)
	u.ByModel[key] = m
}

// AddEvent counts the usage an event records (rath.model.called,
// rath.usage.recorded; data is the event's decoded data) and reports whether
// it recorded any.
func (u *Usage) AddEvent(data any) bool {
	switch d := data.(type) {
	case *events.ModelCalled:
		u.Add(d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut, true)
	case *events.UsageRecorded:
		u.Add(d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut, false)
	default:
		return false
	}
	return true
}

// Merge adds v to u.
func (u *Usage) Merge(v Usage) {
	u.Total.In += v.Total.In
	u.Total.Out += v.Total.Out
	u.Total.Calls += v.Total.Calls
	for _, pair := range []struct {
		into *map[string]Tokens
		from map[string]Tokens
	}{{&u.ByAgent, v.ByAgent}, {&u.ByModel, v.ByModel}} {
		for k, t := range pair.from {
			if *pair.into == nil {
				*pair.into = map[string]Tokens{}
			}
			x := (*pair.into)[k]
			x.In, x.Out, x.Calls = x.In+t.In, x.Out+t.Out, x.Calls+t.Calls
			(*pair.into)[k] = x
		}
	}
}

// WorkKindTool is the kind of the pending work an agent's turn records
// while it waits for one of its tools that no tool runner or tool server
// offers yet.
const WorkKindTool = "tool"

// Work is pending work the session owes.
type Work struct {
	Seq         uint64 `json:"seq"`
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	Assignee    string `json:"assignee,omitempty"`
}

// Approval is a requested approval and its outcome ("" while pending).
type Approval struct {
	Seq    uint64 `json:"seq"`
	Action string `json:"action"`
	// Approver is the role asked to decide.
	Approver string `json:"approver,omitempty"`
	// CallID, Tool and Gate name the tool call the approval gates and the
	// workflow gate that asked; empty for an approval about the session.
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Gate   string `json:"gate,omitempty"`
	// Requested is when it was asked for (the event's time).
	Requested time.Time `json:"requested,omitzero"`
	Outcome   string    `json:"outcome,omitempty"`
	// Actor is who decided, as the ledger authenticated the decision's
	// proposer (tenant/user): what counts. By is who the decision says
	// decided, free text for display.
	Actor string `json:"actor,omitempty"`
	By    string `json:"by,omitempty"`
	// Reason is a rejection's reason or a grant's comment; DecidedSeq the
	// decision's sequence.
	Reason     string `json:"reason,omitempty"`
	DecidedSeq uint64 `json:"decided_seq,omitempty"`
	// RequestedBy is the authenticated actor that asked for the approval.
	RequestedBy string `json:"requested_by,omitempty"`
	// Deadline is when the approval expires undecided (RFC 3339; "" for
	// none), OnTimeout what the expiry does; EscalateTo and
	// EscalateDeadline the escalation it asks for. After an escalation,
	// Approver is the role escalated to, Deadline the escalation's,
	// OnTimeout reject, and EscalatedFrom the role first asked.
	Deadline         string `json:"deadline,omitempty"`
	OnTimeout        string `json:"on_timeout,omitempty"`
	EscalateTo       string `json:"escalate_to,omitempty"`
	EscalateDeadline string `json:"escalate_deadline,omitempty"`
	EscalatedFrom    string `json:"escalated_from,omitempty"`
}

// Approval outcomes; a pending approval has none.
const (
	ApprovalGranted  = "granted"
	ApprovalRejected = "rejected"
	// ApprovalExpired: the deadline passed undecided (and the expiry did
	// not escalate); a gated call fails as if rejected.
	ApprovalExpired = "expired"
)

// Tool is the evidence index of one tool call: where to find each of its
// events and its last known outcome.
type Tool struct {
	CallID       string          `json:"call_id"`
	Tool         string          `json:"tool"`
	Agent        string          `json:"agent,omitempty"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
	Status       string          `json:"status"`
	Attempts     int             `json:"attempts"`
	ExitCode     int             `json:"exit_code"`
	CommitBefore string          `json:"commit_before,omitempty"`
	CommitAfter  string          `json:"commit_after,omitempty"`
	Error        string          `json:"error,omitempty"`
	Seqs         []uint64        `json:"seqs"`
	Origin       string          `json:"origin,omitempty"`
	// Approval is the approval its request names ("" for none). It gates
	// the call only when the agent worker proposed it (GateOf).
	Approval string `json:"approval,omitempty"`
	// ProposedBy is who proposed the call (its latest request), as the
	// ledger authenticated it (tenant/user).
	ProposedBy string `json:"proposed_by,omitempty"`
	// Screened is the tool runner's decision about the gate of a call the
	// agent worker did not propose: ScreenedClear, or the ID of the
	// approval it asked for; "" until it decides (ADR 0025, amendment).
	Screened string `json:"screened,omitempty"`
	// Runner is who runs the call, as its latest request says:
	// events.RunnerCaller for a call the program that recorded it runs
	// (no Rath runner takes it, and it stays open until that program
	// records its completion or failure); "" for a Rath runner.
	Runner string `json:"runner,omitempty"`
}

// Tool call statuses.
const (
	ToolRequested = "requested"
	ToolRunning   = "running"
	ToolCompleted = "completed"
	ToolFailed    = "failed"
)

// MemoryEvent is one memory read, write or retraction seen by the session.
// A recall keeps the agent and turn that asked and the item versions it
// returned, with their content: the agent worker builds the turn's context
// from them.
type MemoryEvent struct {
	Seq     uint64                 `json:"seq"`
	Kind    string                 `json:"kind"`
	ItemIDs []string               `json:"item_ids"`
	Query   string                 `json:"query,omitempty"`
	EventID string                 `json:"event_id"`
	Agent   string                 `json:"agent,omitempty"`
	TurnID  string                 `json:"turn_id,omitempty"`
	Items   []events.MemoryItemRef `json:"items,omitempty"`
	// Actor is who the event was for, as the ledger authenticated it: the
	// principal on whose behalf a service proposed it (events.ExtOnBehalf),
	// else its proposer.
	Actor string `json:"actor,omitempty"`
}

// Placement is where the session's side effects happen.
type Placement struct {
	Seq uint64 `json:"seq"`
	// Session is the session that placed it: a fork inherits its parent's
	// placement until it is placed itself.
	Session   string `json:"session"`
	Commit    string `json:"commit,omitempty"`
	Backend   string `json:"backend"`
	SandboxID string `json:"sandbox_id"`
	Host      string `json:"host,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// Isolation says what the placement isolates (events.SandboxPlaced
	// IsolationOf): "none (development)" for the local backend.
	Isolation string `json:"isolation,omitempty"`
	// Pool is the pool of the runner holding the workspace ("" the
	// default pool), Runner that runner.
	Pool   string `json:"pool,omitempty"`
	Runner string `json:"runner,omitempty"`
}

// Move is a move between sandboxes asked for and not answered yet.
type Move struct {
	Seq uint64 `json:"seq"`
	// ID is the request's event ID, which its answer names as causation.
	ID string `json:"id"`
	// Session is the session that asked: a fork does not wait for its
	// parent's move.
	Session string `json:"session"`
	Backend string `json:"backend"`
	Pool    string `json:"pool,omitempty"`
}

// Decision is one routing decision (rath.selector.decided); Cause is the
// event that triggered it. ID is the decision event's own ID: the selector
// derives it from the trigger, so it tells the selector's decision for a
// trigger from one another producer stored with the same cause (rath replay
// --fork decides a fork's first turn, caused by the fork). States folded
// before decisions kept their IDs have none.
type Decision struct {
	Seq    uint64 `json:"seq"`
	ID     string `json:"id,omitempty"`
	Rule   string `json:"rule"`
	Route  string `json:"route"`
	Reason string `json:"reason,omitempty"`
	Cause  string `json:"cause,omitempty"`
	TurnID string `json:"turn_id,omitempty"`
}

// Validation is one validation outcome of the session.
type Validation struct {
	Seq uint64 `json:"seq"`
	Check
}

// Check is what a validation found: whether it passed, the validator, what
// it checked (a commit, say) and why it failed. The state, the dossier and
// rath diff share it.
type Check struct {
	Passed    bool   `json:"passed"`
	Validator string `json:"validator"`
	Target    string `json:"target,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// CheckOf reads a validation event's decoded data (rath.validation.passed
// or rath.validation.failed); false for any other.
func CheckOf(data any) (Check, bool) {
	switch d := data.(type) {
	case *events.ValidationPassed:
		return Check{Passed: true, Validator: d.Validator, Target: d.Target}, true
	case *events.ValidationFailed:
		return Check{Validator: d.Validator, Target: d.Target, Reason: d.Reason}, true
	}
	return Check{}, false
}

// Experiment is one experiment of the session: its event's sequence and
// ID (the provenance a memory of it names) and what it recorded.
type Experiment struct {
	Seq     uint64 `json:"seq"`
	EventID string `json:"event_id"`
	events.ExperimentRecorded
}

// OK reports whether the experiment ran and reported metrics: its command
// exited 0 with a usable report.
func (x Experiment) OK() bool { return x.ExitCode == 0 && len(x.Metrics) > 0 && x.Problem == "" }

// Turn is an agent turn in flight.
type Turn struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Seq   uint64 `json:"seq"`
	// At is when the event that opened it was stored.
	At time.Time `json:"at,omitzero"`
}

// Counts are running totals that routing rules and budgets read.
type Counts struct {
	Events        int `json:"events"`
	Chunks        int `json:"chunks"`
	ModelCalls    int `json:"model_calls"`
	ModelFailures int `json:"model_failures"`
	ToolCalls     int `json:"tool_calls"`
	Turns         int `json:"turns"`
	TurnsFailed   int `json:"turns_failed"`
	// TurnsByAgent counts completed turns per agent.
	TurnsByAgent      map[string]int `json:"turns_by_agent,omitempty"`
	ValidationsPassed int            `json:"validations_passed"`
	ValidationsFailed int            `json:"validations_failed"`
	HandlerFailures   int            `json:"handler_failures"`
	Merged            int            `json:"merged"`
}

// Clone returns a deep copy, so a caller can keep a state while folding on.
func (s *State) Clone() *State {
	b, err := json.Marshal(s)
	if err != nil {
		panic("session: state does not marshal: " + err.Error()) // only plain data: cannot happen
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		panic("session: state does not unmarshal: " + err.Error())
	}
	return &c
}
