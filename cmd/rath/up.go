package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/pkg/auth"
	"github.com/openrath/rath/pkg/embedded"
	worker "github.com/openrath/rath/services/agent-worker/service"
	memory "github.com/openrath/rath/services/memory-svc/service"
	selector "github.com/openrath/rath/services/selector/service"
	"github.com/openrath/rath/services/session-ledger/service"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// Fsync policies of the embedded server (--sync).
const (
	syncAlways   = "always"
	syncInterval = "interval"
)

// upConfig is the whole configuration of `rath up`, read once from its flags.
type upConfig struct {
	// NATSURL names an existing NATS server; empty starts the embedded one.
	NATSURL string
	// CredsDir holds one credentials file per role (default <Data>/creds).
	CredsDir string
	// Embedded server: JetStream storage, client address, fsync policy.
	Data         string
	Listen       string
	Sync         string
	SyncInterval time.Duration
	// Ledger configures the session ledger; the others the workers.
	Ledger     service.Config
	Selector   selector.Config
	Worker     worker.Config
	ToolRunner toolrunner.Config
	Memory     memory.Config
}

func defaultUpConfig() upConfig {
	return upConfig{
		Data:         "./.rath/data",
		Listen:       "127.0.0.1:4222",
		Sync:         syncInterval,
		SyncInterval: 2 * time.Minute,
		Ledger:       service.DefaultConfig(),
		Selector:     selector.DefaultConfig(),
		Worker:       worker.DefaultConfig(),
		ToolRunner:   toolRunnerDefaults(),
		Memory:       memory.DefaultConfig(),
	}
}

func toolRunnerDefaults() toolrunner.Config {
	c := toolrunner.DefaultConfig()
	c.Sandbox.Root = "./.rath/workspaces"
	c.Seeds = "."
	c.Sandbox.Path = os.Getenv("PATH")
	c.Sandbox.Env = toolrunner.SandboxEnv(toolrunner.PassEnvDefault, os.Getenv)
	return c
}

// Validate reports every problem at once.
func (c upConfig) Validate() error {
	errs := []error{c.ledger().Validate(), c.Worker.Validate(), c.ToolRunner.Validate()}
	if c.NATSURL == "" {
		if c.Sync != syncAlways && c.Sync != syncInterval {
			errs = append(errs, fmt.Errorf("--sync must be %s or %s, got %q", syncAlways, syncInterval, c.Sync))
		}
		errs = append(errs, c.embedded().Validate())
	}
	return errors.Join(errs...)
}

// ledger is the ledger's configuration, its signing key kept in the data
// directory (<data>/keys/ledger.key) unless one is named.
func (c upConfig) ledger() service.Config {
	l := c.Ledger
	if l.KeyFile == "" && l.Ledger.Key == nil {
		l.KeyFile = service.KeyFileIn(c.Data)
	}
	return l
}

func (c upConfig) embedded() embedded.Config {
	return embedded.Config{
		Listen:       c.Listen,
		StoreDir:     c.Data,
		SyncAlways:   c.Sync == syncAlways,
		SyncInterval: c.SyncInterval,
	}
}

func (a *app) upCmd() *cobra.Command {
	cfg := defaultUpConfig()
	cfg.Ledger.Ledger.Name = fmt.Sprintf("rath-up-%d", os.Getpid())
	var logLevel slog.Level
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run NATS with JetStream and every Rath service until interrupted",
		Long: `up starts an embedded NATS server with JetStream file storage under --data,
listening on --listen, and runs the session ledger, the memory service, the
selector, the agent worker and the tool runner on it until SIGINT or SIGTERM. With --nats (or
RATH_NATS_URL) it starts no server and runs the services against that one.
At start it prints which sandbox backends work here (as rath doctor does) and
the one sessions whose workflow names none are placed on (--sandbox).
API keys for live models come from OPENAI_API_KEY and ANTHROPIC_API_KEY, and
go only to each provider's official endpoint, or to one --allow-base-url or
--allow-loopback-endpoints allows: an agent naming another fails its turn.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("nats") || a.NATSURL != "" {
				cfg.NATSURL = a.url
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			cfg.Worker.Keys = worker.KeysFromEnv(os.Getenv)
			log := slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: logLevel}))
			return up(cmd.Context(), cfg, a.Stdout, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Data, "data", cfg.Data, "JetStream storage directory of the embedded server")
	f.StringVar(&cfg.CredsDir, "creds-dir", "", "directory of the services' credentials files, one per role (default <data>/creds; created with the embedded server)")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "host:port the embedded server listens on (port 0: any free port)")
	f.StringVar(&cfg.Sync, "sync", cfg.Sync, "fsync every write before the ack (always) or every --sync-interval (interval)")
	f.DurationVar(&cfg.SyncInterval, "sync-interval", cfg.SyncInterval, "fsync interval with --sync interval")
	f.IntVar(&cfg.Ledger.Store.Replicas, "replicas", cfg.Ledger.Store.Replicas, "replicas per stream and bucket (3 on a cluster)")
	f.Uint64Var(&cfg.Ledger.Ledger.SnapshotEvery, "snapshot-every", cfg.Ledger.Ledger.SnapshotEvery, "store a state snapshot every K events of a session")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.ArchiveAfter, "retention-archive-after", 0, "archive closed sessions this long after they closed (0: only on request)")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.PurgeAfter, "retention-purge-after", 0, "purge archived sessions from the hot stream this long after they were archived (0: never)")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.Interval, "retention-interval", 0, "how often the ledger's retention pass runs (0: every 10m)")
	sandboxFlag(cmd, &cfg.ToolRunner.Backend)
	f.BoolVar(&cfg.ToolRunner.AllowLocal, "sandbox-allow-local", false, "let workflows and the rath to command put sessions on the local backend (no isolation) while the default isolates")
	f.StringVar(&cfg.ToolRunner.Sandbox.Root, "workspaces", cfg.ToolRunner.Sandbox.Root, "directory of the per-session tool workspaces")
	f.StringVar(&cfg.ToolRunner.Seeds, "seeds", cfg.ToolRunner.Seeds, "directory that sessions' workspace seeds are named under")
	f.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	allowEndpointFlags(cmd, &cfg.Worker.AllowBaseURLs, &cfg.Worker.AllowLoopback)
	return cmd
}

// allowEndpointFlags defines the flags that allow the agent worker's model
// endpoints besides the official ones (rath up, rath demo).
func allowEndpointFlags(cmd *cobra.Command, urls *[]string, loopback *bool) {
	f := cmd.Flags()
	f.StringArrayVar(urls, "allow-base-url", nil, "PROVIDER=URL: an API endpoint that agents of PROVIDER (openai, anthropic) may name as base_url besides the official one; requests to it carry the provider's key (repeatable)")
	f.BoolVar(loopback, "allow-loopback-endpoints", false, "let agents name any endpoint on a loopback address (localhost, 127.0.0.0/8, ::1): local model servers, which then get the keys")
}

// up starts NATS (unless cfg names one), prints where clients connect, runs
// the services until ctx ends and shuts everything down in order: services
// drain, then their connections, then the server.
func up(ctx context.Context, cfg upConfig, out io.Writer, log *slog.Logger) error {
	var (
		ns  *server.Server
		url = cfg.NATSURL
	)
	// Which sandboxes work here, before anything starts: a default backend
	// that does not work stops rath up, and a development one is a warning
	// (printed once NATS is up).
	sandboxes, err := toolrunner.CheckSandboxes(ctx, cfg.ToolRunner)
	if err != nil {
		return err
	}
	if err := sandboxes.Err(); err != nil {
		printSandboxes(out, "rath", sandboxes)
		return fmt.Errorf("tool runner: %w", err)
	}
	creds, err := cfg.identities()
	if err != nil {
		return err
	}
	if url == "" {
		if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		ecfg := cfg.embedded()
		ecfg.Users = creds.Identities()
		if ns, err = embedded.Start(ecfg); err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			log.Info("NATS stopped")
		}()
		url = ns.ClientURL()
		fmt.Fprintf(out, "rath: NATS with JetStream at %s (data %s)\n", url, cfg.Data)
		fmt.Fprintf(out, "rath: credentials in %s (%s for clients, %s for operators)\n",
			creds.Dir, auth.FileName(auth.RoleClient), auth.FileName(auth.RoleAdmin))
		if n := len(creds.Users()); n > 0 {
			fmt.Fprintf(out, "rath: %s in %s\n", plural(n, "tenant user", "tenant users"), filepath.Join(creds.Dir, auth.TenantsDir))
		}
		defer reloadUsersOnHangup(ctx, ns, ecfg, creds.Dir, log)()
	}
	dial := dialer(url, ns, creds, log, nil)
	// Check the server and the ledger's identity before starting anything.
	_, done, err := dial(auth.RoleLedger)
	if err != nil {
		return err
	}
	done()
	if ns == nil {
		fmt.Fprintf(out, "rath: using NATS at %s\n", url)
	}
	log.Info("rath up", "nats", url, "ledger", cfg.Ledger.Ledger.Name, "authenticated", creds != nil)
	if cfg.Ledger.Ledger.Key == nil {
		keyFile := cfg.ledger().KeyFile
		key, _, err := service.LoadOrCreateKey(keyFile)
		if err != nil {
			return err
		}
		cfg.Ledger.Ledger.Key = key
		fmt.Fprintf(out, "rath: events signed with key %s (%s; auditors pin %s)\n", key.Public().ID, keyFile, service.PublicKeyPath(keyFile))
	}
	printSandboxes(out, "rath", sandboxes)

	ledger, base, loop := services(cfg, log)
	err = serve(ctx, dial, ledger, append(base, loop...)...)
	if err == nil {
		log.Info("services stopped")
	}
	return err
}

// identities returns the credentials of every role: created on first start
// of the embedded server and reused after; with --nats, read from the
// credentials directory if it exists (nil, connecting without credentials,
// if it does not).
func (c upConfig) identities() (*auth.Set, error) {
	dir := c.credsDir()
	if c.NATSURL == "" {
		set, err := auth.Ensure(dir)
		if err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
		return set, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	set, err := auth.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("credentials of the services in %s: %w", dir, err)
	}
	return set, nil
}

// credsDir is where the identities' credentials files are.
func (c upConfig) credsDir() string {
	if c.CredsDir != "" {
		return c.CredsDir
	}
	return filepath.Join(c.Data, "creds")
}

// dial connects as a role and returns the connection with a function that
// drains it and waits until it is closed. The empty role gets no connection.
type dial func(role auth.Role) (*nats.Conn, func(), error)

// dialer returns how the services of rath up connect: in-process to the
// embedded server ns (or to url), each with its own role's credentials, so
// that the server enforces each service's permissions. Errors NATS reports
// are logged with the role; permission violations also go to violated, if
// set.
func dialer(url string, ns *server.Server, creds *auth.Set, log *slog.Logger, violated func(auth.Role, error)) dial {
	return func(role auth.Role) (*nats.Conn, func(), error) {
		if role == "" {
			return nil, func() {}, nil
		}
		closed := make(chan struct{})
		rlog := log.With("role", string(role))
		opts := []nats.Option{
			nats.Name("rath-" + string(role)), nats.MaxReconnects(-1),
			nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				if violated != nil && errors.Is(err, nats.ErrPermissionViolation) {
					violated(role, err)
				}
				if sub != nil {
					rlog.Error("NATS error", "subject", sub.Subject, "err", err)
					return
				}
				rlog.Error("NATS error", "err", err)
			}),
		}
		if creds != nil {
			cred, _, err := auth.Options(creds.Path(role))
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, cred...)
		}
		if ns != nil {
			opts = append(opts, nats.InProcessServer(ns))
		}
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return nil, nil, connectError(url, creds, role, err)
		}
		return nc, func() {
			if err := nc.Drain(); err != nil {
				nc.Close()
			}
			<-closed
		}, nil
	}
}

// connectError explains why a service could not connect.
func connectError(url string, creds *auth.Set, role auth.Role, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		if creds == nil {
			return &deniedError{fmt.Sprintf("NATS at %s refused %s: it needs credentials, and there is no credentials directory (--creds-dir)", url, role), err}
		}
		return &deniedError{fmt.Sprintf("NATS at %s refused %s's credentials %s: is the server configured with them (deploy/nats-server.conf)?", url, role, creds.Path(role)), err}
	}
	return &unreachableError{"no NATS server at " + url, err}
}

// runner is one service of `rath up`: its role, and its body, which serves
// on a connection of that role until ctx ends, then returns nil, or returns
// an error early.
type runner struct {
	role auth.Role
	run  func(ctx context.Context, nc *nats.Conn) error
}

// serve runs the ledger and the workers, each on its own connection, until
// ctx ends or one of them fails, which stops the others. The workers stop
// first, then the ledger they write through; each connection drains once
// its service returned; serve returns once all have.
func serve(ctx context.Context, dial dial, ledger runner, workers ...runner) error {
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
		return r.run(ctx, nc)
	}
	ledgerDone := make(chan error, 1)
	go func() {
		err := runOn(lctx, ledger)
		stopWorkers() // a ledger that stops takes the workers with it
		ledgerDone <- err
	}()
	g, gctx := errgroup.WithContext(wctx)
	for _, r := range workers {
		g.Go(func() error { return runOn(gctx, r) })
	}
	werr := g.Wait()
	stopLedger()
	return errors.Join(werr, <-ledgerDone)
}

// services returns what `rath up` runs, one line each: the ledger; the
// services the agent loop builds on (memory); and the agent loop (selector,
// agent worker, tool runner). A private runtime (rath demo, rath replay)
// starts the loop when it is ready to be routed.
func services(cfg upConfig, log *slog.Logger) (ledger runner, base, loop []runner) {
	// Each runner gets its own copy of its configuration, made here: they
	// run concurrently.
	ledgerCfg, memoryCfg := cfg.ledger(), cfg.Memory
	memoryCfg.Replicas = cfg.Ledger.Store.Replicas
	ledger = runner{auth.RoleLedger, func(ctx context.Context, nc *nats.Conn) error { return service.Run(ctx, nc, ledgerCfg, log) }}
	base = []runner{
		{auth.RoleMemory, func(ctx context.Context, nc *nats.Conn) error { return memory.Run(ctx, nc, memoryCfg, log) }},
	}
	loop = []runner{
		{auth.RoleSelector, func(ctx context.Context, nc *nats.Conn) error { return selector.Run(ctx, nc, cfg.Selector, log) }},
		{auth.RoleAgentWorker, func(ctx context.Context, nc *nats.Conn) error { return worker.Run(ctx, nc, cfg.Worker, log) }},
		{auth.RoleToolRunner, func(ctx context.Context, nc *nats.Conn) error { return toolrunner.Run(ctx, nc, cfg.ToolRunner, log) }},
	}
	return ledger, base, loop
}

// reloadUsersOnHangup reloads the identities in dir into the embedded
// server on each SIGHUP, so that a tenant's user added with "rath creds add"
// can connect without a restart. It returns a function that stops it.
func reloadUsersOnHangup(ctx context.Context, ns *server.Server, cfg embedded.Config, dir string, log *slog.Logger) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			set, err := auth.Load(dir)
			if err == nil {
				err = embedded.SetUsers(ns, cfg, set.Identities())
			}
			if err != nil {
				log.Error("identities not reloaded; the server keeps the ones it had", "dir", dir, "err", err)
				continue
			}
			log.Info("identities reloaded", "dir", dir, "tenant_users", len(set.Users()))
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
