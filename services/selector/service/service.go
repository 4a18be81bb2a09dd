// Package service is the selector's composition root: it wires the event
// store (for workflow bundles), the ledger client and the selector onto a
// NATS connection and runs until the context ends.
package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/services/selector/internal/selector"
	"github.com/openrath/rath/services/selector/internal/timer"
)

// Config is the selector service's configuration; the rules come with each
// session's workflow.
type Config struct {
	// States bounds the cache of folded session states (ADR 0016).
	States fold.CacheConfig
	// Cache, if not nil, is the cache of folded session states of the
	// process this service runs in, shared with the other services there
	// (ADR 0038), and States is not used; nil: the service builds its own,
	// bounded by States.
	Cache *fold.Cache
	// HandOff, if set, takes each turn request the selector appends, as
	// the ledger acked it, with its stream sequence: the agent worker's
	// consume.Local.Hand when both run in one process (ADR 0038 item 5).
	HandOff func(ev events.Stored, streamSeq uint64)
}

// DefaultConfig returns the defaults for one embedded server.
func DefaultConfig() Config { return Config{States: fold.CacheConfig{MaxBytes: fold.DefaultMaxBytes}} }

// Run routes sessions until ctx ends, then drains.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	log = log.With("service", "selector")
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(log))
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("selector: %w", err)
	}
	c, err := client.New(nc, client.As(events.Service("selector")), client.WithSource(selector.Source))
	if err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	if err := cfg.States.Validate(); err != nil {
		return fmt.Errorf("selector config: %w", err)
	}
	tc, err := client.New(nc, client.As(events.Service("selector")), client.WithSource(timer.Source))
	if err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	states := fold.CacheOr(cfg.Cache, store, cfg.States)
	timers := timer.New(store.JetStream(), tc, states, log)
	var opts []selector.Option
	if cfg.HandOff != nil {
		opts = append(opts, selector.WithHandOff(cfg.HandOff))
	}
	s := selector.New(c, states, workflow.NewLibrary(store.GetBlob), timers, log, opts...)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return consume.Run(gctx, nc, s.Handler(), consume.RecordInSession(c), log) })
	g.Go(func() error { return timers.Run(gctx) })
	return g.Wait()
}
