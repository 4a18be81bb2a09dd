package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
)

// Headers Rath sets on every stored event besides the CloudEvent body, so
// that tools can read the sequence and hash without parsing the body.
const (
	HeaderSeq  = "Rath-Seq"
	HeaderHash = "Rath-Hash"
)

// ConflictError reports that a session's last stored event is not the one the
// appender expected: another appender got there first. Re-read and retry.
type ConflictError struct {
	Session  string
	Expected uint64 // expected stream sequence of the session's last event
	Detail   string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("append to session %s: conflict, expected last stream sequence %d: %s", e.Session, e.Expected, e.Detail)
}

// Appended is the outcome of a stored append.
type Appended struct {
	StreamSeq uint64
	// Duplicate is true when JetStream already held an event with this ID;
	// StreamSeq is then the original's.
	Duplicate bool
}

// MsgID is the JetStream message ID an event is stored under: its ID within
// its session's tenant. JetStream deduplicates message IDs stream-wide, so a
// retried append is stored once; scoped by tenant, an event ID one tenant
// uses neither names nor blocks another tenant's event (ADR 0015).
func MsgID(tenant, eventID string) string { return tenant + "/" + eventID }

// Append stores a sealed event body for a session of a tenant, only if the session's last
// stored event is at stream sequence expectLast (0: the session has none yet).
// The event ID is the JetStream message ID, so a retried append inside the
// dedupe window is stored once: an ack lost with a stream's leader is
// waited for again (publish), not until ctx's deadline.
func (s *Store) Append(ctx context.Context, tenant, session, token string, body []byte, eventID string, seq uint64, hash string, expectLast uint64) (Appended, error) {
	msg := appendMsg(ctx, tenant, session, token, body, seq, hash)
	ack, err := s.publish(ctx, msg,
		jetstream.WithMsgID(MsgID(tenant, eventID)),
		jetstream.WithExpectLastSequenceForSubject(expectLast, events.SessionFilter(session)))
	if err != nil {
		return Appended{}, appendErr(session, expectLast, len(body), err)
	}
	return Appended{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// PendingAppend is an append published without waiting for its ack.
type PendingAppend struct {
	future     jetstream.PubAckFuture
	session    string
	expectLast uint64
	size       int
}

// AppendAsync publishes like Append but returns before JetStream acks, so
// appends to many sessions can be in flight at once; Wait gives the outcome.
// Appends to one session cannot overlap: each expects the one before it.
func (s *Store) AppendAsync(ctx context.Context, tenant, session, token string, body []byte, eventID string, seq uint64, hash string, expectLast uint64) (*PendingAppend, error) {
	msg := appendMsg(ctx, tenant, session, token, body, seq, hash)
	f, err := s.js.PublishMsgAsync(msg,
		jetstream.WithMsgID(MsgID(tenant, eventID)),
		jetstream.WithExpectLastSequenceForSubject(expectLast, events.SessionFilter(session)),
		jetstream.WithStallWait(asyncStallWait))
	if err != nil {
		return nil, appendErr(session, expectLast, len(body), err)
	}
	return &PendingAppend{future: f, session: session, expectLast: expectLast, size: len(body)}, nil
}

// asyncStallWait is how long AppendAsync waits for room in the window of
// unacknowledged publishes (nats.go's default gives up after 200 ms).
const asyncStallWait = 10 * time.Second

// Wait returns the outcome of the append, as Append would have.
func (p *PendingAppend) Wait(ctx context.Context) (Appended, error) {
	select {
	case ack := <-p.future.Ok():
		return Appended{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
	case err := <-p.future.Err():
		return Appended{}, appendErr(p.session, p.expectLast, p.size, err)
	case <-ctx.Done():
		return Appended{}, fmt.Errorf("append to session %s: %w", p.session, ctx.Err())
	}
}

func appendMsg(ctx context.Context, tenant, session, token string, body []byte, seq uint64, hash string) *nats.Msg {
	msg := &nats.Msg{
		Subject: events.SessionSubject(tenant, session, token),
		Data:    body,
		Header: nats.Header{
			"Content-Type": []string{events.ContentTypeStructured},
			HeaderSeq:      []string{strconv.FormatUint(seq, 10)},
			HeaderHash:     []string{hash},
		},
	}
	// Consumers continue the appender's trace from the stored message.
	tracing.Inject(ctx, msg.Header)
	return msg
}

// WrongLastSequence reports whether JetStream refused a conditional publish
// because the subject's last message was not the expected one, and returns
// the server's description of what it found.
func WrongLastSequence(err error) (string, bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return apiErr.Description, true
	}
	return "", false
}

// appendErr maps a refused publish to the store's errors.
func appendErr(session string, expectLast uint64, size int, err error) error {
	if detail, ok := WrongLastSequence(err); ok {
		return &ConflictError{Session: session, Expected: expectLast, Detail: detail}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return fmt.Errorf("append to session %s: %d bytes: %w", session, size, ErrTooLarge)
	}
	return fmt.Errorf("append to session %s: %w", session, err)
}

// MaxEventSize is the largest stored event body the store accepts.
func (s *Store) MaxEventSize() int { return int(s.cfg.MaxEventSize) }

// IsConflict reports whether err is a ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}
