// Package service is the tool runner's composition root: event store, ledger
// client, sandbox backend and runner, wired onto a NATS connection.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/consume"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/workflow"
	"github.com/openrath/rath/services/tool-runner/internal/runner"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Config is the tool runner's configuration.
type Config struct {
	Store   eventstore.Config
	Sandbox sandbox.Config
	// Seeds is the directory workspace seeds are named under.
	Seeds string
}

// DefaultConfig returns the defaults; Sandbox.Root must still be set.
func DefaultConfig() Config {
	return Config{Store: eventstore.DefaultConfig(), Sandbox: sandbox.DefaultConfig()}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	return errors.Join(c.Store.Validate(), c.Sandbox.Validate())
}

// Run runs tool calls until ctx ends, then drains.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("tool runner config: %w", err)
	}
	log = log.With("service", "tool-runner")
	store, err := eventstore.Open(ctx, nc, cfg.Store)
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	backend, err := sandbox.NewLocal(cfg.Sandbox)
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	c, err := client.New(nc, client.WithSource(runner.Source))
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	r := runner.New(c, store, backend, workflow.NewLibrary(store.GetBlob), cfg.Seeds, log)
	if err := r.Register(ctx); err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	return consume.Run(ctx, nc, r.Handler(), consume.RecordInSession(c), log)
}
