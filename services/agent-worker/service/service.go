// Package service is the agent worker's composition root: event store, ledger
// client, providers and worker, wired onto a NATS connection.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/consume"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/fold"
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
	// Recorded, if not nil, is the log of an earlier run (every branch's
	// own events, in the order they were stored): agents of a live-model
	// provider (openai, anthropic) answer with that run's recorded answers,
	// the Nth call of an agent with its Nth answer, instead of calling the
	// model; scripted agents keep their scripts. Re-execution replay
	// (`rath replay`) sets it.
	Recorded []events.Stored
	// States bounds the cache of folded session states (ADR 0016).
	States fold.CacheConfig
	// ContextBytes bounds, approximately, the model contexts kept built
	// for the sessions' agents (ADR 0018); 0 is worker.DefaultContextBytes.
	ContextBytes int64
}

// Session labels that run a session's agents on another provider, model or
// endpoint than their workflow names (the what-if fork of `rath replay
// --from N --fork`); see docs/replay.md.
const (
	LabelProvider = worker.LabelProvider
	LabelModel    = worker.LabelModel
	LabelBaseURL  = worker.LabelBaseURL
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Keys: map[string]string{}, States: fold.CacheConfig{MaxBytes: fold.DefaultMaxBytes}, ContextBytes: worker.DefaultContextBytes}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.States.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ContextBytes < 0 {
		errs = append(errs, fmt.Errorf("context cache size must not be negative, got %d", c.ContextBytes))
	}
	return errors.Join(errs...)
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
	c, err := client.New(nc, client.As(events.Service("agent-worker")), client.WithSource(worker.Source))
	if err != nil {
		return fmt.Errorf("agent worker: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("agent worker config: %w", err)
	}
	wcfg := worker.Config{Keys: cfg.Keys, Retry: cfg.Retry, States: fold.NewCache(store, cfg.States),
		Contexts: worker.NewContexts(cfg.ContextBytes)}
	if cfg.Recorded != nil {
		wcfg.Override = recordedAnswers(cfg.Recorded)
	}
	w := worker.New(c, store, workflow.NewLibrary(store.GetBlob), wcfg, log)
	return consume.Run(ctx, nc, w.Handler(), w.GaveUp(consume.RecordInSession(c)), log)
}

// recordedAnswers answers the calls of live-model agents from a recorded
// log, one Recorded provider per agent shared by every session, so the
// agent's answers are used once each, in the order they were recorded.
// An agent without recorded answers fails its turn (ErrRecordingExhausted)
// rather than call a model.
func recordedAnswers(log []events.Stored) func(workflow.Agent) (provider.Provider, error) {
	byAgent := map[string]*provider.Recorded{}
	for agent, rs := range worker.RecordedAnswers(log) {
		byAgent[agent] = provider.FromRecorded(rs)
	}
	var mu sync.Mutex
	return func(a workflow.Agent) (provider.Provider, error) {
		if a.Provider == workflow.ProviderScripted {
			return nil, nil // its own script
		}
		mu.Lock()
		defer mu.Unlock()
		p, ok := byAgent[a.Name]
		if !ok {
			p = provider.FromRecorded(nil)
			byAgent[a.Name] = p
		}
		return p, nil
	}
}
