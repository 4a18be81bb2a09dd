package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenOption changes how Open and AttachWait wait for JetStream.
type OpenOption func(*openOptions)

type openOptions struct {
	log *slog.Logger
}

// WithLogger names the logger Open and AttachWait tell what they wait for
// (default: none).
func WithLogger(log *slog.Logger) OpenOption {
	return func(o *openOptions) { o.log = log }
}

func openOpts(opts []OpenOption) openOptions {
	o := openOptions{log: slog.New(slog.DiscardHandler)}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

const (
	// createAttempt bounds the first request to create a stream or bucket,
	// doubling on each attempt up to createAttemptMax. A cluster that is
	// still forming can leave a request unanswered, and so does a cluster
	// asked by two ledgers at once to create the same stream (one of the
	// two requests is never answered, though the stream is created): the
	// request is then made again, not given up, and the repeat finds the
	// stream.
	createAttempt    = time.Second
	createAttemptMax = 8 * time.Second
	// formingPauseMax caps the pause between two attempts.
	formingPauseMax = 5 * time.Second
)

// Forming reports whether err is what JetStream answers while a cluster is
// still forming or electing a leader, or a node is down: no meta leader
// yet, too few peers for the replicas asked for, no responder, a timeout.
// Such a request succeeds later; any other error will not.
func Forming(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10005, // no suitable peers for placement
			10006, // not in clustered mode (yet)
			10008, // JetStream system temporarily unavailable
			10009, // cluster cannot handle the request (no leader)
			10023, // insufficient resources (peers not online yet)
			10039, // JetStream not enabled for account (not yet)
			10076, // JetStream not enabled (not yet)
			10118: // stream offline
			return true
		}
		return apiErr.Code == 503
	}
	return false
}

// WhileForming runs fn (one idempotent request, named what: a creation, a
// put) until it succeeds, making it again with growing pauses while
// JetStream is forming or electing a leader (Forming), and saying so on
// log, until ctx ends (bound it for a patience). Only an idempotent
// request may be made again: one that timed out may have taken effect.
func WhileForming(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	started := time.Now()
	bound := createAttempt
	for attempt, pause := 1, 100*time.Millisecond; ; attempt, pause, bound = attempt+1, min(pause*2, formingPauseMax), min(bound*2, createAttemptMax) {
		actx, cancel := context.WithTimeout(ctx, bound)
		err := fn(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("JetStream ready", "request", what, "waited", time.Since(started).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (waiting for JetStream: %s: %v)", ctx.Err(), what, err)
		}
		if !Forming(err) {
			return err
		}
		log.Warn("waiting for the JetStream cluster: it is forming, electing a leader or short of nodes",
			"request", what, "attempt", attempt, "waited", time.Since(started).Round(time.Millisecond), "retry_in", pause, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for JetStream: %s: %v)", ctx.Err(), what, err)
		case <-t.C:
		}
	}
}
