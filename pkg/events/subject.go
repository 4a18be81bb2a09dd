package events

import (
	"fmt"
	"regexp"
)

// Streams, subjects and buckets. Every subject Rath uses is built here.
const (
	// StreamSessions holds every accepted event, one subject per session and kind.
	StreamSessions = "RATH_SESSIONS"
	// StreamInbox is a work queue that keeps fire-and-forget proposals until a
	// ledger has decided on them, so proposals survive a ledger that is down.
	StreamInbox = "RATH_INBOX"
	// StreamRejects records every rejected proposal with its reason.
	StreamRejects = "RATH_REJECTS"

	// BucketSnapshots holds folded session states every K events.
	BucketSnapshots = "rath-snapshots"
	// BucketSessions holds one index record per session (status, labels, lineage).
	BucketSessions = "rath-sessions"

	sessionPrefix = "rath.session."
	inboxPrefix   = "rath.inbox."
	rejectsPrefix = "rath.rejects."

	// SessionsWildcard matches every stored session event.
	SessionsWildcard = sessionPrefix + ">"
	// InboxWildcard matches every fire-and-forget proposal.
	InboxWildcard = inboxPrefix + ">"
	// RejectsWildcard matches every recorded rejection.
	RejectsWildcard = rejectsPrefix + ">"
	// InboxNew is the inbox subject for a session start without a chosen ID.
	InboxNew = inboxPrefix + "new"
)

// Ledger request/reply subjects. Each is served by every ledger instance in
// the queue group LedgerQueue.
const (
	LedgerQueue    = "rath-ledger"
	SubjectAppend  = "rath.ledger.append"
	SubjectState   = "rath.ledger.state"
	SubjectLog     = "rath.ledger.log"
	SubjectList    = "rath.ledger.sessions"
	SubjectLineage = "rath.ledger.lineage"
	SubjectFork    = "rath.ledger.fork"
	SubjectMerge   = "rath.ledger.merge"
	SubjectVerify  = "rath.ledger.verify"
)

// validSessionID keeps a session ID usable as one NATS subject token and as a
// KV key, without escaping.
var validSessionID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidateSessionID reports whether id can name a session.
func ValidateSessionID(id string) error {
	if !validSessionID.MatchString(id) {
		return fmt.Errorf("invalid session ID %q: want 1-128 characters of A-Z a-z 0-9 _ -", id)
	}
	return nil
}

// SessionSubject is the subject an event of the given kind token is stored on.
func SessionSubject(sessionID, token string) string {
	return sessionPrefix + sessionID + "." + token
}

// SessionFilter matches every event of one session.
func SessionFilter(sessionID string) string { return sessionPrefix + sessionID + ".>" }

// KindFilter matches the events of every session that carry the given token.
func KindFilter(token string) string { return sessionPrefix + "*." + token }

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

// SessionFromSubject returns the session ID of a stored event's subject.
func SessionFromSubject(subject string) (string, bool) {
	if len(subject) <= len(sessionPrefix) || subject[:len(sessionPrefix)] != sessionPrefix {
		return "", false
	}
	rest := subject[len(sessionPrefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i], true
		}
	}
	return rest, true
}
