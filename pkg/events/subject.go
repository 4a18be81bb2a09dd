package events

import (
	"fmt"
	"regexp"
	"strings"
)

// Streams, subjects and buckets. Every subject Rath uses is built here.
const (
	// StreamSessions holds every accepted event, one subject per session and
	// kind (rath.log.<session>.<kind>). Each event is republished once stored
	// on rath.session.<session>.<kind> for live subscribers: a plain NATS
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
	rejectsPrefix = "rath.rejects."
	deadPrefix    = "rath.dead."

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
	// InboxNew is the inbox subject for a session start without a chosen ID.
	InboxNew = inboxPrefix + "new"
	// InboxConsumer is the durable consumer the ledgers share on the inbox.
	InboxConsumer = "ledger-inbox"
)

// Ledger request/reply subjects. Each is served by every ledger instance in
// the queue group LedgerQueue.
const (
	LedgerQueue    = "rath-ledger"
	SubjectAppend  = "rath.ledger.append"
	SubjectBatch   = "rath.ledger.batch"
	SubjectState   = "rath.ledger.state"
	SubjectLog     = "rath.ledger.log"
	SubjectList    = "rath.ledger.sessions"
	SubjectLineage = "rath.ledger.lineage"
	SubjectFork    = "rath.ledger.fork"
	SubjectMerge   = "rath.ledger.merge"
	SubjectVerify  = "rath.ledger.verify"
	SubjectSchema  = "rath.ledger.schema"
	// SubjectKeys answers the public keys whose signatures the ledger's
	// events carry (pin them out of band to trust them).
	SubjectKeys = "rath.ledger.keys"
	// SubjectArchive archives a closed session now (and purges it, if asked).
	SubjectArchive = "rath.ledger.archive"
)

// validSessionID keeps a session ID usable as one NATS subject token and as a
// KV key, without escaping.
var validSessionID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// reservedSessionIDs are subject tokens with a meaning of their own
// (rath.inbox.new, rath.rejects.unknown).
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

// SessionSubject is the subject an event of the given kind token is stored on.
func SessionSubject(sessionID, token string) string {
	return logPrefix + sessionID + "." + token
}

// SessionFilter matches every stored event of one session (for consumers and
// direct gets on StreamSessions).
func SessionFilter(sessionID string) string { return logPrefix + sessionID + ".>" }

// LiveFilter matches every event of one session as it is stored, for a plain
// NATS subscription.
func LiveFilter(sessionID string) string { return livePrefix + sessionID + ".>" }

// KindFilter matches the stored events of every session that carry the given
// token, for durable consumers of workers.
func KindFilter(token string) string { return logPrefix + "*." + token }

// InboxSubject is where a producer publishes a proposal for a session.
func InboxSubject(sessionID string) string { return inboxPrefix + sessionID }

// RejectSubject is where a rejection concerning a session is recorded.
// Proposals that name no usable session are recorded under "unknown".
func RejectSubject(sessionID string) string {
	if ValidateSessionID(sessionID) != nil {
		sessionID = "unknown"
	}
	return rejectsPrefix + sessionID
}

// DeadSubject is where a handler's dead letters go.
func DeadSubject(handler string) string { return deadPrefix + handler }

// SessionFromSubject returns the session ID of a stored or live event subject.
func SessionFromSubject(subject string) (string, bool) {
	var rest string
	switch {
	case strings.HasPrefix(subject, logPrefix):
		rest = subject[len(logPrefix):]
	case strings.HasPrefix(subject, livePrefix):
		rest = subject[len(livePrefix):]
	default:
		return "", false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i], true
		}
	}
	return rest, true
}
