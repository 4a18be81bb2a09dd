package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/auth"
	"github.com/openrath/rath/pkg/embedded"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// runtime is a private Rath: an embedded NATS server with JetStream and the
// services `rath up` runs, in this process. It starts in two steps: the
// ledger and the memory service first, so that a caller (rath replay) can
// start its root session and apply the inputs that follow the start before
// anything routes it; then, with startLoop, the agent loop (selector, agent
// worker, tool runner).
type runtime struct {
	url string
	// nc is a connection of the client role: what the caller uses; creds is
	// that role's credentials file, for rath commands against the runtime.
	nc     *nats.Conn
	creds  string
	dial   dial
	log    *slog.Logger
	ctx    context.Context
	loops  []runner
	base   func()
	loop   func()
	mu     sync.Mutex
	closed bool
	// denied are the permission violations the services' connections saw:
	// none in a sound runtime (tests check). dmu guards it (mu is held
	// while the services stop).
	dmu    sync.Mutex
	denied []error
	// sandboxes is what the tool runner found about its sandbox backends
	// when the runtime started.
	sandboxes toolrunner.Sandboxes
}

// violated records a permission violation of a service.
func (r *runtime) violated(role auth.Role, err error) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	r.denied = append(r.denied, fmt.Errorf("%s: %w", role, err))
}

// violations returns the permission violations the services saw so far.
func (r *runtime) violations() []error {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	return slices.Clone(r.denied)
}

// startRuntime starts the server, the ledger and the memory service, each
// service connected with its own role's identity (kept under cfg's creds
// directory); name names the caller's connection, of the client role.
func startRuntime(ctx context.Context, cfg upConfig, name string, log *slog.Logger) (*runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	// A default sandbox backend that does not work here stops the runtime
	// before it starts (auto falls back to local, with a warning).
	sandboxes, err := toolrunner.CheckSandboxes(ctx, cfg.ToolRunner)
	if err == nil {
		err = sandboxes.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("tool runner: %w", err)
	}
	creds, err := auth.Ensure(cfg.credsDir())
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	ecfg := cfg.embedded()
	ecfg.Users = creds.Identities()
	ns, err := embedded.Start(ecfg)
	if err != nil {
		return nil, err
	}
	r := &runtime{url: ns.ClientURL(), creds: creds.Path(auth.RoleClient), log: log, ctx: context.WithoutCancel(ctx), loop: func() {}, sandboxes: sandboxes}
	r.dial = dialer(ns.ClientURL(), ns, creds, log, r.violated)
	cred, _, err := auth.Options(creds.Path(auth.RoleClient))
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	nc, err := nats.Connect(ns.ClientURL(), append(cred, nats.InProcessServer(ns), nats.Name(name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				r.violated(auth.RoleClient, err)
			}
		}))...)
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("connect to the embedded server: %w", err)
	}
	ledger, base, loop := services(cfg, log)
	r.nc, r.loops = nc, loop
	stopBase := r.run(ledger, base...)
	r.base = func() {
		stopBase()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	return r, nil
}

// run serves the runners (the first as serve's ledger) until the returned
// stop is called, which waits for them.
func (r *runtime) run(first runner, rest ...runner) func() {
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, r.dial, first, rest...) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.log.Error("services stopped with an error", "err", err)
			}
		})
	}
}

// startLoop starts the selector, the agent worker and the tool runner.
func (r *runtime) startLoop() {
	idle := runner{run: func(ctx context.Context, _ *nats.Conn) error { <-ctx.Done(); return nil }}
	r.loop = r.run(idle, r.loops...)
}

// stopLoop stops the agent loop; the ledger keeps answering.
func (r *runtime) stopLoop() { r.loop() }

// stop stops everything, the agent loop first, then the connection and the
// server, and waits.
func (r *runtime) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	r.loop()
	r.base()
}
