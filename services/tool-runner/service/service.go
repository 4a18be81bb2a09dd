// Package service is the tool runner's composition root: event store, ledger
// client, sandbox backend, MCP server pool and runner, wired onto a NATS
// connection.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/services/tool-runner/internal/mcp"
	"github.com/openrath/rath/services/tool-runner/internal/runner"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Config is the tool runner's configuration.
type Config struct {
	// Sandbox configures the backends' workspaces and commands: the local
	// backend's workspaces are under Sandbox.Root, the bwrap backend's
	// under Sandbox.Root/.bwrap (BwrapDir).
	Sandbox sandbox.Config
	// Backend is the sandbox backend of sessions whose workflow and agent
	// name none: BackendAuto, or a backend's name (which must then work
	// here, or Run fails).
	Backend string
	// Isolation configures the bwrap backend.
	Isolation sandbox.Isolation
	// Remote configures the remote backend, whose workspaces are under
	// Sandbox.Root/.remote (RemoteDir); an empty Remote.URL leaves the
	// backend out.
	Remote sandbox.Remote
	// AllowLocal lets a workflow or a move request put a session on the
	// local backend while the default isolates: without it, a session can
	// leave isolation only where the operator made local the default.
	AllowLocal bool
	// MCP configures the MCP servers of workflows; an empty MCP.Path is
	// Sandbox.Path.
	MCP mcp.Config
	// States bounds the cache of folded session states (ADR 0016).
	States fold.CacheConfig
	// Pool is the pool of tool runners this one serves (ADR 0042): a
	// session moved to pool P (rath to SESSION P/BACKEND) is taken by one
	// of P's runners. Empty: events.PoolDefault.
	Pool string
	// Cache, if not nil, is the cache of folded session states of the
	// process this service runs in, shared with the other services there
	// (ADR 0038), and States is not used; nil: the service builds its own,
	// bounded by States.
	Cache *fold.Cache
}

// DefaultConfig returns the defaults; Sandbox.Root must still be set.
func DefaultConfig() Config {
	return Config{Sandbox: sandbox.DefaultConfig(), Backend: BackendAuto, Isolation: sandbox.DefaultIsolation(), Remote: sandbox.DefaultRemote(),
		MCP: mcp.DefaultConfig(), States: fold.CacheConfig{MaxBytes: fold.DefaultMaxBytes}}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var pool error
	if c.Pool != "" {
		pool = runner.CheckPool(c.Pool)
	}
	return errors.Join(c.Sandbox.Validate(), checkBackend(c.Backend), c.Isolation.Validate(), c.checkRemote(), c.mcp().Validate(), c.States.Validate(), pool)
}

// mcp is the MCP configuration with its defaults applied.
func (c Config) mcp() mcp.Config {
	m := c.MCP
	if m.Path == "" {
		m.Path = c.Sandbox.Path
	}
	return m
}

// Run runs tool calls until ctx ends, then drains its consumers and stops
// the MCP servers it started.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("tool runner config: %w", err)
	}
	log = log.With("service", "tool-runner")
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(log))
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("tool runner: %w", err)
	}
	// No command reaches the bus's servers, whatever address they have.
	cfg.Sandbox.Net.Reserved = append(slices.Clip(cfg.Sandbox.Net.Reserved), natsEndpoints(ctx, nc)...)
	ready, sandboxes := openBackends(ctx, cfg)
	if err := sandboxes.Err(); err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	for _, b := range sandboxes.Backends {
		if !b.Works {
			log.Info("sandbox backend unavailable", "backend", b.Name, "why", b.Why)
		}
	}
	if sandboxes.Warning != "" {
		log.Warn(sandboxes.Warning)
	}
	gone := unavailable(sandboxes)
	if _, ok := ready[events.BackendLocal]; ok && sandboxes.Default != events.BackendLocal && !cfg.AllowLocal {
		// Any client of the bus could otherwise take its sessions out of
		// isolation with a workflow or a move request.
		delete(ready, events.BackendLocal)
		gone[events.BackendLocal] = &runner.NotAllowedError{Backend: events.BackendLocal, Default: sandboxes.Default}
	}
	var limits []string
	for _, b := range sandboxes.Backends {
		if _, ok := ready[b.Name]; ok {
			limits = append(limits, b.Name+": "+b.Limits)
		}
	}
	log.Info("sandbox backends", "default", sandboxes.Default, "asked", sandboxes.Asked, "ready", slices.Sorted(maps.Keys(ready)), "limits_set_by", strings.Join(limits, "; "))
	backends, err := runner.NewBackends(sandboxes.Default, ready, gone)
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	c, err := client.New(nc, client.As(events.Service("tool-runner")), client.WithSource(runner.Source))
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	mcfg := cfg.mcp()
	if mcfg.Contain == nil {
		// Listing a workflow's servers (at a session's start, before any
		// placement) runs them in a sandbox of the default backend, as
		// tenant "rath", which no real tenant can be: its host user and
		// cache are no tenant's sessions'.
		def := ready[sandboxes.Default]
		mcfg.Contain = func(cmd *exec.Cmd) error { return def.Contain(cmd, events.ServiceTenant) }
	}
	servers, err := mcp.NewPool(mcfg, log)
	if err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	defer servers.Close()
	r := runner.New(c, fold.CacheOr(cfg.Cache, store, cfg.States), store, backends, workflow.NewLibrary(store.GetBlob), servers, log)
	if err := r.SetPool(cmp.Or(cfg.Pool, events.PoolDefault)); err != nil {
		return fmt.Errorf("tool runner: %w", err)
	}
	if err := r.Register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("tool runner: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.ServeHandovers(gctx) })
	g.Go(func() error { return r.ServePool(gctx) })
	for _, h := range []consume.Handler{r.Handler(), r.ServersHandler()} {
		g.Go(func() error { return consume.Run(gctx, nc, h, r.GaveUp(consume.RecordInSession(c)), log) })
	}
	return g.Wait()
}

// unavailable are the backends that do not work here, with why.
func unavailable(s Sandboxes) map[string]error {
	out := map[string]error{}
	for _, b := range s.Backends {
		if !b.Works {
			out[b.Name] = errors.New(b.Why)
		}
	}
	return out
}
