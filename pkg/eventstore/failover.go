package eventstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// ackAttempt bounds the first wait for an append's ack. A stream's
	// leader that goes down takes the appends it was storing with it: no
	// ack and no error ever come for them. JetStream elects a new leader in
	// well under a second, so the append is published again (same message
	// ID: stored once) instead of waiting out the caller's deadline. An
	// append is acked in milliseconds, but a saturated machine (the scale
	// tests under the race detector) takes up to a second: at 0.5 s the
	// republishes of merely slow appends added load until sessions paused
	// for a minute, so the bound is 2 s: appends resume within about 2 s
	// of a leader's loss.
	ackAttempt = 2 * time.Second
	// ackAttemptMax caps the bound as it doubles, so that a server that
	// is merely slow is not asked again and again.
	ackAttemptMax = 4 * time.Second
)

// publish publishes msg and waits for its ack, attempt by attempt: an
// attempt with no ack within its bound, or with no stream listening (no
// leader yet), is published again with the same message and options until
// ctx ends. The message ID makes a repeat of a stored message a duplicate
// (R3), or a wrong-last-sequence conflict the caller resolves by reading
// the session (R1), never a second copy.
func (s *Store) publish(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	started := time.Now()
	ack, n, err := attempts(ctx, ackAttempt, func(actx context.Context) (*jetstream.PubAck, error) {
		return s.js.PublishMsg(actx, msg, opts...)
	}, func(bound time.Duration, err error) {
		s.log.Warn("no ack for an append: publishing it again (the stream's leader may be lost; a new one is elected)", "subject", msg.Subject, "after", bound, "err", err)
	})
	if err == nil && n > 1 {
		s.log.Info("append acknowledged after the stream's leader was lost or slow", "subject", msg.Subject, "attempts", n, "waited", time.Since(started).Round(time.Millisecond))
	}
	return ack, err
}

// attempts runs try attempt by attempt, each bounded (first, doubling up to
// ackAttemptMax), until it is answered (an answer may be an error, such as
// a conflict or not found) or ctx ends; an attempt that got no answer
// (ackLost) is made again. lost, if set, hears of the first such attempt.
// It returns the answer and how many attempts it took.
func attempts[T any](ctx context.Context, first time.Duration, try func(context.Context) (T, error), lost func(bound time.Duration, err error)) (T, int, error) {
	bound := first
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, bound)
		v, err := try(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !ackLost(err) {
			return v, n, err
		}
		if n == 1 && lost != nil {
			lost(bound, err)
		}
		bound = min(2*bound, ackAttemptMax)
	}
}

// ackLost reports whether an append's ack did not come (the attempt's
// bound passed, no stream answered, the connection was reconnecting):
// whether the append may or may not be stored, publishing it again is
// safe.
func ackLost(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// readAttempt bounds one attempt of a single-message read (a direct get,
// which any replica may answer, or a request to the stream's leader),
// doubling up to ackAttemptMax: a replica or leader that goes down takes
// the request with it.
const readAttempt = 2 * time.Second

// retryRead runs read attempt by attempt until it is answered (an answer
// may be an error, such as not found) or ctx ends.
func retryRead[T any](ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	v, _, err := attempts(ctx, readAttempt, read, nil)
	return v, err
}
