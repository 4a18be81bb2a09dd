// Package service is the session ledger's composition root: it wires the
// event store and the ledger onto a NATS connection and runs them until the
// context ends.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// Config is the ledger service's whole configuration.
type Config struct {
	Store  eventstore.Config
	Ledger ledger.Config
	// KeyFile is the ledger's signing key (PKCS #8 PEM), created with its
	// public key beside it when missing; used unless Ledger.Key is set.
	KeyFile string
	// TrustedKeyFiles are public keys (PKIX PEM) of earlier rotations or of
	// other ledgers whose signed events this ledger accepts.
	TrustedKeyFiles []string
	// ApproversFile gives principals approver roles (auth.ApproversFile),
	// read at each approval decision; used unless Ledger.Approvers is set.
	// "": every principal holds every role (no role is enforced).
	ApproversFile string
}

// DefaultConfig returns the defaults for one embedded server.
func DefaultConfig() Config {
	return Config{Store: eventstore.DefaultConfig(), Ledger: ledger.DefaultConfig()}
}

// ConfigIn returns the defaults with the signing key kept under dir, at
// dir/keys/ledger.key, where `rath up` keeps it in its data directory.
func ConfigIn(dir string) Config {
	c := DefaultConfig()
	c.KeyFile = KeyFileIn(dir)
	return c
}

// KeyFileIn is where ConfigIn keeps the signing key under dir.
func KeyFileIn(dir string) string { return filepath.Join(dir, "keys", "ledger.key") }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Ledger.Key == nil && c.KeyFile == "" && !c.Ledger.Unsigned {
		errs = append(errs, errors.New("session ledger: a signing key file is required (--key): every stored event is signed"))
	}
	return errors.Join(append(errs, c.Store.Validate(), c.Ledger.Validate())...)
}

// Run creates the streams and buckets if needed and serves the ledger on nc
// until ctx ends, then drains. The connection stays the caller's.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("session ledger config: %w", err)
	}
	if cfg.Ledger.Unsigned {
		log.Warn("unsigned ledger: events are stored without signatures and no heads are recorded (the bench's baseline only)")
	}
	if cfg.Ledger.Key == nil && !cfg.Ledger.Unsigned {
		key, created, err := LoadOrCreateKey(cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("session ledger: %w", err)
		}
		if created {
			log.Info("created the ledger's signing key", "key", cfg.KeyFile, "public", PublicKeyPath(cfg.KeyFile), "key_id", key.Public().ID)
		}
		cfg.Ledger.Key = key
	}
	trusted, err := ReadPublicKeys(cfg.TrustedKeyFiles)
	if err != nil {
		return fmt.Errorf("session ledger: trusted keys (--trust): %w", err)
	}
	cfg.Ledger.Trusted = append(cfg.Ledger.Trusted, trusted...)
	if cfg.Ledger.Approvers == nil && cfg.ApproversFile != "" {
		cfg.Ledger.Approvers = auth.ApproverRoles(cfg.ApproversFile)
	} else if cfg.Ledger.Approvers == nil {
		log.Warn("no approvers file: every principal may decide every approval, whatever role it asks (--approvers)")
	}
	store, err := eventstore.Open(ctx, nc, cfg.Store, eventstore.WithLogger(log.With("service", "session-ledger")))
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
