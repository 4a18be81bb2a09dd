// Package runtime starts and stops a whole Rath: NATS (an embedded server,
// or one named by URL) and the session ledger, the memory service, the
// selector, the agent worker and the tool runner, each on a connection of
// its own role. It is the one place this wiring lives: rath up, rath demo,
// rath replay, the bench and the end-to-end tests all start it here.
//
// A runtime starts in two steps: Start runs the server, the ledger and the
// memory service, so that a caller (rath replay) can start a session and
// apply what follows its start before anything routes it; StartLoop then
// runs the agent loop (selector, agent worker, tool runner). Stop stops the
// loop first, then the ledger the loop writes through, then the server.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/client"
	ledger "github.com/openrath/rath/services/session-ledger/service"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// Runtime is a running Rath.
type Runtime struct {
	// URL is where clients connect.
	URL string
	// Server is the embedded server, nil when Config.NATSURL named one.
	Server *server.Server
	// Identities are the roles' credentials; nil when an external server
	// is used without a credentials directory.
	Identities *auth.Set
	// Conn is the caller's connection, of the client role (WithClient);
	// Creds is that role's credentials file ("" without credentials).
	Conn  *nats.Conn
	Creds string
	// Sandboxes is what the tool runner found about its sandbox backends
	// at the start (the zero value when no tool runner runs).
	Sandboxes toolrunner.Sandboxes
	// KeyFile and KeyID name the ledger's signing key ("" when the ledger
	// does not run, or was given its key).
	KeyFile, KeyID string

	cfg   Config
	log   *slog.Logger
	dial  dial
	ctx   context.Context
	loops []runner
	// states is the cache of folded session states the services share.
	states *states

	mu     sync.Mutex
	closed bool
	base   func() error
	loop   func() error
	// done closes when a group of services returned, on its own (one
	// failed, or the ledger stopped) or by Stop.
	done     chan struct{}
	doneOnce sync.Once
	// denied are the permission violations the connections saw: none in
	// a sound runtime (tests check). dmu guards it (mu is held while the
	// services stop).
	dmu    sync.Mutex
	denied []error
}

// Option configures Start.
type Option func(*options)

type options struct {
	client string
	log    *slog.Logger
	logFor func(auth.Role) *slog.Logger
	server *server.Server
	roles  []auth.Role
}

// WithClient opens a connection of the client role named name, the
// runtime's Conn.
func WithClient(name string) Option { return func(o *options) { o.client = name } }

// WithLogger logs the runtime and every service to log (default: nowhere).
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithServiceLogger gives each service its own logger (the bench keeps
// one log file per service).
func WithServiceLogger(logFor func(auth.Role) *slog.Logger) Option {
	return func(o *options) { o.logFor = logFor }
}

// WithServer connects in-process to ns, an embedded server of this process
// that Config.NATSURL names (a test's, the bench's).
func WithServer(ns *server.Server) Option { return func(o *options) { o.server = ns } }

// WithRoles runs only the services of these roles (default: every one):
// the bench runs the agent loop against its own ledger.
func WithRoles(roles ...auth.Role) Option { return func(o *options) { o.roles = roles } }

// Start checks the configuration and the tool runner's sandboxes, starts
// the embedded server (unless cfg names one) and runs the ledger and the
// memory service until Stop. The services run on until Stop even once ctx
// ends; ctx bounds the start. A default sandbox backend that does not work
// here returns a *SandboxError.
func Start(ctx context.Context, cfg Config, opts ...Option) (*Runtime, error) {
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logFor == nil {
		o.logFor = func(auth.Role) *slog.Logger { return o.log }
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	runs := func(role auth.Role) bool { return len(o.roles) == 0 || slices.Contains(o.roles, role) }
	r := &Runtime{cfg: cfg, log: o.log, ctx: context.WithoutCancel(ctx), done: make(chan struct{}),
		base: func() error { return nil }, loop: func() error { return nil }}
	// A default sandbox backend that does not work here stops the runtime
	// before it starts (auto falls back to local, with a warning).
	if runs(auth.RoleToolRunner) {
		sandboxes, err := toolrunner.CheckSandboxes(ctx, cfg.ToolRunner)
		if err != nil {
			return nil, fmt.Errorf("tool runner: %w", err)
		}
		if err := sandboxes.Err(); err != nil {
			return nil, &SandboxError{Sandboxes: sandboxes, Err: err}
		}
		r.Sandboxes = sandboxes
	}
	creds, err := cfg.identities()
	if err != nil {
		return nil, err
	}
	r.Identities, r.URL = creds, cfg.NATSURL
	if creds != nil && len(creds.Renamed) > 0 {
		o.log.Info("renamed the nkey seed files of an earlier Rath from .creds to .nk: NATS tools mean by .creds a user JWT and its seed (ADR 0013)",
			"dir", creds.Dir, "files", len(creds.Renamed))
	}
	ns := o.server
	stopServer := func() {}
	if cfg.NATSURL == "" {
		if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
		ecfg := cfg.Embedded()
		ecfg.Users = creds.Identities()
		if ns, err = embedded.Start(ecfg); err != nil {
			return nil, err
		}
		r.Server, r.URL = ns, ns.ClientURL()
		stopServer = func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			r.log.Info("NATS stopped")
		}
	}
	r.dial = dialer(r.URL, ns, creds, o.logFor, r.violated)
	fail := func(err error) (*Runtime, error) {
		stopServer()
		return nil, err
	}
	// The server and the ledger's identity answer before anything starts.
	if runs(auth.RoleLedger) {
		_, done, err := r.dial(auth.RoleLedger)
		if err != nil {
			return fail(err)
		}
		done()
		if cfg.Ledger.Ledger.Key == nil {
			r.KeyFile = cfg.LedgerConfig().KeyFile
			key, created, err := ledger.LoadOrCreateKey(r.KeyFile)
			if err != nil {
				return fail(err)
			}
			if created {
				o.logFor(auth.RoleLedger).Info("created the ledger's signing key", "key", r.KeyFile, "public", ledger.PublicKeyPath(r.KeyFile), "key_id", key.Public().ID)
			}
			r.cfg.Ledger.Ledger.Key, r.KeyID = key, key.Public().ID
		}
	}
	if o.client != "" {
		nc, done, err := r.connectClient(o.client, ns, creds)
		if err != nil {
			return fail(err)
		}
		r.Conn = nc
		prev := stopServer
		stopServer = func() { done(); prev() }
	}
	r.states = newStates(r.dial, r.cfg.StateCache(), o.log)
	first, base, loop := services(r.cfg, r.states, o.logFor, o.roles)
	r.loops = loop
	stopBase := r.run(first, base...)
	r.base = func() error {
		err := stopBase()
		r.states.close() // after every service that reads through it
		stopServer()
		return err
	}
	return r, nil
}

// SandboxError is Start's error when the tool runner's default sandbox
// backend does not work here; Sandboxes says which do.
type SandboxError struct {
	Sandboxes toolrunner.Sandboxes
	Err       error
}

func (e *SandboxError) Error() string { return "tool runner: " + e.Err.Error() }

func (e *SandboxError) Unwrap() error { return e.Err }

// connectClient opens the caller's connection, of the client role.
func (r *Runtime) connectClient(name string, ns *server.Server, creds *auth.Set) (*nats.Conn, func(), error) {
	opts := []nats.Option{nats.Name(name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				r.violated(auth.RoleClient, err)
			}
		})}
	opts = append(opts, client.KeepAlive()...)
	if creds != nil {
		r.Creds = creds.Path(auth.RoleClient)
		cred, _, err := auth.Options(r.Creds)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, cred...)
	}
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
	}
	nc, err := nats.Connect(r.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", r.URL, connectError(r.URL, creds, auth.RoleClient, err))
	}
	return nc, nc.Close, nil
}

// run serves the runners (the first as serve's ledger) until the returned
// stop is called, which waits for them and returns their error.
func (r *Runtime) run(first runner, rest ...runner) func() error {
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() {
		err := serve(ctx, r.dial, first, rest...)
		r.doneOnce.Do(func() { close(r.done) })
		done <- err
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// StartLoop starts the selector, the agent worker and the tool runner.
func (r *Runtime) StartLoop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.loop = r.run(idle, r.loops...)
}

// StopLoop stops the agent loop and returns its error; the ledger keeps
// answering.
func (r *Runtime) StopLoop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loop()
}

// States returns the cache of folded session states the services of this
// runtime share, nil until the first of them started (or when none runs):
// its Stats say what the process folded.
func (r *Runtime) States() *fold.Cache { return r.states.cache.Load() }

// Done is closed once a group of services returned: one failed (which
// stops the others of its group) or the ledger stopped, or Stop was called.
// rath up stops when it is.
func (r *Runtime) Done() <-chan struct{} { return r.done }

// Stop stops everything, the agent loop first, then the ledger and the
// memory service, then the caller's connection and the server, and waits.
// It returns the services' errors (each named by its role); a second Stop
// returns nil.
func (r *Runtime) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	lerr := r.loop()
	return errors.Join(lerr, r.base())
}

// violated records a permission violation of a service.
func (r *Runtime) violated(role auth.Role, err error) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	r.denied = append(r.denied, fmt.Errorf("%s: %w", role, err))
}

// Violations returns the permission violations the connections saw so far.
func (r *Runtime) Violations() []error {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	return slices.Clone(r.denied)
}

// ReloadUsers reloads the identities in the credentials directory into the
// embedded server, so that a tenant's user added with "rath creds add" can
// connect without a restart; it returns how many tenants' users there are.
// On an error the server keeps the identities it had.
func (r *Runtime) ReloadUsers() (int, error) {
	if r.Server == nil {
		return 0, errors.New("no embedded server: the identities are the external server's")
	}
	set, err := auth.Load(r.cfg.CredsPath())
	if err == nil {
		err = embedded.SetUsers(r.Server, r.cfg.Embedded(), set.Identities())
	}
	if err != nil {
		return 0, err
	}
	return len(set.Users()), nil
}
