package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	worker "github.com/openrath/rath/services/agent-worker/service"
	memory "github.com/openrath/rath/services/memory-svc/service"
	selector "github.com/openrath/rath/services/selector/service"
	ledger "github.com/openrath/rath/services/session-ledger/service"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// runner is one service: its role, and its body, which serves on a
// connection of that role until ctx ends, then returns nil, or returns an
// error early. The zero runner (no role) waits for ctx.
type runner struct {
	role auth.Role
	run  func(ctx context.Context, nc *nats.Conn) error
}

// idle stands in for the ledger of a group that runs none.
var idle = runner{run: func(ctx context.Context, _ *nats.Conn) error { <-ctx.Done(); return nil }}

// serve runs the ledger and the workers, each on its own connection, until
// ctx ends or one of them fails, which stops the others. The workers stop
// first, then the ledger they write through; each connection drains once
// its service returned; serve returns once all have, with their errors,
// each named by its role.
func serve(ctx context.Context, dial dial, first runner, workers ...runner) error {
	lctx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLedger()
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	runOn := func(ctx context.Context, r runner) error {
		nc, done, err := dial(r.role)
		if err != nil {
			return fmt.Errorf("%s: %w", r.role, err)
		}
		defer done()
		if err := r.run(ctx, nc); err != nil && r.role != "" {
			return fmt.Errorf("%s: %w", r.role, err)
		} else if err != nil {
			return err
		}
		return nil
	}
	ledgerDone := make(chan error, 1)
	go func() {
		err := runOn(lctx, first)
		stopWorkers() // a ledger that stops takes the workers with it
		ledgerDone <- err
	}()
	g, gctx := errgroup.WithContext(wctx)
	// idle keeps the group, and so the ledger, up until ctx ends when no
	// worker runs.
	for _, r := range append(workers, idle) {
		g.Go(func() error { return runOn(gctx, r) })
	}
	werr := g.Wait()
	stopLedger()
	return errors.Join(werr, <-ledgerDone)
}

// services returns what a runtime runs, one line each, keeping the roles
// asked for (every one when roles is empty): the ledger (idle when it is
// not asked for); the services the agent loop builds on (memory); and the
// agent loop (selector, agent worker, tool runner). Every service but the
// ledger folds sessions in st, the process's one cache.
func services(cfg Config, st *states, logFor func(auth.Role) *slog.Logger, roles []auth.Role) (first runner, base, loop []runner) {
	// Each runner gets its own copy of its configuration, made here: they
	// run concurrently.
	ledgerCfg, memoryCfg := cfg.LedgerConfig(), cfg.Memory
	memoryCfg.Replicas = cfg.Ledger.Store.Replicas
	first = runner{auth.RoleLedger, func(ctx context.Context, nc *nats.Conn) error {
		return ledger.Run(ctx, nc, ledgerCfg, logFor(auth.RoleLedger))
	}}
	base = []runner{
		{auth.RoleMemory, func(ctx context.Context, nc *nats.Conn) error {
			return st.with(auth.RoleMemory, func(ctx context.Context, c *fold.Cache) error {
				mcfg := memoryCfg
				mcfg.Cache = c
				return memory.Run(ctx, nc, mcfg, logFor(auth.RoleMemory))
			})(ctx)
		}},
	}
	selectorCfg, workerCfg := handOff(cfg, roles)
	loop = []runner{
		{auth.RoleSelector, func(ctx context.Context, nc *nats.Conn) error {
			return st.with(auth.RoleSelector, func(ctx context.Context, c *fold.Cache) error {
				scfg := selectorCfg
				scfg.Cache = c
				return selector.Run(ctx, nc, scfg, logFor(auth.RoleSelector))
			})(ctx)
		}},
		{auth.RoleAgentWorker, func(ctx context.Context, nc *nats.Conn) error {
			return st.with(auth.RoleAgentWorker, func(ctx context.Context, c *fold.Cache) error {
				wcfg := workerCfg
				wcfg.Cache = c
				return worker.Run(ctx, nc, wcfg, logFor(auth.RoleAgentWorker))
			})(ctx)
		}},
		{auth.RoleToolRunner, func(ctx context.Context, nc *nats.Conn) error {
			return st.with(auth.RoleToolRunner, func(ctx context.Context, c *fold.Cache) error {
				tcfg := cfg.ToolRunner
				tcfg.Cache = c
				return toolrunner.Run(ctx, nc, tcfg, logFor(auth.RoleToolRunner))
			})(ctx)
		}},
	}
	if len(roles) == 0 {
		return first, base, loop
	}
	asked := func(r runner) bool { return slices.Contains(roles, r.role) }
	if !asked(first) {
		first = idle
	}
	return first, slices.DeleteFunc(base, func(r runner) bool { return !asked(r) }),
		slices.DeleteFunc(loop, func(r runner) bool { return !asked(r) })
}

// handOff returns the selector's and the agent worker's configurations:
// when both run here (and cfg.NoHandOff is not set), the selector hands
// each turn request it appends to the worker's consumer (ADR 0038 item 5).
func handOff(cfg Config, roles []auth.Role) (selector.Config, worker.Config) {
	s, w := cfg.Selector, cfg.Worker
	both := len(roles) == 0 || slices.Contains(roles, auth.RoleSelector) && slices.Contains(roles, auth.RoleAgentWorker)
	if both && !cfg.NoHandOff {
		local := consume.NewLocal()
		s.HandOff, w.Local = local.Hand, local
	}
	return s, w
}
