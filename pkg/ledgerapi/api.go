// Package ledgerapi is the session ledger's request/reply contract: the bodies
// of every rath.ledger.* request and reply, and the error codes. The ledger
// serves it; the Go client and the CLI speak it; docs/protocol.md describes
// it for other languages.
package ledgerapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// HeaderError is set on every error reply to the error's code, so a client
// can tell an error from a result without parsing the body.
const HeaderError = "Rath-Error"

// HeaderReceipts, set to ReceiptsByRecord on a batch request, asks for the
// compact form of its receipts: an ack whose event was signed in a
// signature record carries the event's short reference as its sig, and the
// reply's records carry each such record once (BatchReply.Records). Without
// it every ack carries the inline signature (events.Expand's form).
const HeaderReceipts = "Rath-Receipts"

// ReceiptsByRecord is HeaderReceipts' value for the compact form.
const ReceiptsByRecord = "record"

// Code names why the ledger refused a proposal or a request.
type Code string

// Error codes.
const (
	CodeMalformed       Code = "malformed"         // not a conformant CloudEvent, or a bad request body
	CodeUnknownType     Code = "unknown_type"      // type not in the catalog
	CodeSchema          Code = "schema"            // data fails the kind's JSON Schema
	CodeInvalidSession  Code = "invalid_session"   // session ID unusable
	CodeNotFound        Code = "session_not_found" // no such session
	CodeBlobNotFound    Code = "blob_not_found"    // no blob with that reference
	CodeExists          Code = "session_exists"    // started twice, or fork onto an existing ID
	CodeClosed          Code = "session_closed"    // session is closed
	CodeStale           Code = "stale_sequence"    // expected sequence is not the head
	CodeTransition      Code = "bad_transition"    // lifecycle event not allowed now
	CodeUseOperation    Code = "use_operation"     // forked/merged events come from the fork/merge operations
	CodeOutOfRange      Code = "out_of_range"      // a sequence beyond the head
	CodeNothingToMerge  Code = "nothing_to_merge"  // source has nothing the target lacks
	CodeTooLarge        Code = "too_large"         // the stored event would exceed the size limit
	CodeDuplicateID     Code = "duplicate_id"      // the event ID is stored already, in another session
	CodeApprovalUnknown Code = "unknown_approval"  // a grant or rejection of an approval the session never requested
	CodeApprovalSettled Code = "approval_settled"  // a grant or rejection of an approval already granted or rejected
	CodeApprovalExpired Code = "approval_expired"  // a grant or rejection of an approval whose deadline has passed
	CodeNotApprover     Code = "not_approver"      // a grant or rejection by a principal that does not hold the approver role asked
	CodeConflict        Code = "conflict"          // concurrent appenders kept winning; retry
	CodeDamaged         Code = "damaged"           // a stored event is not the ledger's (forged, altered or lost): nothing more is appended
	CodeQuotaExceeded   Code = "quota_exceeded"    // the asker's tenant is at one of its quotas (the message names it, its limit and the flag that raises it)
	CodeUnavailable     Code = "unavailable"       // JetStream or the ledger failed; retry
)

// Error is a refusal with a code and a message naming the problem. Match a
// code with errors.Is and the Err sentinel of that code:
//
//	if errors.Is(err, ledgerapi.ErrStale) { /* read the head again and retry */ }
//
// and read the message with errors.As.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrNotFound) holds for every session_not_found refusal
// whatever its message (nats.go's APIError.Is matches the same way).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && e.Code == t.Code
}

// Sentinels, one per code: errors.Is(err, ErrX) reports whether err (from
// the Go client, the ledger or the memory service, wrapped or not) is a
// refusal with code X. They are for matching only; the errors returned
// carry the message that names the problem.
var (
	ErrMalformed       = &Error{Code: CodeMalformed, Message: "malformed event or request"}
	ErrUnknownType     = &Error{Code: CodeUnknownType, Message: "event type not in the catalog"}
	ErrSchema          = &Error{Code: CodeSchema, Message: "event data fails its schema"}
	ErrInvalidSession  = &Error{Code: CodeInvalidSession, Message: "unusable session ID"}
	ErrNotFound        = &Error{Code: CodeNotFound, Message: "no such session"}
	ErrBlobNotFound    = &Error{Code: CodeBlobNotFound, Message: "no such blob"}
	ErrExists          = &Error{Code: CodeExists, Message: "session exists"}
	ErrClosed          = &Error{Code: CodeClosed, Message: "session is closed"}
	ErrStale           = &Error{Code: CodeStale, Message: "expected sequence is not the head"}
	ErrTransition      = &Error{Code: CodeTransition, Message: "lifecycle event not allowed now"}
	ErrUseOperation    = &Error{Code: CodeUseOperation, Message: "use the fork or merge operation"}
	ErrOutOfRange      = &Error{Code: CodeOutOfRange, Message: "sequence beyond the head"}
	ErrNothingToMerge  = &Error{Code: CodeNothingToMerge, Message: "nothing to merge"}
	ErrTooLarge        = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrDuplicateID     = &Error{Code: CodeDuplicateID, Message: "event ID stored in another session"}
	ErrApprovalUnknown = &Error{Code: CodeApprovalUnknown, Message: "no such approval requested in the session"}
	ErrApprovalSettled = &Error{Code: CodeApprovalSettled, Message: "approval already decided"}
	ErrApprovalExpired = &Error{Code: CodeApprovalExpired, Message: "approval expired"}
	ErrNotApprover     = &Error{Code: CodeNotApprover, Message: "not an approver of the role asked"}
	ErrConflict        = &Error{Code: CodeConflict, Message: "concurrent appenders kept winning"}
	ErrDamaged         = &Error{Code: CodeDamaged, Message: "session's stored events are damaged"}
	// ErrQuotaExceeded: the ledger refused a request because the asker's
	// tenant is at a quota (durable feeds, sessions started per minute,
	// blob bytes, pulls in flight). Asking again succeeds only once the
	// tenant is below it again (a minute later, for starts) or an operator
	// raised it.
	ErrQuotaExceeded = &Error{Code: CodeQuotaExceeded, Message: "tenant at a quota"}
	// ErrUnavailable also matches the Go client's failures to reach the
	// ledger at all (no responders, timeouts), which CodeOf reports as
	// CodeUnavailable too.
	ErrUnavailable = &Error{Code: CodeUnavailable, Message: "ledger unavailable"}
)

// Errorf builds an Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of an *Error in err's chain, or CodeUnavailable:
// for mapping a refusal to another transport's codes (an exit status, an
// HTTP status) in one switch. To branch on one outcome, errors.Is with the
// code's sentinel reads better.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnavailable
}

// Permanent reports whether retrying the same request can never succeed.
func Permanent(err error) bool {
	switch CodeOf(err) {
	case CodeUnavailable, CodeConflict:
		return false
	}
	return true
}

// ErrorReply is the body of an error reply.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// Ack is the reply to an accepted proposal, fork or merge.
type Ack struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Hash    string `json:"hash"`
	// Sig is the ledger's signature of Session, Seq and Hash (the event's
	// rathsig): with it the ack is a receipt that proves, to anyone holding
	// the ledger's public key, that the ledger accepted the event there.
	Sig       string `json:"sig,omitempty"`
	StreamSeq uint64 `json:"stream_seq"`
	// Duplicate is true when the event ID was stored before: the ack is the
	// original's and nothing new was stored.
	Duplicate bool `json:"duplicate,omitempty"`
	// Record is the signature record Sig refers to when Sig is a record
	// reference (a compact batch receipt, HeaderReceipts): with it the ack
	// is still a receipt on its own. The ledger never sets it; the Go client
	// does, from the batch reply's records. Inline turns such an ack into
	// the inline form.
	Record json.RawMessage `json:"record,omitempty"`
}

// Inline returns the ack with its signature in the inline form that
// events.Keyring.Verify checks: a record reference expanded with Record
// (events.Expand), Record dropped. An ack already inline is returned as it
// is.
func (a Ack) Inline() (Ack, error) {
	ref, isRef, err := events.ParseRecordRef(a.Sig)
	if err != nil || !isRef {
		return a, err
	}
	if len(a.Record) == 0 {
		return a, fmt.Errorf("receipt %s:%d: its signature refers to record %s, which the receipt does not carry: %w", a.Session, a.Seq, ref.Record, events.ErrDetached)
	}
	sig, err := events.Expand(ref, a.Record)
	if err != nil {
		return a, fmt.Errorf("receipt %s:%d: %w", a.Session, a.Seq, err)
	}
	a.Sig, a.Record = sig, nil
	return a, nil
}

// ContentTypeBatch is the Content-Type of a batch of proposals: a JSON array
// of structured-mode CloudEvents (the CloudEvents JSON batch format).
const ContentTypeBatch = "application/cloudevents-batch+json"

// MaxBatch is the most proposals one batch request may carry.
const MaxBatch = 1000

// BatchReply answers a batch request: one result per proposal, in the
// batch's order. Records, in the compact form (HeaderReceipts), holds each
// signature record an ack's sig refers to, by record ID.
type BatchReply struct {
	Results []BatchResult              `json:"results"`
	Records map[string]json.RawMessage `json:"records,omitempty"`
}

// BatchResult is one proposal's outcome: exactly one of Ack and Error is set.
type BatchResult struct {
	Ack   *Ack   `json:"ack,omitempty"`
	Error *Error `json:"error,omitempty"`
}

// StateRequest asks for the overview of Session at sequence At (0: the
// head). The reply is a session.Overview: bounded whatever the session
// holds (session.MaxOverviewBytes), with the last Tail entries of each long
// list (0: session.DefaultTail, at most session.MaxTail) and each chunk's
// content clipped to Clip bytes of JSON (0: session.DefaultClip, at most
// session.MaxClip). ToolCalls names tool calls (at most session.MaxOpen)
// to report in the reply's tools.asked whatever their status.
//
// Whole asks for the whole session.State instead (client.State in Go),
// without Tail, Clip or ToolCalls: the reply is a StatePart, part Part of
// its JSON. A state above one part comes in several: the first asked at
// At (0: the head), each next one at the first reply's Seq.
type StateRequest struct {
	Session   string   `json:"session"`
	At        uint64   `json:"at,omitempty"`
	Tail      int      `json:"tail,omitempty"`
	Clip      int      `json:"clip,omitempty"`
	ToolCalls []string `json:"tool_calls,omitempty"`
	Whole     bool     `json:"whole,omitempty"`
	Part      int      `json:"part,omitempty"`
}

// StatePart is part Part (from 0) of Parts of the JSON of a session's
// whole state at Seq (StateRequest.Whole), each part at most half the
// server's message size once encoded. Sum is the SHA-256 (hex) of the
// whole JSON, the same in every part, for the reader to check the parts it
// joins.
type StatePart struct {
	Seq   uint64 `json:"seq"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	Sum   string `json:"sum"`
	Data  []byte `json:"data"`
}

// LogRequest asks for a page of a session's logical log.
type LogRequest struct {
	Session string `json:"session"`
	From    uint64 `json:"from,omitempty"`
	To      uint64 `json:"to,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// MaxLogPage bounds one log page.
const MaxLogPage = 1000

// LogReply carries stored events, each its structured-mode CloudEvent JSON.
// A page is also bounded in bytes (to fit a NATS message); More says the
// range holds more events after the last one: ask again from its seq + 1.
type LogReply struct {
	Events []json.RawMessage `json:"events"`
	More   bool              `json:"more,omitempty"`
}

// ListRequest selects sessions.
type ListRequest struct {
	Status string            `json:"status,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Match keeps the sessions whose ID, workflow, parent, task or a label
	// (key=value) contains it, ignoring case.
	Match string `json:"match,omitempty"`
	// Order is "created" (oldest first, the default) or "active" (the
	// most recently changed first: appended to, started, closed).
	Order string `json:"order,omitempty"`
	// Limit bounds the page (0: every session, in one reply, which fails
	// with too_large past some tens of thousands); After is the previous
	// reply's Next, to read the page after it.
	Limit int    `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

// Session is a session's index entry.
type Session struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	Status string `json:"status"`
	// Outcome is a closed session's outcome (succeeded, failed,
	// superseded…), as its close recorded it; the index holds it from the
	// close on.
	Outcome  string `json:"outcome,omitempty"`
	Parent   string `json:"parent,omitempty"`
	ForkSeq  uint64 `json:"fork_seq,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	// Task is the session's task, its first 200 characters.
	Task    string            `json:"task,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	Seq     uint64            `json:"seq"`
	// Purged is set once an archived session's events left the hot stream.
	Purged bool `json:"purged,omitempty"`
	// Active is when the session last changed (an append the ledger
	// recorded, a lifecycle event), in a listing; the index does not store
	// it.
	Active time.Time `json:"active,omitzero"`
	// Forks is how many sessions were forked from this one, in a listing;
	// the index does not store it.
	Forks int `json:"forks,omitempty"`
}

// ListReply lists sessions, oldest first.
type ListReply struct {
	Sessions []Session `json:"sessions"`
	// Next is the cursor of the next page (ListRequest.After); empty on the
	// last. Total is how many sessions the request selects in all.
	Next  string `json:"next,omitempty"`
	Total int    `json:"total"`
}

// RejectionsRequest pages the recorded rejections of the asker's tenant
// (every tenant's, for a service), of one session or all, from the record
// after After (a stream sequence; 0: the first).
type RejectionsRequest struct {
	Session string `json:"session,omitempty"`
	After   uint64 `json:"after,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// RejectionsReply is one page of rejection records (eventstore.Rejection
// bodies), oldest first; More says there are more after Next.
type RejectionsReply struct {
	Rejections []json.RawMessage `json:"rejections"`
	Next       uint64            `json:"next,omitempty"`
	More       bool              `json:"more,omitempty"`
}

// BlobRequest reads part of a blob: its bytes from Offset, at most one
// ledger page (BlobPage).
type BlobRequest struct {
	Ref    string `json:"ref"`
	Offset int64  `json:"offset,omitempty"`
}

// BlobPage bounds the bytes of a blob one reply carries.
const BlobPage = 1 << 20

// BlobReply is part of a blob: Data holds its bytes from Offset; Size is
// the whole blob's.
type BlobReply struct {
	Ref    string `json:"ref"`
	Size   int64  `json:"size"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
}

// BlobRef names a stored blob by content (sha256:<hex>).
type BlobRef struct {
	Ref string `json:"ref"`
}

// SessionRequest names one session (lineage, verify).
type SessionRequest struct {
	Session string `json:"session"`
}

// Tools answers OpTools: the registered tools, by name.
type Tools struct {
	Tools []Tool `json:"tools"`
}

// Tool is a registered tool: its name and description, and who serves
// its calls ("tool-runner" for built-in and MCP tools, else a custom tool
// server's name).
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Server      string `json:"server,omitempty"`
}

// Keys lists the public keys the ledger signs with and trusts (earlier
// rotations, other ledgers); Current is the one it signs new events with.
type Keys struct {
	Current string `json:"current"`
	Keys    []Key  `json:"keys"`
}

// Key is an ed25519 public key: its ID (the first 16 hex digits of the
// SHA-256 of the raw key), the raw key in unpadded base64url, and PKIX PEM.
type Key struct {
	ID        string `json:"id"`
	PublicKey string `json:"public_key"`
	PEM       string `json:"pem"`
}

// SchemaRequest asks for the JSON Schema of an event type's data; an empty
// type asks for the list of types (a SchemaList).
type SchemaRequest struct {
	Type string `json:"type,omitempty"`
}

// SchemaList lists every event type the ledger accepts.
type SchemaList struct {
	Types []string `json:"types"`
}

// ForkRequest asks for a new session branching from Parent after sequence At.
// Its Go field names match MergeRequest's: EventSource, not Source, is the
// CloudEvents source (on the wire the field is still "source").
type ForkRequest struct {
	Parent string `json:"parent"`
	// At is the last parent sequence the fork shares; 0 means the parent's head.
	At uint64 `json:"at,omitempty"`
	// ID is the fork's session ID; empty lets the ledger choose.
	ID     string            `json:"id,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// EventID makes a retried fork idempotent; empty lets the ledger choose.
	EventID string `json:"event_id,omitempty"`
	// EventSource is the CloudEvents source of the fork event.
	EventSource string `json:"source,omitempty"`
	// Workflow, WorkflowHash and WorkflowRef, when WorkflowRef is set, are
	// the workflow the fork runs from here on instead of the parent's
	// (rath.session.forked workflow_ref): a bundle stored before the fork.
	Workflow     string `json:"workflow,omitempty"`
	WorkflowHash string `json:"workflow_hash,omitempty"`
	WorkflowRef  string `json:"workflow_ref,omitempty"`
}

// MergeRequest asks to join session Source into session Target (Source
// names a session, as in rath.session.merged; EventSource is the merge
// event's CloudEvents source).
type MergeRequest struct {
	Target  string `json:"target"`
	Source  string `json:"source"`
	Reason  string `json:"reason,omitempty"`
	EventID string `json:"event_id,omitempty"`
	// EventSource is the CloudEvents source of the merge event.
	EventSource string `json:"event_source,omitempty"`
}

// ArchiveRequest asks the ledger to archive a closed session now: its own
// events go to a verifiable bundle in the object store and a
// rath.session.archived event records it. Purge also removes the archived
// events from the hot stream (refused while a live fork reads through them).
type ArchiveRequest struct {
	Session string `json:"session"`
	Reason  string `json:"reason,omitempty"`
	Purge   bool   `json:"purge,omitempty"`
}

// ArchiveReply answers an archive: the bundle and the acks of the archived
// (and purged) events; an ack with Duplicate set was stored before.
type ArchiveReply struct {
	Session   string `json:"session"`
	BundleRef string `json:"bundle_ref"`
	Archived  Ack    `json:"archived"`
	Purged    *Ack   `json:"purged,omitempty"`
}

// Report is the outcome of verifying a session's chain.
type Report struct {
	Session  string `json:"session"`
	OK       bool   `json:"ok"`
	Head     uint64 `json:"head"`
	HeadHash string `json:"head_hash,omitempty"`
	// HeadSig is the ledger's signature of the head (its rathsig), which
	// vouches for every event below it; KeyID names the key that made it.
	HeadSig string `json:"head_sig,omitempty"`
	KeyID   string `json:"key_id,omitempty"`
	// Checked is how many events' hashes were recomputed: the whole
	// logical log, the ancestors' events up to each fork point included.
	Checked int `json:"checked"`
	// Signatures is how many signatures were checked: one per segment of
	// the logical log (each fork point's, then the head's: a signature
	// vouches for every event below it), more only to find a bad one.
	Signatures int `json:"signatures"`
	// RecordedHead is the session's head as the ledger last recorded it
	// apart from the log (the rath-heads bucket; 0: none yet). Events after
	// it, up to Head, are the tail no recorded head covers yet: the ledger
	// records heads within a second (its HeadEvery), and a tail cut inside
	// that window shows only in the clients' receipts, not in this report
	// (docs/security.md).
	RecordedHead uint64 `json:"recorded_head,omitempty"`
	Fault        *Fault `json:"fault,omitempty"`
}

// Unrecorded returns the tail of an OK report that no recorded head covers
// yet, from..to; ok is false when the recorded head is the log's head.
func (r Report) Unrecorded() (from, to uint64, ok bool) {
	if !r.OK || r.RecordedHead >= r.Head {
		return 0, 0, false
	}
	return r.RecordedHead + 1, r.Head, true
}

// Fault is the first place a chain does not hold.
type Fault struct {
	Seq       uint64 `json:"seq"`
	Session   string `json:"session"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	Reason    string `json:"reason"`
}

// Graph is the lineage of a session: its ancestors (root first) and the tree
// of every session forked from the root.
type Graph struct {
	Session   string   `json:"session"`
	Ancestors []string `json:"ancestors,omitempty"`
	Root      *Node    `json:"root"`
}

// Node is one session in a lineage graph.
type Node struct {
	Session string `json:"session"`
	Status  string `json:"status,omitempty"`
	// Outcome is a closed session's outcome (succeeded, superseded…).
	Outcome string `json:"outcome,omitempty"`
	ForkSeq uint64 `json:"fork_seq,omitempty"`
	// Created is the time of the session's first own event (its start or
	// its fork): forks are named in this order (dossier.BranchNames).
	Created  time.Time `json:"created,omitzero"`
	Head     uint64    `json:"head"`
	Merges   []Merged  `json:"merges,omitempty"`
	Children []*Node   `json:"children,omitempty"`
}

// Merged is a merge into a node.
type Merged struct {
	Seq       uint64 `json:"seq"`
	Source    string `json:"source"`
	SourceSeq uint64 `json:"source_seq"`
}

// PullRequest asks for the next events of a durable feed: the stored events
// of the asker's tenant (of one session, or of every session when Session
// is empty), read through a JetStream durable consumer that the ledger
// keeps for the tenant under the name Consumer. Every process asking with
// the same tenant, Consumer and Session shares the feed (a consumer group):
// an event goes to one of them at a time, and comes back until it is acked
// (Settle). A feed delivers one event at a time, so a session's events are
// handled in order. The ledger creates the feed on the first pull; it starts
// at the first stored event and is kept until an operator removes it or
// nobody pulls it for FeedIdle.
type PullRequest struct {
	Consumer string `json:"consumer"`
	Session  string `json:"session,omitempty"`
	// Max bounds the events of one reply (default and at most MaxPull;
	// more, or a negative value, is malformed).
	Max int `json:"max,omitempty"`
}

// validFeed keeps a feed's name readable and one token.
var validFeed = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateFeed reports whether name can name a durable feed (PullRequest's
// Consumer): 1-64 characters of A-Z a-z 0-9 _ -.
func ValidateFeed(name string) error {
	if !validFeed.MatchString(name) {
		return fmt.Errorf("feed %q: want 1-64 characters of A-Z a-z 0-9 _ -", name)
	}
	return nil
}

// MaxPull bounds the events of one pull reply. A feed has at most one
// event outstanding, so a reply holds one event or none today.
const MaxPull = 1

// PullAckWait is how long an event pulled and neither acked nor nacked stays
// with its puller before the feed delivers it again.
const PullAckWait = 30 * time.Second

// FeedIdle is how long a feed may go unpulled before the server removes
// it, and its position with it: the next pull starts it again from the
// first event.
const FeedIdle = 7 * 24 * time.Hour

// PullReply carries the pulled events, none when the feed has nothing for
// now (ask again when the session's live subject announces an event).
type PullReply struct {
	Events []Pulled `json:"events"`
}

// Pulled is one event of a feed: the stored event (structured-mode
// CloudEvent JSON, its signature expanded as the log serves it), the token
// to settle it with, and how many times it has been delivered.
type Pulled struct {
	Event     json.RawMessage `json:"event"`
	Token     string          `json:"token"`
	Delivered uint64          `json:"delivered"`
}

// SettleRequest acks a pulled event (done: not delivered again); with
// Nack, gives it back to be delivered again after DelayMS milliseconds (0:
// at once); with Progress, says it is still being worked on, which starts
// its ack wait (PullAckWait) again.
// Consumer and Session name the feed the token came from.
type SettleRequest struct {
	Consumer string `json:"consumer"`
	Session  string `json:"session,omitempty"`
	Token    string `json:"token"`
	Nack     bool   `json:"nack,omitempty"`
	Progress bool   `json:"progress,omitempty"`
	DelayMS  int64  `json:"delay_ms,omitempty"`
}

// Settled is the reply to a settle request.
type Settled struct {
	OK bool `json:"ok"`
}
