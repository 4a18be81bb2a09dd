// Package dossier exports the evidence of a session tree (a root session, every
// fork reachable from it and every session merged into one of them) as a
// self-contained directory that answers an auditor's questions offline: a
// machine-readable dossier.json with its JSON Schema, a dossier.md for people,
// a picture of the session graph, and each branch's own stored events, from
// which `Verify` recomputes every hash chain without NATS.
//
// Everything in dossier.json but the environment and the export time is
// derived from the events alone (Assemble), so Verify also re-derives it and
// names the first field that the events do not back.
package dossier

import (
	"encoding/json"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Format is the value of Dossier.Format this package writes and reads.
const Format = "rath-dossier/v1"

// File and directory names inside a dossier directory.
const (
	FileJSON     = "dossier.json"
	FileSchema   = "dossier.schema.json"
	FileMarkdown = "dossier.md"
	FileSVG      = "graph.svg"
	FileHTML     = "graph.html"
	DirEvents    = "events"
	DirBlobs     = "blobs"
)

// Verdicts of a branch (Branch.Verdict).
const (
	// VerdictAccepted marks the branch that produced the final answer (see Final).
	VerdictAccepted = "accepted"
	// VerdictRejected marks a branch whose last own validation failed.
	VerdictRejected = "rejected"
	// VerdictSuperseded marks a branch closed with outcome "superseded" (the
	// selector closes a session so when it forks it to continue elsewhere).
	VerdictSuperseded = "superseded"
	// VerdictClosed marks any other closed branch.
	VerdictClosed = "closed"
	// VerdictOpen marks a branch that is not closed.
	VerdictOpen = "open"
)

// Dossier is the evidence of a session tree. Lists hold items in branch order
// (Branches) and then sequence order; every item names the branch that stored
// its event and the event's sequence number in that branch's logical log.
type Dossier struct {
	Schema string `json:"$schema"`
	Format string `json:"format"`
	// Session is the session the dossier was asked for; Root its root.
	Session    string    `json:"session"`
	Root       string    `json:"root"`
	ExportedAt time.Time `json:"exported_at"`
	Task       string    `json:"task,omitempty"`
	Workflow   *Workflow `json:"workflow,omitempty"`
	// Environment is where the dossier was exported (not derived from the
	// events; where tools ran is in Sandboxes).
	Environment Environment `json:"environment"`
	// Final is the branch that produced the final answer (nil: none did).
	Final       *Final       `json:"final"`
	Branches    []Branch     `json:"branches"`
	Turns       []Turn       `json:"turns"`
	ToolCalls   []ToolCall   `json:"tool_calls"`
	Sandboxes   []Placement  `json:"sandboxes"`
	Memory      []Memory     `json:"memory"`
	Validations []Validation `json:"validations"`
	Decisions   []Decision   `json:"decisions"`
	// Acts are the lifecycle changes, approvals and memory writes of every
	// branch with the authenticated actor the ledger stamped on each.
	Acts []Act `json:"acts"`
	// Interventions are the people in the loop: approvals granted and
	// rejected, and corrections, with what each was about and what followed.
	Interventions []Intervention `json:"interventions,omitempty"`
	// Work is the pending work of every branch (rath.work.pending) and how
	// it was settled.
	Work []WorkItem `json:"work,omitempty"`
	// Experiments are every branch's experiments (rath.experiment.recorded).
	Experiments []Experiment `json:"experiments,omitempty"`
	Usage       UsageReport  `json:"usage"`
	// Blobs are the full results and diffs that events reference by
	// content hash (result_ref, diff_ref), as far as the export could read
	// them: files under blobs/, checked against their hash by Verify.
	Blobs []Blob `json:"blobs,omitempty"`
	// Keys are the ledger's public keys as the ledger named them at export:
	// every event carries a signature by one of them. An auditor who pinned
	// the ledger's key file checks with it instead (rath verify --key).
	Keys []Key `json:"keys,omitempty"`

	// tree holds each branch's own stored events (set by Build and Load),
	// and turns each branch's turns as LogTurns lists them, recorded by
	// the fold.
	tree  *tree
	turns map[string][]StepTurn
}

// Workflow names the workflow the root session ran.
type Workflow struct {
	Name string `json:"name,omitempty"`
	Hash string `json:"hash,omitempty"`
	Ref  string `json:"ref,omitempty"`
}

// Environment describes the exporting process and the NATS server it read.
type Environment struct {
	RathVersion       string `json:"rath_version,omitempty"`
	RathCommit        string `json:"rath_commit,omitempty"`
	GoVersion         string `json:"go_version"`
	OS                string `json:"os"`
	Arch              string `json:"arch"`
	NATSServerVersion string `json:"nats_server_version,omitempty"`
}

// At places an item: the branch whose log stores its event, the event's
// sequence number, ID and time.
type At struct {
	Branch  string    `json:"branch"`
	Seq     uint64    `json:"seq"`
	EventID string    `json:"event_id"`
	Time    time.Time `json:"time"`
}

// Head is the last event of a branch's log.
type Head struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// Branch is one session of the tree and its lineage.
type Branch struct {
	ID string `json:"id"`
	// Name is the branch's short name for people (BranchNames): "root",
	// "fork-1@22"…
	Name        string            `json:"name,omitempty"`
	Tenant      string            `json:"tenant,omitempty"`
	Parent      string            `json:"parent,omitempty"`
	ForkSeq     uint64            `json:"fork_seq,omitempty"`
	ForkHash    string            `json:"fork_hash,omitempty"`
	ForkReason  string            `json:"fork_reason,omitempty"`
	Children    []string          `json:"children,omitempty"`
	Task        string            `json:"task,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Created     time.Time         `json:"created"`
	Updated     time.Time         `json:"updated"`
	Status      string            `json:"status"`
	Outcome     string            `json:"outcome,omitempty"`
	CloseReason string            `json:"close_reason,omitempty"`
	ClosedSeq   uint64            `json:"closed_seq,omitempty"`
	// Verdict is one of the Verdict constants; VerdictReason says why.
	Verdict       string `json:"verdict"`
	VerdictReason string `json:"verdict_reason,omitempty"`
	// OnAcceptedPath: the final branch's logical log holds events of this one.
	OnAcceptedPath bool `json:"on_accepted_path"`
	// FirstSeq is the branch's first own sequence (1, or fork_seq + 1);
	// Head its last. Events is the number of own events, stored in
	// EventsFile (relative to the dossier directory), one a line.
	FirstSeq   uint64        `json:"first_seq"`
	Head       Head          `json:"head"`
	Events     int           `json:"events"`
	EventsFile string        `json:"events_file"`
	Merges     []MergeIn     `json:"merges,omitempty"`
	MergedInto []MergeOut    `json:"merged_into,omitempty"`
	Usage      session.Usage `json:"usage"`
	Counts     Counts        `json:"counts"`
	// Actors counts the branch's own events by who proposed them, as the
	// ledger authenticated it (tenant/user), most events first.
	Actors []ActorCount `json:"actors,omitempty"`
}

// MergeIn is a merge into a branch (its rath.session.merged event).
type MergeIn struct {
	At
	Source     string           `json:"source"`
	SourceHead events.Position  `json:"source_head"`
	Ancestor   *events.Position `json:"ancestor,omitempty"`
	Segments   []events.Segment `json:"segments"`
	Reason     string           `json:"reason,omitempty"`
	// Events is how many events the segments name.
	Events int `json:"events"`
}

// MergeOut names a merge that took a branch's events into Target.
type MergeOut struct {
	Target string `json:"target"`
	Seq    uint64 `json:"seq"`
}

// Counts are per-branch totals of its own events.
type Counts struct {
	Events            int `json:"events"`
	Turns             int `json:"turns"`
	ModelCalls        int `json:"model_calls"`
	ToolCalls         int `json:"tool_calls"`
	Memory            int `json:"memory"`
	Decisions         int `json:"decisions"`
	ValidationsPassed int `json:"validations_passed"`
	ValidationsFailed int `json:"validations_failed"`
}

// Final is the branch that produced the final answer: a branch closed with a
// successful outcome (SuccessOutcomes) whose last validation before the close
// passed. If several qualify, the latest close wins. Only when no branch
// qualifies so is a successful close without any validation accepted, with
// Validated false. A branch whose last validation failed never qualifies.
type Final struct {
	Branch    string `json:"branch"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	Close     At     `json:"close"`
	Validated bool   `json:"validated"`
	// Validation is the validation that justified the close (nil when none).
	Validation *Validation `json:"validation,omitempty"`
	// Others are the other branches that qualified, latest first.
	Others []string `json:"others,omitempty"`
}

// Turn is one agent turn: requested by the selector, ended by the agent
// worker. Number counts the turns of the branch's logical log from 1.
type Turn struct {
	At
	Number     int    `json:"number"`
	TurnID     string `json:"turn_id"`
	Agent      string `json:"agent"`
	Rule       string `json:"rule,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Status     string `json:"status"`
	EndSeq     uint64 `json:"end_seq,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	ToolCalls  int    `json:"tool_calls,omitempty"`
	Error      string `json:"error,omitempty"`
	// Answer is the agent's text in the turn (its assistant chunks).
	Answer string `json:"answer,omitempty"`
	// RequestedIn is set when the turn was requested before a fork: the
	// branch and sequence of the request.
	RequestedIn *Ref `json:"requested_in,omitempty"`
}

// Turn statuses.
const (
	TurnInFlight  = "in_flight"
	TurnCompleted = "completed"
	TurnFailed    = "failed"
)

// Ref names one event.
type Ref struct {
	Branch string `json:"branch"`
	Seq    uint64 `json:"seq"`
}

// ToolCall is one tool call with its evidence. It belongs to the branch
// whose events it summarises; a call requested before a fork and ended after
// it also appears in the fork, with RequestedIn naming the request.
type ToolCall struct {
	At
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Agent     string          `json:"agent,omitempty"`
	TurnID    string          `json:"turn_id,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Status    string          `json:"status"`
	// Seqs are the sequences of the call's events in this branch.
	Seqs         []uint64        `json:"seqs"`
	Attempt      int             `json:"attempt,omitempty"`
	ExitCode     int             `json:"exit_code"`
	DurationMS   int64           `json:"duration_ms,omitempty"`
	Result       string          `json:"result,omitempty"`
	ResultRef    string          `json:"result_ref,omitempty"`
	Diff         string          `json:"diff,omitempty"`
	DiffRef      string          `json:"diff_ref,omitempty"`
	Files        []string        `json:"files,omitempty"`
	CommitBefore string          `json:"commit_before,omitempty"`
	CommitAfter  string          `json:"commit_after,omitempty"`
	Error        string          `json:"error,omitempty"`
	Sandbox      *events.Sandbox `json:"sandbox,omitempty"`
	// Placement is the sandbox placement in force in the branch's logical
	// log when the call ended (or was last seen); none for a call its
	// caller ran, which no placement of Rath's ran.
	Placement   *Ref `json:"placement,omitempty"`
	RequestedIn *Ref `json:"requested_in,omitempty"`
	// Runner is events.RunnerCaller for a call the program that recorded
	// it ran, outside Rath's sandboxes (its Sandbox, if any, is that
	// program's claim); "" for a call a Rath runner ran.
	Runner string `json:"runner,omitempty"`
}

// Tool call statuses.
const (
	ToolRequested = "requested"
	ToolRunning   = "running"
	ToolCompleted = "completed"
	ToolFailed    = "failed"
)

// Placement is a rath.sandbox.placed event: where a branch's tools run.
type Placement struct {
	At
	Backend   string `json:"backend"`
	SandboxID string `json:"sandbox_id"`
	Host      string `json:"host,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	Commit    string `json:"commit,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Isolation is what the placement isolated, as recorded
	// (events.SandboxPlaced.IsolationOf: "none (development)" for local).
	Isolation string `json:"isolation,omitempty"`
	// Development is true for a development backend (local): the branch's
	// commands ran as the tool runner's user on its host, not isolated.
	Development bool `json:"development,omitempty"`
	// From is the placement a move left (rath to).
	From *events.Sandbox `json:"from,omitempty"`
}

// Memory is one memory event of a branch: a recall (Query, Items), a write
// (ItemID, Version, Content, Provenance) or a retraction (ItemID, By, Reason).
type Memory struct {
	At
	Kind   string `json:"kind"`
	Agent  string `json:"agent,omitempty"`
	TurnID string `json:"turn_id,omitempty"`
	// Turn is the number of the turn TurnID names in the branch's logical
	// log, or of the turn in flight at Seq (0: none).
	Turn         int                    `json:"turn,omitempty"`
	Query        string                 `json:"query,omitempty"`
	Scopes       []string               `json:"scopes,omitempty"`
	Tags         []string               `json:"tags,omitempty"`
	Items        []events.MemoryItemRef `json:"items,omitempty"`
	ItemID       string                 `json:"item_id,omitempty"`
	Version      int                    `json:"version,omitempty"`
	Content      string                 `json:"content,omitempty"`
	Scope        string                 `json:"scope,omitempty"`
	Provenance   *events.Provenance     `json:"provenance,omitempty"`
	RestoredFrom int                    `json:"restored_from,omitempty"`
	By           string                 `json:"by,omitempty"`
	Reason       string                 `json:"reason,omitempty"`
}

// Memory kinds.
const (
	MemoryRecalled  = "recalled"
	MemoryWritten   = "written"
	MemoryRetracted = "retracted"
)

// Validation is one validation result, where it was recorded and its
// details.
type Validation struct {
	At
	session.Check
	Details json.RawMessage `json:"details,omitempty"`
}

// Decision is one routing decision of the selector.
type Decision struct {
	At
	Rule       string          `json:"rule"`
	Route      string          `json:"route"`
	Reason     string          `json:"reason,omitempty"`
	Inputs     json.RawMessage `json:"inputs,omitempty"`
	Candidates []string        `json:"candidates,omitempty"`
	Agent      string          `json:"agent,omitempty"`
	TurnID     string          `json:"turn_id,omitempty"`
	// Router names the served router that chose the route (a rule's
	// route {router: NAME}); empty when the workflow's rules chose it.
	Router string `json:"router,omitempty"`
	// Cause is the event the decision answered (its causation ID), when the
	// branch's logical log holds it.
	Cause *Cause `json:"cause,omitempty"`
}

// Cause names the event a decision answered.
type Cause struct {
	EventID string `json:"event_id"`
	Seq     uint64 `json:"seq,omitempty"`
	Type    string `json:"type,omitempty"`
}

// UsageReport is the tree's token usage. Each model call counts once, in the
// branch that stored it: a fork's inherited prefix belongs to its parent,
// and events a merge takes in belong to their source.
type UsageReport struct {
	Total    session.Usage            `json:"total"`
	ByBranch map[string]session.Usage `json:"by_branch"`
	// AcceptedPath is the usage of the final branch's logical log (nil when
	// no branch produced a final answer).
	AcceptedPath *PathUsage `json:"accepted_path"`
}

// PathUsage is the usage of one branch's logical log: its ancestry prefix and
// its own events, each once, by segment; MergedIn is the usage of events
// merges took into it (not part of the logical log, reported apart).
type PathUsage struct {
	Branch   string         `json:"branch"`
	Usage    session.Usage  `json:"usage"`
	Segments []SegmentUsage `json:"segments"`
	MergedIn session.Usage  `json:"merged_in"`
}

// SegmentUsage is the usage of one run of a session's own events.
type SegmentUsage struct {
	events.Segment
	Usage session.Usage `json:"usage"`
}

// Blob is a content-addressed result or diff stored beside the dossier.
type Blob struct {
	Ref   string `json:"ref"`
	File  string `json:"file"`
	Bytes int    `json:"bytes"`
}

// Key is a ledger public key: its ID and the raw ed25519 key in unpadded
// base64url (see events.SigningKey).
type Key struct {
	ID        string `json:"id"`
	PublicKey string `json:"public_key"`
}

// ActorCount is how many of a branch's own events an actor proposed.
type ActorCount struct {
	Actor  string `json:"actor"`
	Events int    `json:"events"`
}

// Act is an event a person or service is answerable for: a lifecycle
// change, an approval asked or decided, a memory write or retraction.
// Actor is who proposed it, as the ledger stamped it (empty on events
// stored before actors were stamped); OnBehalf, on an event a service
// recorded for someone (a memory write asked of the memory service), is who
// asked it, as the service relayed it; By is the name the event itself
// claims (an approval's by), which nothing authenticates.
type Act struct {
	At
	Actor    string `json:"actor,omitempty"`
	OnBehalf string `json:"on_behalf,omitempty"`
	What     string `json:"what"`
	Detail   string `json:"detail,omitempty"`
	By       string `json:"by,omitempty"`
}
