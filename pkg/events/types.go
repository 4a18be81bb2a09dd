package events

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Wire names of every event kind. They are part of the stored history: never
// rename one; add a new kind (or a new schema version) instead.
const (
	TypeSessionStarted      = "rath.session.started"
	TypeSessionForked       = "rath.session.forked"
	TypeSessionMerged       = "rath.session.merged"
	TypeSessionPaused       = "rath.session.paused"
	TypeSessionResumed      = "rath.session.resumed"
	TypeSessionClosed       = "rath.session.closed"
	TypeSessionArchived     = "rath.session.archived"
	TypeSessionPurged       = "rath.session.purged"
	TypeChunkAppended       = "rath.conversation.chunk.appended"
	TypeTranscriptCompacted = "rath.transcript.compacted"
	TypeModelCalled         = "rath.model.called"
	TypeUsageRecorded       = "rath.usage.recorded"
	TypeToolRequested       = "rath.tool.call.requested"
	TypeToolStarted         = "rath.tool.call.started"
	TypeToolCompleted       = "rath.tool.call.completed"
	TypeToolFailed          = "rath.tool.call.failed"
	TypeToolCleared         = "rath.tool.call.cleared"
	TypeSandboxPlaced       = "rath.sandbox.placed"
	TypeSandboxRequested    = "rath.sandbox.requested"
	TypeSandboxRefused      = "rath.sandbox.refused"
	TypeMemoryRecalled      = "rath.memory.recalled"
	TypeMemoryWritten       = "rath.memory.written"
	TypeMemoryRetracted     = "rath.memory.retracted"
	TypeSelectorDecided     = "rath.selector.decided"
	TypeWorkPending         = "rath.work.pending"
	TypeWorkDone            = "rath.work.done"
	TypeValidationPassed    = "rath.validation.passed"
	TypeValidationFailed    = "rath.validation.failed"
	TypeExperimentRecorded  = "rath.experiment.recorded"
	TypeApprovalRequested   = "rath.approval.requested"
	TypeApprovalGranted     = "rath.approval.granted"
	TypeApprovalRejected    = "rath.approval.rejected"
	TypeApprovalExpired     = "rath.approval.expired"
	TypeTurnRequested       = "rath.agent.turn.requested"
	TypeTurnCompleted       = "rath.agent.turn.completed"
	TypeTurnFailed          = "rath.agent.turn.failed"
	TypeModelCallFailed     = "rath.model.call.failed"
	TypeHandlerFailed       = "rath.handler.failed"
)

// Conversation roles a chunk may carry.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// SessionStarted opens a session. It is the first event of every root session.
type SessionStarted struct {
	Workflow     string `json:"workflow,omitempty"`
	WorkflowHash string `json:"workflow_hash,omitempty"`
	// WorkflowRef is the blob reference of the workflow bundle (the file and
	// the scripts it names) the workers run.
	WorkflowRef string            `json:"workflow_ref,omitempty"`
	Task        string            `json:"task,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// SessionForked is the first event of a forked session. The fork's log is the
// parent's log up to AtSeq followed by the fork's own events, which continue the
// parent's numbering at AtSeq+1 and chain onto ParentHash.
type SessionForked struct {
	Parent     string            `json:"parent"`
	AtSeq      uint64            `json:"at_seq"`
	ParentHash string            `json:"parent_hash"`
	Reason     string            `json:"reason,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Workflow, WorkflowHash and WorkflowRef, when WorkflowRef is set, are
	// the workflow the fork runs from here on, in place of the one it
	// inherits (a counterfactual's changed workflow: rath recheck); the
	// prefix it shares ran on the parent's, as recorded.
	Workflow     string `json:"workflow,omitempty"`
	WorkflowHash string `json:"workflow_hash,omitempty"`
	WorkflowRef  string `json:"workflow_ref,omitempty"`
}

// Segment names a contiguous run of one session's own events, From and To inclusive.
type Segment struct {
	Session string `json:"session"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
}

// Position names one event of a session's logical log and its chain hash.
type Position struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Hash    string `json:"hash"`
}

// SessionMerged joins Source into the session it is appended to. Ancestor is
// the last event both logs share (nil when they share none). Segments are
// exactly the source events after the common ancestor that the merge takes in,
// so folding the merge reads them once and never re-applies the shared prefix.
type SessionMerged struct {
	Source     string    `json:"source"`
	SourceHead Position  `json:"source_head"`
	Ancestor   *Position `json:"ancestor,omitempty"`
	Segments   []Segment `json:"segments"`
	Reason     string    `json:"reason,omitempty"`
}

// SessionPaused stops routing new work to a session until it is resumed.
type SessionPaused struct {
	Reason string `json:"reason,omitempty"`
}

// SessionResumed lets a paused session take work again.
type SessionResumed struct {
	Reason string `json:"reason,omitempty"`
}

// SessionClosed ends a session; the ledger accepts nothing after it.
type SessionClosed struct {
	Reason  string `json:"reason,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

// SessionArchived records that a closed session's own events were written to
// an archive bundle in the object store (rath-blobs): the events FromSeq..HeadSeq
// stored on the session's own subjects, in order, with their hashes. The
// bundle is verifiable offline; HeadHash is the hash this event chains onto.
// Made by the ledger's archive operation, never proposed.
type SessionArchived struct {
	// BundleRef names the bundle in the object store, "sha256:<hex>".
	BundleRef string `json:"bundle_ref"`
	// FromSeq is the session's first own sequence (1, or a fork's fork point + 1).
	FromSeq uint64 `json:"from_seq"`
	// HeadSeq and HeadHash are the last archived event.
	HeadSeq  uint64 `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// HeadStreamSeq is the sessions stream sequence of the last archived
	// event: after a purge, a read that starts at or before it reads the bundle.
	HeadStreamSeq uint64 `json:"head_stream_seq"`
	Events        int    `json:"events"`
	Bytes         int64  `json:"bytes"`
	Reason        string `json:"reason,omitempty"`
}

// SessionPurged records that the events an archive holds were removed from
// the hot sessions stream; reads of them go to the bundle from then on. Made
// by the ledger's retention (or archive --purge), never proposed.
type SessionPurged struct {
	BundleRef string `json:"bundle_ref"`
	// UpToSeq is the last purged sequence (the archive's head).
	UpToSeq uint64 `json:"up_to_seq"`
	Events  int    `json:"events"`
	Reason  string `json:"reason,omitempty"`
}

// ChunkAppended adds one piece of conversation to the transcript.
type ChunkAppended struct {
	Role       string `json:"role"`
	Agent      string `json:"agent,omitempty"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Correction marks a person's correction (role user): what `rath fork
	// --say` appends. Its author is the event's actor. The selector gives
	// the agent of the last turn its next turn on it, so the loop resumes.
	Correction bool `json:"correction,omitempty"`
}

// TranscriptCompacted replaces chunks FromSeq..ToSeq in the model's context by a
// summary. It deletes nothing: the chunks stay in the log and in earlier states.
type TranscriptCompacted struct {
	FromSeq      uint64 `json:"from_seq"`
	ToSeq        uint64 `json:"to_seq"`
	Summary      string `json:"summary"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

// ModelCalled records one model invocation and its token usage.
type ModelCalled struct {
	Agent       string `json:"agent"`
	Provider    string `json:"provider"`
	Model       string `json:"model"`
	TokensIn    int64  `json:"tokens_in"`
	TokensOut   int64  `json:"tokens_out"`
	LatencyMS   int64  `json:"latency_ms"`
	Attempt     int    `json:"attempt,omitempty"`
	StopReason  string `json:"stop_reason,omitempty"`
	RequestRef  string `json:"request_ref,omitempty"`
	ResponseRef string `json:"response_ref,omitempty"`
	// Choice is the seeded draw of a scripted agent's choose turn that
	// answered; absent for every other answer.
	Choice *ScriptChoice `json:"choice,omitempty"`
}

// LabelSeed is the session label that seeds scripted agents' choices
// (a script's choose turns): the same seed and conversation draw the same
// alternative, so a replay (which starts with the original's labels)
// reproduces the run; rath eval gives each try its own seed. A session
// without it draws with the seed "".
const LabelSeed = "rath.seed"

// ScriptChoice is which alternative a scripted choose turn drew.
type ScriptChoice struct {
	// Turn is the choose turn's index in the agent's script (from 0).
	Turn int `json:"turn"`
	// Alternative is the alternative drawn, its index among the turn's
	// alternatives (from 0); Of is how many of them matched the input
	// and could be drawn.
	Alternative int `json:"alternative"`
	Of          int `json:"of"`
	// Seed is the seed the draw used (the session's LabelSeed).
	Seed string `json:"seed"`
}

// UsageRecorded records token usage not tied to a model call event (embeddings,
// usage reported late by a provider).
type UsageRecorded struct {
	Agent     string `json:"agent"`
	Provider  string `json:"provider,omitempty"`
	Model     string `json:"model"`
	TokensIn  int64  `json:"tokens_in"`
	TokensOut int64  `json:"tokens_out"`
}

// Sandbox names where a tool ran.
type Sandbox struct {
	Backend   string `json:"backend"`
	SandboxID string `json:"sandbox_id"`
	// Pool is the pool of tool runners the sandbox is on; "" is the
	// default pool (PoolDefault).
	Pool string `json:"pool,omitempty"`
}

// ToolRequested asks for a tool call. A call with an ApprovalID is gated:
// its approval (a rath.approval.requested with that ID and this CallID,
// stored before it in the same atomic append) must be granted before any
// runner executes it, and a rejection fails it.
type ToolRequested struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Agent     string          `json:"agent,omitempty"`
	// ApprovalID names the approval the call waits for; absent: the call
	// is not gated.
	ApprovalID string `json:"approval_id,omitempty"`
	// Runner says who runs the call: "" a Rath runner (the tool runner or
	// the custom tool server of the tool), RunnerCaller the program that
	// recorded the call.
	Runner string `json:"runner,omitempty"`
}

// RunnerCaller is the ToolRequested.Runner of a call that the program which
// recorded it runs, and whose rath.tool.call.completed or
// rath.tool.call.failed it records itself (the model gateway's sessions, ADR
// 0039). No tool runner, tool server or gate screening takes such a call,
// and no gate of the session's workflow holds it: the session's log only
// records it. Absent (""), a Rath runner takes the call, as before the
// field existed.
const RunnerCaller = "caller"

// ToolCleared records that no gate of the session's workflow holds a tool
// call that the agent worker did not propose: the tool runner decides the
// gate of every such call where it is executed, and records either this or
// the call's rath.approval.requested (ADR 0025, amendment). A tool server
// runs such a call only once one of the two is in the log.
type ToolCleared struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
}

// ToolStarted records that a runner began a tool call attempt.
type ToolStarted struct {
	CallID  string   `json:"call_id"`
	Tool    string   `json:"tool"`
	Attempt int      `json:"attempt"`
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// ToolCompleted records a finished tool call with its evidence.
type ToolCompleted struct {
	CallID       string   `json:"call_id"`
	Tool         string   `json:"tool"`
	Attempt      int      `json:"attempt,omitempty"`
	Result       string   `json:"result,omitempty"`
	ResultRef    string   `json:"result_ref,omitempty"`
	ExitCode     int      `json:"exit_code"`
	DurationMS   int64    `json:"duration_ms"`
	Diff         string   `json:"diff,omitempty"`
	DiffRef      string   `json:"diff_ref,omitempty"`
	CommitBefore string   `json:"commit_before,omitempty"`
	CommitAfter  string   `json:"commit_after,omitempty"`
	Sandbox      *Sandbox `json:"sandbox,omitempty"`
	// Limits are the limits the call's command ran under, as its sandbox
	// reported them: each process's, the call's as a whole (a control
	// group's memory, processes and CPU time, or why there were none) and
	// the system-call filter. Empty for a call that ran no command.
	Limits string `json:"limits,omitempty"`
	// Correction marks a result a person provided in place of the tool's
	// (`rath fork --tool-result`): nothing ran, and the event's actor is
	// who wrote it.
	Correction bool `json:"correction,omitempty"`
}

// ToolFailed records a tool call that could not complete.
type ToolFailed struct {
	CallID     string   `json:"call_id"`
	Tool       string   `json:"tool"`
	Attempt    int      `json:"attempt,omitempty"`
	Error      string   `json:"error"`
	ExitCode   int      `json:"exit_code,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	Sandbox    *Sandbox `json:"sandbox,omitempty"`
}

// Sandbox backends a placement names (SandboxPlaced.Backend, and the
// backend a workflow or a SandboxRequested asks for). They are wire values:
// never rename one.
const (
	// BackendLocal keeps workspaces in directories of the runner's host and
	// runs commands as the runner's user. It is for development: it
	// isolates nothing.
	BackendLocal = "local"
	// BackendBwrap runs every command in a bubblewrap sandbox: new
	// namespaces, a read-only system, the workspace the only writable path,
	// no network.
	BackendBwrap = "bwrap"
	// BackendGVisor runs every command in a gVisor sandbox (runsc): its
	// system calls reach gVisor's kernel in user space, not the host's;
	// otherwise as bwrap: a read-only system, the workspace the only
	// writable path, no network.
	BackendGVisor = "gvisor"
	// BackendRemote runs every command in a sandbox of a remote sandbox
	// service (OpenSandbox's API, ADR 0041), isolated as that service
	// isolates it; the workspace's repository stays on the tool runner.
	BackendRemote = "remote"
)

// Backends lists the sandbox backends Rath knows, the isolating ones first.
func Backends() []string { return []string{BackendBwrap, BackendGVisor, BackendRemote, BackendLocal} }

// Development reports whether a backend is for development only: it does
// not isolate a session's commands from the host.
func Development(backend string) bool { return backend == BackendLocal }

// IsolationNone is the isolation of a placement on the local backend, and
// what a local placement recorded before placements said their isolation
// is taken to have.
const IsolationNone = "none (development)"

// SandboxPlaced records where the session's side effects happen from now on.
type SandboxPlaced struct {
	Backend   string `json:"backend"`
	SandboxID string `json:"sandbox_id"`
	Host      string `json:"host,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// Commit is the workspace's commit when it was placed (a fork's
	// workspace is materialised at the commit recorded at the fork point,
	// a moved one at the head commit of the workspace it moved from).
	Commit string `json:"commit,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Isolation says what the placement isolates: for bwrap the
	// namespaces, the user, the network and the limits; for local
	// IsolationNone. Absent in placements recorded before it was added
	// (see IsolationOf).
	Isolation string `json:"isolation,omitempty"`
	// From is the placement the session moved from (a SandboxRequested
	// answered); absent for a first placement, a fork's and a re-placement.
	From *Sandbox `json:"from,omitempty"`
	// Pool is the pool of the tool runner holding the workspace; "" is the
	// default pool. Runner names that runner: its pool, host and
	// workspaces root (absent in placements recorded before pools).
	Pool   string `json:"pool,omitempty"`
	Runner string `json:"runner,omitempty"`
}

// PoolDefault is the pool of a tool runner started without --pool, and of
// a session whose placement names none.
const PoolDefault = "default"

// CheckPool admits a pool's name: 1 to 32 of a-z, 0-9, '-' and '_',
// starting with a letter or digit (a NATS subject token).
func CheckPool(pool string) error {
	if !poolRE.MatchString(pool) {
		return fmt.Errorf("pool %q: want 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter or digit", pool)
	}
	return nil
}

var poolRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ParseWhere reads a session's destination as `rath to` and Session.To
// take it, "[POOL/]BACKEND": pool "" is the pool the session is on.
func ParseWhere(where string) (pool, backend string, err error) {
	pool, backend, pooled := strings.Cut(where, "/")
	if !pooled {
		pool, backend = "", where
	} else if err := CheckPool(pool); err != nil {
		return "", "", err
	}
	if !slices.Contains(Backends(), backend) {
		return "", "", fmt.Errorf("unknown sandbox backend %q (backends: %s)", backend, strings.Join(Backends(), ", "))
	}
	return pool, backend, nil
}

// PoolOf is a recorded pool's name: "" is PoolDefault.
func PoolOf(pool string) string {
	if pool == "" {
		return PoolDefault
	}
	return pool
}

// IsolationOf is the isolation a placement recorded, or, for a local
// placement recorded before placements said it, IsolationNone; "" when it is
// unknown.
func (p *SandboxPlaced) IsolationOf() string {
	if p.Isolation == "" && Development(p.Backend) {
		return IsolationNone
	}
	return p.Isolation
}

// SandboxRequested asks the tool runner to move the session to another
// sandbox backend between tool calls. The runner answers with a
// SandboxPlaced whose From is the placement it left, or with a
// SandboxRefused; either has the request as its causation.
type SandboxRequested struct {
	Backend string `json:"backend"`
	// Pool is the pool of tool runners to move to; "" is the pool the
	// session is on. A move to another pool carries the workspace at its
	// head commit through the object store (ADR 0042).
	Pool   string `json:"pool,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SandboxRefused answers a SandboxRequested the tool runner did not carry
// out: an unknown backend, one the runner cannot run here (and why), the
// backend the session is on already, or a workspace that cannot be moved.
type SandboxRefused struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// MemoryItemRef names one version of a memory item and its recall score.
// Content is the version's text as it was recalled, so the session's log
// alone says what the turn was given (audit, replay); absent in recalls
// recorded before it was added.
type MemoryItemRef struct {
	ItemID  string  `json:"item_id"`
	Version int     `json:"version"`
	Score   float64 `json:"score,omitempty"`
	Content string  `json:"content,omitempty"`
}

// Provenance says what justified a memory write.
type Provenance struct {
	Session  string   `json:"session"`
	EventIDs []string `json:"event_ids,omitempty"`
	Evidence string   `json:"evidence"`
}

// MemoryRecalled records a retrieval and the turn that used it. Scopes and
// Tags are the filters the recall applied (Scope is the older single form).
type MemoryRecalled struct {
	Query  string          `json:"query"`
	Agent  string          `json:"agent,omitempty"`
	TurnID string          `json:"turn_id,omitempty"`
	Scope  string          `json:"scope,omitempty"`
	Scopes []string        `json:"scopes,omitempty"`
	Tags   []string        `json:"tags,omitempty"`
	Items  []MemoryItemRef `json:"items"`
}

// MemoryWritten records a new version of a memory item with its provenance.
type MemoryWritten struct {
	ItemID     string     `json:"item_id"`
	Version    int        `json:"version"`
	Content    string     `json:"content"`
	Tags       []string   `json:"tags,omitempty"`
	Scope      string     `json:"scope"`
	Provenance Provenance `json:"provenance"`
	// RestoredFrom is the earlier version whose content this version
	// restores (absent: not a restore).
	RestoredFrom int `json:"restored_from,omitempty"`
}

// MemoryRetracted withdraws an item (or one version of it).
type MemoryRetracted struct {
	ItemID  string `json:"item_id"`
	Version int    `json:"version,omitempty"`
	By      string `json:"by"`
	Reason  string `json:"reason"`
}

// SelectorDecided records a routing decision and what it was based on. A
// decision that routes an agent turn names the turn: from this event on the
// turn counts as in flight, so no other decision can route a second one.
type SelectorDecided struct {
	Rule       string          `json:"rule"`
	Inputs     json.RawMessage `json:"inputs,omitempty"`
	Candidates []string        `json:"candidates,omitempty"`
	Route      string          `json:"route"`
	Reason     string          `json:"reason,omitempty"`
	Agent      string          `json:"agent,omitempty"`
	TurnID     string          `json:"turn_id,omitempty"`
	// Router names the served router that chose Route when the winning
	// rule asked one (route: {router: NAME}); empty when the workflow's
	// rules chose it, or a rule's fallback did.
	Router string `json:"router,omitempty"`
}

// WorkPending records work the session owes.
type WorkPending struct {
	WorkID      string `json:"work_id"`
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	Assignee    string `json:"assignee,omitempty"`
}

// WorkDone settles pending work.
type WorkDone struct {
	WorkID  string `json:"work_id"`
	Outcome string `json:"outcome,omitempty"`
}

// ValidationPassed records a successful check.
type ValidationPassed struct {
	Validator string          `json:"validator"`
	Target    string          `json:"target,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// ValidationFailed records a failed check and why.
type ValidationFailed struct {
	Validator string          `json:"validator"`
	Target    string          `json:"target,omitempty"`
	Reason    string          `json:"reason"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// ExperimentRecorded records one experiment: a command run in the session's
// workspace (the experiment tool) whose output reported the configuration it
// ran with and the metrics it measured. The tool runner appends it with the
// call's result, before the call's completion, so rules (a memory route for
// a failed configuration, say) decide on it while the call is pending.
type ExperimentRecorded struct {
	// Name is the experiment's name, as the agent gave it.
	Name string `json:"name"`
	// CallID is the experiment tool call that ran it; Agent its agent.
	CallID string `json:"call_id"`
	Agent  string `json:"agent,omitempty"`
	// Command is the program and arguments run.
	Command []string `json:"command,omitempty"`
	// Config is the configuration the program reported it ran with: a JSON
	// object, absent when the output reported none.
	Config json.RawMessage `json:"config,omitempty"`
	// Metrics are the numbers the program reported, by name.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// ExitCode is the command's; Commit the workspace commit it ran on.
	ExitCode int    `json:"exit_code"`
	Commit   string `json:"commit,omitempty"`
	// Problem says why the output held no usable report, when it did not.
	Problem string `json:"problem,omitempty"`
}

// ApprovalRequested asks a human (or policy) to approve an action. A
// workflow's gate asks for one per gated tool call (CallID, Tool and Gate
// set), in the atomic append that records the call; a rule's approval route
// asks for one about the session (CallID absent).
type ApprovalRequested struct {
	ApprovalID string `json:"approval_id"`
	Action     string `json:"action"`
	// Approver is the role asked to decide ("maintainers").
	Approver string `json:"approver,omitempty"`
	// CallID is the tool call the approval gates; Tool its tool; Gate the
	// workflow gate that asked.
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Gate   string `json:"gate,omitempty"`
	// Deadline, if set, is when the approval expires undecided (RFC 3339,
	// UTC, whole seconds: DeadlineText): a durable
	// timer then records its rath.approval.expired, and OnTimeout says what
	// follows (ADR 0026).
	Deadline string `json:"deadline,omitempty"`
	// OnTimeout is what an expiry does: TimeoutReject (the default: the
	// gated call fails), TimeoutClose (the session is closed) or
	// TimeoutEscalate (EscalateTo is asked, until EscalateDeadline).
	OnTimeout        string `json:"on_timeout,omitempty"`
	EscalateTo       string `json:"escalate_to,omitempty"`
	EscalateDeadline string `json:"escalate_deadline,omitempty"`
}

// DeadlineText is how events write a deadline: RFC 3339 in UTC, rounded up
// to the whole second, which is the resolution of JetStream's schedules (a
// deadline is never reached early).
func DeadlineText(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// ParseDeadline reads a deadline written by DeadlineText (any RFC 3339).
func ParseDeadline(s string) (time.Time, error) { return time.Parse(time.RFC3339, s) }

// What an approval's expiry does (ApprovalRequested.OnTimeout).
const (
	TimeoutReject   = "reject"
	TimeoutClose    = "close"
	TimeoutEscalate = "escalate"
)

// ApprovalExpired records that an approval's deadline passed undecided. Only
// Rath's durable timers record one (the ledger refuses it from anyone but a
// service, before the deadline, or for an approval that is not pending with
// that deadline), with an ID derived from the approval and the deadline, so
// a timer delivered twice records once. OnTimeout is what the expiry does:
// reject and close settle the approval as expired (a gated call fails;
// close also ends the session); escalate leaves it pending, asking
// EscalatedTo until NextDeadline, after which it expires again and rejects.
type ApprovalExpired struct {
	ApprovalID string `json:"approval_id"`
	Deadline   string `json:"deadline"`
	OnTimeout  string `json:"on_timeout"`
	// Approver is the role that was asked and did not decide.
	Approver     string `json:"approver,omitempty"`
	EscalatedTo  string `json:"escalated_to,omitempty"`
	NextDeadline string `json:"next_deadline,omitempty"`
}

// ApprovalGranted approves a requested action. Who approved is the event's
// authenticated actor (rathactor), which the ledger stamps; By is free text
// for display and counts for nothing. The ledger refuses a grant of an
// approval the session has not requested, or has settled already.
type ApprovalGranted struct {
	ApprovalID string `json:"approval_id"`
	By         string `json:"by,omitempty"`
	Comment    string `json:"comment,omitempty"`
}

// ApprovalRejected refuses a requested action, with the reason a gated
// call fails with. As for ApprovalGranted, the rejecter is the event's
// actor, By is free text, and only a pending approval can be rejected.
type ApprovalRejected struct {
	ApprovalID string `json:"approval_id"`
	By         string `json:"by,omitempty"`
	Reason     string `json:"reason"`
}

// TurnRequested asks an agent to take one turn on the session. At most one
// turn of a session is in flight: the selector requests the next only after
// the last completed or failed.
type TurnRequested struct {
	TurnID string `json:"turn_id"`
	Agent  string `json:"agent"`
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// TurnCompleted ends an agent turn: the model answered and the answer (text
// and tool call requests) is in the log before this event.
type TurnCompleted struct {
	TurnID     string `json:"turn_id"`
	Agent      string `json:"agent"`
	StopReason string `json:"stop_reason,omitempty"`
	ToolCalls  int    `json:"tool_calls"`
}

// TurnFailed ends an agent turn that could not complete, with the provider's
// (or the worker's) error.
type TurnFailed struct {
	TurnID   string `json:"turn_id"`
	Agent    string `json:"agent"`
	Error    string `json:"error"`
	Attempts int    `json:"attempts,omitempty"`
}

// ModelCallFailed records one failed attempt to call a model (a rate limit,
// a server error), so every attempt is visible in the log.
type ModelCallFailed struct {
	TurnID    string `json:"turn_id,omitempty"`
	Agent     string `json:"agent"`
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	Attempt   int    `json:"attempt"`
	Status    int    `json:"status,omitempty"`
	Error     string `json:"error"`
	RetryInMS int64  `json:"retry_in_ms,omitempty"`
	// RequestRef is the blob of the request body the call sent, when it
	// is recorded (the model gateway, ADR 0039): what was asked, though
	// nothing answered.
	RequestRef string `json:"request_ref,omitempty"`
}

// HandlerFailed records that a service gave up on an event after a bounded
// number of attempts and sent it to the dead-letter subject.
type HandlerFailed struct {
	Handler    string `json:"handler"`
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	Attempts   int    `json:"attempts"`
	Error      string `json:"error"`
	DeadLetter string `json:"dead_letter,omitempty"`
}
