// Package service is the session ledger's composition root: it wires the
// event store and the ledger onto a NATS connection and runs them until the
// context ends.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// Config is the ledger service's whole configuration.
type Config struct {
	Store  eventstore.Config
	Ledger ledger.Config
}

// DefaultConfig returns the defaults for one embedded server.
func DefaultConfig() Config {
	return Config{Store: eventstore.DefaultConfig(), Ledger: ledger.DefaultConfig()}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	return errors.Join(c.Store.Validate(), c.Ledger.Validate())
}

// Run creates the streams and buckets if needed and serves the ledger on nc
// until ctx ends, then drains. The connection stays the caller's.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("session ledger config: %w", err)
	}
	store, err := eventstore.Open(ctx, nc, cfg.Store)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("session ledger: %w", err)
	}
	l, err := ledger.New(store, cfg.Ledger, log.With("service", "session-ledger"))
	if err != nil {
		return fmt.Errorf("session ledger: %w", err)
	}
	return l.Serve(ctx, nc)
}
