// Package service is the agent worker's composition root: event store, ledger
// client, providers and worker, wired onto a NATS connection.
package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/consume"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/workflow"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// Config is the agent worker's configuration.
type Config struct {
	// Keys are API keys by provider ("openai", "anthropic"), from the
	// environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) at the edge.
	Keys  map[string]string
	Retry provider.Retry
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Keys: map[string]string{}}
}

// KeysFromEnv reads the provider API keys with getenv.
func KeysFromEnv(getenv func(string) string) map[string]string {
	return map[string]string{
		string(provider.KindOpenAI):    getenv("OPENAI_API_KEY"),
		string(provider.KindAnthropic): getenv("ANTHROPIC_API_KEY"),
	}
}

// Run takes agent turns until ctx ends, then drains.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	log = log.With("service", "agent-worker")
	store, err := eventstore.AttachWait(ctx, nc)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("agent worker: %w", err)
	}
	c, err := client.New(nc, client.WithSource(worker.Source))
	if err != nil {
		return fmt.Errorf("agent worker: %w", err)
	}
	w := worker.New(c, store, workflow.NewLibrary(store.GetBlob), worker.Config{Keys: cfg.Keys, Retry: cfg.Retry}, log)
	return consume.Run(ctx, nc, w.Handler(), w.GaveUp(consume.RecordInSession(c)), log)
}
