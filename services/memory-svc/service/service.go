// Package service is the memory service's composition root: it creates the
// memory stream, follows it and the sessions stream, and answers the memory
// API and serves the remember tool on a NATS connection until the context
// ends.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/toolserver"
	"github.com/openrath/rath/services/memory-svc/internal/memory"
)

// Config is the memory service's configuration.
type Config struct {
	// Replicas of RATH_MEMORY: 1 on one server, 3 on a cluster.
	Replicas int
	// DedupeWindow is how long RATH_MEMORY remembers a write's ID; it must
	// exceed the client retry horizon, like the sessions stream's.
	DedupeWindow time.Duration
	// Inflight bounds the requests one process handles at once.
	Inflight int
	// States bounds the cache of folded session states (ADR 0016) that
	// the remember tool and the provenance questions read.
	States fold.CacheConfig
	// Cache, if not nil, is the cache of folded session states of the
	// process this service runs in, shared with the other services there
	// (ADR 0038), and States is not used; nil: the service builds its own,
	// bounded by States.
	Cache *fold.Cache
}

// DefaultConfig returns the defaults for one embedded server.
func DefaultConfig() Config {
	return Config{Replicas: 1, DedupeWindow: 10 * time.Minute, Inflight: 256, States: fold.CacheConfig{MaxBytes: fold.DefaultMaxBytes}}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be 1..5, got %d", c.Replicas))
	}
	if c.DedupeWindow <= eventstore.RetryHorizon {
		errs = append(errs, fmt.Errorf("dedupe window %s must exceed the client retry horizon %s", c.DedupeWindow, eventstore.RetryHorizon))
	}
	if c.Inflight < 1 {
		errs = append(errs, fmt.Errorf("inflight must be positive, got %d", c.Inflight))
	}
	return errors.Join(append(errs, c.States.Validate())...)
}

// Run serves memory until ctx ends, then drains: it stops taking requests,
// answers those in hand, and stops following the streams.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	log = log.With("service", "memory")
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	// The ledger creates the sessions stream; memory records into it.
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(log))
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("memory: %w", err)
	}
	backend, err := memory.OpenJetStream(ctx, nc, memory.StreamConfig{Replicas: cfg.Replicas, DedupeWindow: cfg.DedupeWindow}, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("memory: %w", err)
	}
	fctx, stopFollowing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollowing()
	items := memory.NewItems()
	waitItems, err := backend.Follow(fctx, items.Apply)
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	sessions, err := memory.FollowSessions(fctx, store, log)
	if err != nil {
		stopFollowing()
		return errors.Join(fmt.Errorf("memory: %w", err), waitItems())
	}
	c, err := client.New(nc, client.As(memory.Self), client.WithSource(memory.Source))
	if err != nil {
		stopFollowing()
		return errors.Join(fmt.Errorf("memory: %w", err), waitItems(), sessions.Wait())
	}
	// A follower that stops early stops the service: its answers would go
	// stale, so let the process restart instead.
	sctx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	go func() { _ = waitItems(); stopServing() }()
	go func() { _ = sessions.Wait(); stopServing() }()
	states := fold.CacheOr(cfg.Cache, store, cfg.States)
	m := memory.New(backend, items, sessions, c, memory.WithSessionIndex(store), memory.WithStates(states))
	// The remember tool is served beside the API, by every process, from
	// one durable consumer; if it cannot be served the service stops.
	toolDone := make(chan error, 1)
	go func() {
		err := toolserver.Serve(sctx, nc, m.Remember(workflow.NewLibrary(store.GetBlob)), toolserver.WithLogger(log),
			toolserver.WithStates(states), toolserver.As(memory.Self))
		if err != nil {
			stopServing()
		}
		toolDone <- err
	}()
	serveErr := m.Serve(sctx, nc, cfg.Inflight, log)
	stopServing()
	toolErr := <-toolDone
	early := ctx.Err() == nil && fctx.Err() == nil
	stopFollowing()
	errs := []error{serveErr, toolErr, waitItems(), sessions.Wait()}
	if early && errors.Join(errs...) == nil {
		errs = append(errs, errors.New("memory: a stream follower stopped"))
	}
	return errors.Join(errs...)
}
