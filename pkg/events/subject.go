package events

import (
	"fmt"
	"regexp"
	"strings"
)

// Streams, subjects and buckets. Every subject Rath uses is built here.
const (
	// StreamSessions holds every accepted event, one subject per session and
	// kind (rath.log.<tenant>.<session>.<kind>). Each event is republished once stored
	// on rath.session.<tenant>.<session>.<kind> for live subscribers: a plain NATS
	// subscriber on the stored subject would also see publishes JetStream
	// refused (conflicts, duplicates).
	StreamSessions = "RATH_SESSIONS"
	// StreamInbox is a work queue that keeps fire-and-forget proposals until a
	// ledger has decided on them, so proposals survive a ledger that is down.
	StreamInbox = "RATH_INBOX"
	// StreamRejects records every rejected proposal with its reason.
	StreamRejects = "RATH_REJECTS"
	// StreamDead keeps the events a handler gave up on (rath.dead.<handler>),
	// with the error, for an operator to inspect and replay.
	StreamDead = "RATH_DEAD"
	// StreamSigs keeps the ledger's signature records (rath.sig.<record ID>):
	// the leaves of a group signature, stored once for the events of a batch
	// round that refer to it (events.SignRecord).
	StreamSigs = "RATH_SIGS"
	// StreamTimers holds Rath's durable timers (ADR 0026): JetStream message
	// schedules on rath.timer.at.<session>.<timer>, which the server
	// publishes once, at their time, to rath.timer.fired.<session>.<timer>
	// (a work queue: a fired timer is kept until its consumer acks it). Only
	// Rath's services publish here: whoever may publish a schedule chooses
	// what fires.
	StreamTimers = "RATH_TIMERS"

	// BucketSnapshots holds folded session states every K events.
	BucketSnapshots = "rath-snapshots"
	// BucketSessions holds one index record per session (status, labels, lineage).
	BucketSessions = "rath-sessions"
	// BucketTools is the tool registry: one entry per tool (built-in, MCP or
	// custom) with its description and JSON Schema, keyed by tool name.
	BucketTools = "rath-tools"
	// BucketBlobs is the object store of large evidence (model request and
	// response bodies, tool output, diffs), named by content hash.
	BucketBlobs = "rath-blobs"
	// BucketHeads holds each session's last signed head, apart from its
	// log, so that a log cut short is seen (the ledger's only writer).
	BucketHeads = "rath-heads"

	logPrefix     = "rath.log."
	livePrefix    = "rath.session."
	inboxPrefix   = "rath.inbox."
	inboxNew      = "new"
	rejectsPrefix = "rath.rejects."
	deadPrefix    = "rath.dead."
	ledgerPrefix  = "rath.ledger."
	memoryPrefix  = "rath.memory."
	sigPrefix     = "rath.sig."
	timerAt       = "rath.timer.at."
	timerFired    = "rath.timer.fired."
	routePrefix   = "rath.route."
	agentPrefix   = "rath.agent."

	// SessionsWildcard matches every stored session event.
	SessionsWildcard = logPrefix + ">"
	// LiveWildcard matches every event republished after it was stored.
	LiveWildcard = livePrefix + ">"
	// InboxWildcard matches every fire-and-forget proposal.
	InboxWildcard = inboxPrefix + ">"
	// RejectsWildcard matches every recorded rejection.
	RejectsWildcard = rejectsPrefix + ">"
	// DeadWildcard matches every dead letter.
	DeadWildcard = deadPrefix + ">"
	// SigsWildcard matches every signature record.
	SigsWildcard = sigPrefix + ">"
	// TimersWildcard matches every timer, set or fired.
	TimersWildcard = "rath.timer.>"
	// TimersSetWildcard matches every timer set (a message schedule).
	TimersSetWildcard = timerAt + ">"
	// TimersFiredWildcard matches every fired timer.
	TimersFiredWildcard = timerFired + ">"
	// RouteWildcard matches every question the selector asks a served
	// router (rath.route.<tenant>.<router>).
	RouteWildcard = routePrefix + ">"
	// InboxConsumer is the durable consumer the ledgers share on the inbox.
	InboxConsumer = "ledger-inbox"
)

// Ledger operations. A principal asks for one on its own subject,
// rath.ledger.<tenant>.<user>.<op> (Principal.Ledger); every ledger instance
// serves them in the queue group LedgerQueue.
const (
	LedgerQueue = "rath-ledger"
	// LedgerPrefix and MemoryPrefix start the request subjects of the ledger
	// and of the memory service.
	LedgerPrefix = ledgerPrefix
	MemoryPrefix = memoryPrefix
	// AgentPrefix starts the request subjects of the agent worker's API
	// for served agents (pkg/agentapi): rath.agent.<tenant>.<user>.<op>.
	AgentPrefix = agentPrefix
	// AgentWildcard matches every request to that API.
	AgentWildcard = agentPrefix + ">"

	OpAppend = "append"
	OpBatch  = "batch"
	// OpAtomic appends events of one session all or none.
	OpAtomic  = "atomic"
	OpState   = "state"
	OpLog     = "log"
	OpList    = "sessions"
	OpLineage = "lineage"
	OpFork    = "fork"
	OpMerge   = "merge"
	OpVerify  = "verify"
	OpSchema  = "schema"
	// OpKeys answers the public keys whose signatures the ledger's events
	// carry (pin them out of band to trust them).
	OpKeys = "keys"
	// OpArchive archives a closed session now (and purges it, if asked).
	OpArchive = "archive"
	// OpRejections pages the recorded rejections of the asker's tenant.
	OpRejections = "rejections"
	// OpPutBlob and OpGetBlob store and read evidence blobs by content hash.
	OpPutBlob = "putblob"
	OpGetBlob = "getblob"
	// OpPull and OpSettle read a durable feed of a tenant's stored events
	// and ack or nack what was read (ledgerapi.PullRequest), for workers
	// of a tenant's users, who have no JetStream access of their own.
	OpPull   = "pull"
	OpSettle = "settle"
	// OpTools lists the tools registered in the tool registry: what a
	// workflow's agents may be given (a client checks a workflow before it
	// starts a session of it).
	OpTools = "tools"
)

// LedgerOps lists every ledger operation.
func LedgerOps() []string {
	return []string{OpAppend, OpBatch, OpAtomic, OpState, OpLog, OpList, OpLineage, OpFork, OpMerge, OpVerify, OpSchema, OpKeys, OpArchive, OpRejections, OpPutBlob, OpGetBlob, OpPull, OpSettle, OpTools}
}

// LedgerFilter is the subscription of the ledger to op from every principal.
func LedgerFilter(op string) string { return ledgerPrefix + "*.*." + op }

// validSessionID keeps a session ID usable as one NATS subject token and as a
// KV key, without escaping.
var validSessionID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// reservedSessionIDs are subject tokens with a meaning of their own
// (rath.inbox.<tenant>.<user>.new, rath.rejects.<tenant>.unknown).
var reservedSessionIDs = map[string]bool{"new": true, "unknown": true}

// ValidateSessionID reports whether id can name a session.
func ValidateSessionID(id string) error {
	if !validSessionID.MatchString(id) {
		return fmt.Errorf("invalid session ID %q: want 1-128 characters of A-Z a-z 0-9 _ -", id)
	}
	if reservedSessionIDs[id] {
		return fmt.Errorf("invalid session ID %q: reserved", id)
	}
	return nil
}

// SessionSubject is the subject an event of the given kind token is stored
// on: rath.log.<tenant>.<session>.<kind>.
func SessionSubject(tenant, sessionID, token string) string {
	return logPrefix + tenant + "." + sessionID + "." + token
}

// SessionFilter matches every stored event of one session (for consumers and
// direct gets on StreamSessions), whatever its tenant: session IDs are unique
// across tenants.
func SessionFilter(sessionID string) string { return logPrefix + "*." + sessionID + ".>" }

// LiveSubject is the subject an event is republished on once stored:
// rath.session.<tenant>.<session>.<kind>, so that the server lets a tenant's
// users watch their own sessions only.
func LiveSubject(tenant, sessionID, token string) string {
	return livePrefix + tenant + "." + sessionID + "." + token
}

// LiveFilter matches every event of one session as it is stored, for a plain
// NATS subscription. An empty tenant matches the session in any tenant (for
// services).
func LiveFilter(tenant, sessionID string) string {
	if tenant == "" {
		tenant = "*"
	}
	return livePrefix + tenant + "." + sessionID + ".>"
}

// TenantLiveWildcard matches the live events of every session of a tenant.
func TenantLiveWildcard(tenant string) string { return livePrefix + tenant + ".>" }

// TenantFilter matches the stored events of one session of a tenant, or of
// every session of the tenant when sessionID is empty. An empty tenant
// matches every tenant (for services).
func TenantFilter(tenant, sessionID string) string {
	if tenant == "" {
		tenant = "*"
	}
	if sessionID == "" {
		return logPrefix + tenant + ".>"
	}
	return logPrefix + tenant + "." + sessionID + ".>"
}

// KindFilter matches the stored events of every session that carry the given
// token, for durable consumers of workers.
func KindFilter(token string) string { return logPrefix + "*.*." + token }

// TimerSubject is where the timer named name of a session is set (a
// message schedule: setting it again replaces it), and TimerFiredSubject
// where it fires. name is one subject token (an approval ID, "wall_time").
func TimerSubject(sessionID, name string) string { return timerAt + sessionID + "." + name }

// TimerFiredSubject is where the timer TimerSubject sets fires.
func TimerFiredSubject(sessionID, name string) string { return timerFired + sessionID + "." + name }

// RouteSubject is where the selector asks the served router named router
// for the route of a session of tenant: rath.route.<tenant>.<router>. The
// tenant is the session's (as in the stored and live subjects), so that
// permissions can confine a router to one tenant's sessions.
func RouteSubject(tenant, router string) string { return routePrefix + tenant + "." + router }

// RouteFilter matches the questions to the router named router about the
// sessions of every tenant.
func RouteFilter(router string) string { return routePrefix + "*." + router }

// InboxFilter matches the proposals for a session by any principal.
func InboxFilter(sessionID string) string { return inboxPrefix + "*.*." + sessionID }

// UnknownSession is where the rejections of proposals that name no usable
// session are recorded.
const UnknownSession = "unknown"

// RejectSubject is where a rejection of a proposal by a principal of tenant
// concerning a session is recorded: under the proposer's tenant, so that
// each tenant reads the refusals of its own proposals. Proposals that name
// no usable session are recorded under "unknown".
func RejectSubject(tenant, sessionID string) string {
	if ValidateSessionID(sessionID) != nil {
		sessionID = UnknownSession
	}
	if tenant == "" {
		tenant = ServiceTenant // no one's: for operators
	}
	return rejectsPrefix + tenant + "." + sessionID
}

// RejectFilter matches the rejections of a tenant ("": every tenant) about
// a session ("": every session).
func RejectFilter(tenant, sessionID string) string {
	if tenant == "" {
		tenant = "*"
	}
	if sessionID == "" {
		return rejectsPrefix + tenant + ".*"
	}
	return rejectsPrefix + tenant + "." + sessionID
}

// DeadSubject is where a handler's dead letters go.
func DeadSubject(handler string) string { return deadPrefix + handler }

// SessionFromSubject returns the session ID of a stored or live event
// subject (rath.log.<tenant>.<session>.<kind>, rath.session.<tenant>.<session>.<kind>).
func SessionFromSubject(subject string) (string, bool) {
	_, id, ok := TenantSessionFromSubject(subject)
	return id, ok
}

// TenantSessionFromSubject returns the tenant and session ID of a stored or
// live event subject.
func TenantSessionFromSubject(subject string) (tenant, id string, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(subject, logPrefix):
		rest = subject[len(logPrefix):]
	case strings.HasPrefix(subject, livePrefix):
		rest = subject[len(livePrefix):]
	default:
		return "", "", false
	}
	tenant, rest, ok = strings.Cut(rest, ".")
	if !ok {
		return "", "", false
	}
	id, _, _ = strings.Cut(rest, ".")
	return tenant, id, id != ""
}

// SigRecordSubject is where the signature record with the given ID is stored.
func SigRecordSubject(id string) string { return sigPrefix + id }
