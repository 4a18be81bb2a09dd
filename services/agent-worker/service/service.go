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
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
	selector "github.com/openrath/rath/services/selector/service"
)

// Config is the agent worker's configuration.
type Config struct {
	// Keys are API keys by provider ("openai", "anthropic"), from the
	// environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) at the edge.
	Keys  map[string]string
	Retry provider.Retry
	// AllowBaseURLs are the API endpoints, besides each provider's
	// official one, that agents' base URLs may name, as PROVIDER=URL
	// ("openai=http://127.0.0.1:8080/v1"): a request goes to a URL of the
	// same scheme, host and port whose path is the endpoint's or below it.
	// A base URL comes from a workflow or a session label, which any
	// client may write, and requests carry the keys: an agent naming
	// another endpoint fails its turn and nothing is sent.
	AllowBaseURLs []string
	// AllowLoopback allows every endpoint on a loopback address
	// (localhost, 127.0.0.0/8, ::1) for every provider: local model
	// servers. Any local process listening there then gets the keys.
	AllowLoopback bool
	// Recorded, if not nil, is the log of an earlier run (every branch's
	// own events, in the order they were stored): agents of a live-model
	// provider (openai, anthropic) answer with that run's recorded answers,
	// the Nth call of an agent with its Nth answer, instead of calling the
	// model; scripted agents keep their scripts. Re-execution replay
	// (`rath replay`) sets it.
	Recorded []events.Stored
	// States bounds the cache of folded session states (ADR 0016).
	States fold.CacheConfig
	// Cache, if not nil, is the cache of folded session states of the
	// process this service runs in, shared with the other services there
	// (ADR 0038), and States is not used; nil: the service builds its own,
	// bounded by States.
	Cache *fold.Cache
	// ContextBytes bounds, approximately, the model contexts kept built
	// for the sessions' agents (ADR 0018); 0 is worker.DefaultContextBytes.
	ContextBytes int64
	// Local, if set, takes the turn requests a selector of the same process
	// hands off (selector's Config.HandOff = Local.Hand), so that a turn
	// starts without waiting for its JetStream delivery (ADR 0038 item 5).
	Local *consume.Local
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
	if _, err := c.endpoints(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// endpoints are the endpoints the configuration allows.
func (c Config) endpoints() (provider.Endpoints, error) {
	e := provider.Endpoints{Loopback: c.AllowLoopback}
	var errs []error
	for _, s := range c.AllowBaseURLs {
		a, err := provider.ParseEndpoint(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--allow-base-url: %w", err))
			continue
		}
		e.Allowed = append(e.Allowed, a)
	}
	return e, errors.Join(errs...)
}

// KeysFromEnv reads the provider API keys with getenv.
func KeysFromEnv(getenv func(string) string) map[string]string {
	return map[string]string{
		string(provider.KindOpenAI):    getenv(provider.KeyEnv(provider.KindOpenAI)),
		string(provider.KindAnthropic): getenv(provider.KeyEnv(provider.KindAnthropic)),
	}
}

// Run takes agent turns, and records served agents' answers, until ctx
// ends, then drains.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	log = log.With("service", "agent-worker")
	w, c, err := build(ctx, nc, cfg, log)
	if err != nil || w == nil {
		return err
	}
	// Served agents' answers (pkg/agentapi) are recorded here too, by the
	// same turn code: gates run in the worker only.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Served(gctx, nc) })
	h := w.Handler()
	h.Local = cfg.Local
	g.Go(func() error { return consume.Run(gctx, nc, h, w.GaveUp(consume.RecordInSession(c)), log) })
	return g.Wait()
}

// WithSelector runs the agent worker on nc and the selector on snc, a
// connection of the selector's identity, in one process, the selector
// handing each turn request it appends to the worker's consumer (ADR 0038
// item 5): the agent-worker binary's --with-selector. Each keeps its
// durable consumer, so the process stands in for both services. They share
// one cache of folded states, bounded by cfg.States (unless cfg.Cache is
// given): one cache per process.
func WithSelector(ctx context.Context, nc, snc *nats.Conn, cfg Config, scfg selector.Config, log *slog.Logger) error {
	if cfg.Cache == nil {
		store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(log))
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			return fmt.Errorf("agent worker with selector: %w", err)
		}
		states := cfg.States
		states.Shared = true
		cfg.Cache = fold.NewCache(store, states)
	}
	local := consume.NewLocal()
	cfg.Local, scfg.HandOff, scfg.Cache = local, local.Hand, cfg.Cache
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return Run(gctx, nc, cfg, log) })
	g.Go(func() error { return selector.Run(gctx, snc, scfg, log) })
	return g.Wait()
}

// Served only records served agents' answers (pkg/agentapi) until ctx
// ends, taking no turn itself: for tests of a served agent that must not
// see the worker answer the other agents' turns.
func Served(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	log = log.With("service", "agent-worker")
	w, _, err := build(ctx, nc, cfg, log)
	if err != nil || w == nil {
		return err
	}
	return w.Served(ctx, nc)
}

// build attaches to the event store and builds the worker (nil if ctx
// ended first).
func build(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*worker.Worker, *client.Client, error) {
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(log))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil // stopped while starting
		}
		return nil, nil, fmt.Errorf("agent worker: %w", err)
	}
	c, err := client.New(nc, client.As(events.Service("agent-worker")), client.WithSource(worker.Source))
	if err != nil {
		return nil, nil, fmt.Errorf("agent worker: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("agent worker config: %w", err)
	}
	endpoints, err := cfg.endpoints()
	if err != nil {
		return nil, nil, fmt.Errorf("agent worker config: %w", err)
	}
	log.Info("model endpoints besides the official ones", "allow_base_url", cfg.AllowBaseURLs, "allow_loopback_endpoints", cfg.AllowLoopback)
	wcfg := worker.Config{Keys: cfg.Keys, Retry: cfg.Retry, Endpoints: endpoints, States: fold.CacheOr(cfg.Cache, store, cfg.States),
		Contexts: worker.NewContexts(cfg.ContextBytes)}
	if cfg.Recorded != nil {
		wcfg.Override = recordedAnswers(cfg.Recorded)
	}
	return worker.New(c, store, workflow.NewLibrary(store.GetBlob), wcfg, log), c, nil
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
