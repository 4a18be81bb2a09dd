// Package memoryapi is the memory service's request/reply contract: the
// subjects of rath.memory.*, the bodies of every request and reply, the
// stored record of a memory item's version or retraction, the scope format,
// the evidence kinds and the error codes. The memory service serves it; the
// Go client and the CLI speak it; docs/protocol.md describes it for other
// languages.
package memoryapi

import (
	"encoding/json"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Requests. A principal asks on its own subject,
// rath.memory.<tenant>.<user>.<request> (events.Principal.Memory); every
// memory service process serves them in the queue group Queue.
const (
	Queue = "rath-memory"

	ReqAdd     = "add"
	ReqRecall  = "recall"
	ReqSearch  = "search"
	ReqShow    = "show"
	ReqHistory = "history"
	ReqRetract = "retract"
	ReqRestore = "restore"
	ReqReaders = "readers"
	ReqJustify = "justify"
	ReqPresent = "present"
)

// Requests lists every request of the memory service.
func Requests() []string {
	return []string{ReqAdd, ReqRecall, ReqSearch, ReqShow, ReqHistory, ReqRetract, ReqRestore, ReqReaders, ReqJustify, ReqPresent}
}

// RequestFilter is the memory service's subscription to req from every principal.
func RequestFilter(req string) string { return events.MemoryPrefix + "*.*." + req }

// Storage: one stream, one subject per item. Every version and every
// retraction of an item is one message on its subject; the stream keeps
// every message (no per-subject limit), so no version is ever lost or
// overwritten.
const (
	// Stream holds every memory record.
	Stream = "RATH_MEMORY"
	// itemPrefix starts every item subject.
	itemPrefix = "rath.mem.item."
	// ItemsWildcard matches every item subject.
	ItemsWildcard = itemPrefix + ">"
)

// ItemSubject is the subject of an item's records.
func ItemSubject(itemID string) string { return itemPrefix + itemID }

// Error codes of the memory service, besides the ledger's (a refused
// session event is answered with the ledger's own code: session_not_found,
// session_closed, schema, …). Errors travel as the ledger's: header
// Rath-Error and body {"error":{"code","message"}}.
const (
	CodeMalformed       = api.CodeMalformed      // a body that is not the request's JSON, or a bad field (the message names it)
	CodeInvalidSession  = api.CodeInvalidSession // a session ID missing or unusable
	CodeSessionNotFound = api.CodeNotFound       // the session does not exist
	// CodeInvalidScope: a scope that is not <kind>:<name>.
	CodeInvalidScope api.Code = "invalid_scope"
	// CodeItemNotFound: no such memory item (for a tenant's principal, none
	// of its tenant: another tenant's items do not exist for it).
	CodeItemNotFound api.Code = "item_not_found"
	// CodeItemExists: an add names an item ID another tenant holds; item
	// IDs are unique across tenants, like session IDs.
	CodeItemExists = api.CodeExists
	// CodeVersionNotFound: the item has no such version.
	CodeVersionNotFound api.Code = "version_not_found"
	// CodeUnknownEvent: a provenance event ID is not in the session's log.
	CodeUnknownEvent api.Code = "unknown_event"
	CodeConflict              = api.CodeConflict    // other writers kept winning the item; retry
	CodeUnavailable           = api.CodeUnavailable // JetStream, the ledger or the service failed; retry
)

// Error is a refusal with a code; it is the ledger's error type.
type Error = api.Error

// Sentinels of the memory service's own codes, for errors.Is (the codes it
// shares with the ledger match the ledger's: ledgerapi.ErrNotFound for
// CodeSessionNotFound, ledgerapi.ErrExists for CodeItemExists, …).
var (
	ErrInvalidScope    = &Error{Code: CodeInvalidScope, Message: "scope is not <kind>:<name>"}
	ErrItemNotFound    = &Error{Code: CodeItemNotFound, Message: "no such memory item"}
	ErrVersionNotFound = &Error{Code: CodeVersionNotFound, Message: "no such version"}
	ErrUnknownEvent    = &Error{Code: CodeUnknownEvent, Message: "event not in the session's log"}
)

// Errorf builds an Error.
func Errorf(code api.Code, format string, args ...any) *Error {
	return api.Errorf(code, format, args...)
}

// Evidence kinds: what justified a memory write. The set is closed.
const (
	EvidenceToolResult       = "tool_result"       // a tool call's result showed it
	EvidenceHumanCorrection  = "human_correction"  // a human said so
	EvidenceFailedAttempt    = "failed_attempt"    // an attempt failed and this is the lesson
	EvidenceValidationSignal = "validation_signal" // a validation passed or failed
)

// Evidences lists the evidence kinds.
var Evidences = []string{EvidenceToolResult, EvidenceHumanCorrection, EvidenceFailedAttempt, EvidenceValidationSignal}

// Limits on requests.
const (
	MaxContent  = 64 << 10 // bytes of an item's content
	MaxTags     = 32
	MaxEventIDs = 64
	DefaultK    = 5
	MaxK        = 100
)

// Record is one message of an item's subject: a version (Op "write") or a
// retraction (Op "retract"). Records are never changed or deleted.
type Record struct {
	ItemID string `json:"item_id"`
	// Op is OpWrite or OpRetract.
	Op string `json:"op"`
	// Version is the version written (from 1), or the version retracted
	// (0: every version the item had then).
	Version int `json:"version"`
	// Versions is how many versions the item has after this record.
	Versions int `json:"versions"`

	// Content, Tags and Scope are the version's (writes only).
	Content string   `json:"content,omitempty"`
	Tags    []string `json:"tags,omitempty"`
	Scope   string   `json:"scope,omitempty"`
	// Provenance of a version: the session, the events that justified it
	// and the kind of evidence. EventSeqs are the events' sequences in the
	// session's logical log, resolved when the version was written.
	Provenance *events.Provenance `json:"provenance,omitempty"`
	EventSeqs  []uint64           `json:"event_seqs,omitempty"`
	// RestoredFrom is the earlier version a restore copied.
	RestoredFrom int `json:"restored_from,omitempty"`

	// By and Reason say who retracted (or restored) and why, as the
	// request put it (free text).
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Tenant is the tenant the item belongs to: that of the session its
	// first version was written for. Every record of an item carries it.
	// Empty on records written before tenants: events.DefaultTenant.
	Tenant string `json:"tenant,omitempty"`
	// Actor is the authenticated principal (tenant/user) that asked for
	// the record, read from the request's subject; the memory service
	// itself for the remember tool's writes and for voids.
	Actor string `json:"actor,omitempty"`

	// Session is the session whose log records this write or retraction,
	// and EventID that event (rath.memory.written or rath.memory.retracted).
	Session string `json:"session"`
	EventID string `json:"event_id"`
	// RequestID is the request that made the record (deduplication).
	RequestID string    `json:"request_id"`
	Time      time.Time `json:"time"`
	// Seq is the record's stream sequence (set when read, not stored).
	Seq uint64 `json:"seq,omitempty"`
}

// Record operations.
const (
	OpWrite   = "write"
	OpRetract = "retract"
)

// AddRequest writes a memory item: a new item, or a new version of ItemID.
// The session is the one that caused the write: it gets the
// rath.memory.written event, and EventIDs must be events of its logical log.
type AddRequest struct {
	// RequestID makes a retried request write once; empty: the service
	// picks one (and a retry may write twice). The Go client sets it.
	RequestID string `json:"request_id,omitempty"`
	// ItemID names the item; empty creates a new item with a new ID.
	ItemID   string   `json:"item_id,omitempty"`
	Session  string   `json:"session"`
	Content  string   `json:"content"`
	Tags     []string `json:"tags,omitempty"`
	Scope    string   `json:"scope"`
	Evidence string   `json:"evidence"`
	EventIDs []string `json:"event_ids,omitempty"`
}

// WriteReply answers add and restore: the record of the new version.
type WriteReply struct {
	Record Record `json:"record"`
	// Ack is the ledger's ack of the rath.memory.written event.
	Ack api.Ack `json:"ack"`
}

// Filter selects recallable items: any of Scopes (empty: every scope) and
// every one of Tags.
type Filter struct {
	Scopes []string `json:"scopes,omitempty"`
	Tags   []string `json:"tags,omitempty"`
}

// RecallRequest asks for the K items that best match Query, for a session,
// and records the answer in that session (rath.memory.recalled).
type RecallRequest struct {
	RequestID string `json:"request_id,omitempty"`
	Session   string `json:"session"`
	Query     string `json:"query"`
	Filter
	K int `json:"k,omitempty"`
	// Agent and TurnID name the agent and the turn that will use the items.
	Agent  string `json:"agent,omitempty"`
	TurnID string `json:"turn_id,omitempty"`
}

// SearchRequest is a recall that no session uses: an operator looking, not
// recorded anywhere. Agents recall.
type SearchRequest struct {
	Query string `json:"query"`
	Filter
	K int `json:"k,omitempty"`
}

// Hit is one recalled item version with its BM25 score.
type Hit struct {
	ItemID  string   `json:"item_id"`
	Version int      `json:"version"`
	Score   float64  `json:"score"`
	Content string   `json:"content"`
	Tags    []string `json:"tags,omitempty"`
	Scope   string   `json:"scope"`
}

// RecallReply lists the hits, best first. A recall's reply also carries the
// ledger's ack of the rath.memory.recalled event.
type RecallReply struct {
	Hits []Hit    `json:"hits"`
	Ack  *api.Ack `json:"ack,omitempty"`
}

// ItemRequest names an item (show, history).
type ItemRequest struct {
	ItemID string `json:"item_id"`
}

// Item is an item as recall sees it now.
type Item struct {
	ItemID string `json:"item_id"`
	// Tenant is the tenant the item belongs to.
	Tenant string `json:"tenant,omitempty"`
	// Current is the version recall serves: the newest not retracted; nil
	// when every version is retracted.
	Current *Record `json:"current,omitempty"`
	// Versions is how many versions the item has.
	Versions int `json:"versions"`
	// Retracted lists the retracted versions.
	Retracted []int `json:"retracted,omitempty"`
}

// HistoryReply lists every record of an item, oldest first.
type HistoryReply struct {
	ItemID  string   `json:"item_id"`
	Records []Record `json:"records"`
}

// RetractRequest withdraws an item (Version 0: every version it has) or one
// version. The session records it (rath.memory.retracted).
type RetractRequest struct {
	RequestID string `json:"request_id,omitempty"`
	ItemID    string `json:"item_id"`
	Version   int    `json:"version,omitempty"`
	Session   string `json:"session"`
	By        string `json:"by"`
	Reason    string `json:"reason"`
}

// RetractReply is the retraction's record and the ledger's ack.
type RetractReply struct {
	Record Record  `json:"record"`
	Ack    api.Ack `json:"ack"`
}

// RestoreRequest writes a new version whose content, tags and scope are
// those of Version. Evidence defaults to human_correction.
type RestoreRequest struct {
	RequestID string   `json:"request_id,omitempty"`
	ItemID    string   `json:"item_id"`
	Version   int      `json:"version"`
	Session   string   `json:"session"`
	By        string   `json:"by,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Evidence  string   `json:"evidence,omitempty"`
	EventIDs  []string `json:"event_ids,omitempty"`
}

// ReadersReply answers which sessions read an item: every session whose
// logical log holds a rath.memory.recalled event naming the item, whether
// stored in it, inherited from a fork ancestor, or taken in by a merge.
type ReadersReply struct {
	ItemID  string   `json:"item_id"`
	Readers []Reader `json:"readers"`
}

// Reader is one session's read of an item, through one recall event.
type Reader struct {
	Session string `json:"session"`
	// Via is ViaOwn (the recall is stored in Session), ViaFork (in a fork
	// ancestor, before the fork point) or ViaMerge (taken in by a merge).
	Via string `json:"via"`
	// Recall names the recall event: the session it is stored in, its
	// sequence there, its ID.
	StoredIn string  `json:"stored_in"`
	Seq      uint64  `json:"seq"`
	EventID  string  `json:"event_id"`
	Version  int     `json:"version"`
	Score    float64 `json:"score,omitempty"`
	Query    string  `json:"query,omitempty"`
	Agent    string  `json:"agent,omitempty"`
	TurnID   string  `json:"turn_id,omitempty"`
}

// How a session came to hold a recall event.
const (
	ViaOwn   = "own"
	ViaFork  = "fork"
	ViaMerge = "merge"
)

// JustifyRequest asks what justified an item's versions (Version 0: all).
type JustifyRequest struct {
	ItemID  string `json:"item_id"`
	Version int    `json:"version,omitempty"`
}

// JustifyReply lists each version's justification.
type JustifyReply struct {
	ItemID   string          `json:"item_id"`
	Versions []Justification `json:"versions"`
}

// Justification is one version's provenance resolved to the stored events.
type Justification struct {
	Version      int               `json:"version"`
	RestoredFrom int               `json:"restored_from,omitempty"`
	Retracted    bool              `json:"retracted,omitempty"`
	Provenance   events.Provenance `json:"provenance"`
	// Evidence holds the stored events named by the provenance, as the
	// ledger's log returns them (structured-mode CloudEvents).
	Evidence []json.RawMessage `json:"evidence"`
	// WrittenIn names the rath.memory.written event of the version.
	WrittenIn EventRef `json:"written_in"`
}

// EventRef names an event of a session by ID.
type EventRef struct {
	Session string `json:"session"`
	EventID string `json:"event_id"`
}

// PresentRequest asks which items were present in Session at sequence At
// (0: its head).
type PresentRequest struct {
	Session string `json:"session"`
	At      uint64 `json:"at,omitempty"`
}

// PresentReply lists the items present, by item ID.
type PresentReply struct {
	Session string     `json:"session"`
	At      uint64     `json:"at"`
	Items   []Presence `json:"items"`
}

// Presence is one item present in a session at a sequence, and why: the
// memory events of the session's logical log (through fork ancestry and
// merges) up to the sequence that wrote or recalled it, not followed by a
// retraction in that log.
type Presence struct {
	ItemID string `json:"item_id"`
	// Versions are the versions written or recalled, ascending.
	Versions []int `json:"versions"`
	// Because lists the events, in log order.
	Because []Cause `json:"because"`
	// RetractedNow says the item is retracted in the store today (which
	// does not change what the session held then).
	RetractedNow bool `json:"retracted_now,omitempty"`
}

// Cause is one memory event that made an item present.
type Cause struct {
	Kind     string `json:"kind"` // "written" or "recalled"
	Seq      uint64 `json:"seq"`
	EventID  string `json:"event_id"`
	Version  int    `json:"version"`
	Evidence string `json:"evidence,omitempty"`
}
