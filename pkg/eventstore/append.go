package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/tracing"
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

// Append stores a sealed event body for a session, only if the session's last
// stored event is at stream sequence expectLast (0: the session has none yet).
// The event ID is the JetStream message ID, so a retried append inside the
// dedupe window is stored once.
func (s *Store) Append(ctx context.Context, session, token string, body []byte, eventID string, seq uint64, hash string, expectLast uint64) (Appended, error) {
	msg := &nats.Msg{
		Subject: events.SessionSubject(session, token),
		Data:    body,
		Header: nats.Header{
			"Content-Type": []string{events.ContentTypeStructured},
			HeaderSeq:      []string{strconv.FormatUint(seq, 10)},
			HeaderHash:     []string{hash},
		},
	}
	// Consumers continue the appender's trace from the stored message.
	tracing.Inject(ctx, msg.Header)
	ack, err := s.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(eventID),
		jetstream.WithExpectLastSequenceForSubject(expectLast, events.SessionFilter(session)))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return Appended{}, &ConflictError{Session: session, Expected: expectLast, Detail: apiErr.Description}
		}
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
			return Appended{}, fmt.Errorf("append to session %s: %d bytes: %w", session, len(body), ErrTooLarge)
		}
		return Appended{}, fmt.Errorf("append to session %s: %w", session, err)
	}
	return Appended{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// MaxEventSize is the largest stored event body the store accepts.
func (s *Store) MaxEventSize() int { return int(s.cfg.MaxEventSize) }

// IsConflict reports whether err is a ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}
