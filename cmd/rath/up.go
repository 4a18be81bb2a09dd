package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/bind"
	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/tracing"
	worker "github.com/openrath/rath/services/agent-worker/service"
	gwservice "github.com/openrath/rath/services/model-gateway/service"
	"github.com/openrath/rath/services/session-ledger/service"
)

func (a *app) upCmd() *cobra.Command {
	cfg := runtime.DefaultConfig()
	cfg.Ledger.Ledger.Name = fmt.Sprintf("rath-up-%d", os.Getpid())
	var (
		logLevel  slog.Level
		httpAddr  string
		httpHosts []string
		gw        = gwservice.DefaultConfig()
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run NATS with JetStream and every Rath service until interrupted",
		Long: `up starts an embedded NATS server with JetStream file storage under --data,
listening on --listen, and runs the session ledger, the memory service, the
selector, the agent worker and the tool runner on it until SIGINT or SIGTERM. With --nats (or
RATH_NATS_URL) it starts no server and runs the services against that one.
A --listen (or a named --http) address another process holds stops it at
once, naming the process and how to choose another port.
At start it prints which sandbox backends work here (as rath doctor does) and
the one sessions whose workflow names none are placed on (--sandbox).
API keys for live models come from OPENAI_API_KEY and ANTHROPIC_API_KEY, and
go only to each provider's official endpoint, or to one --allow-base-url or
--allow-loopback-endpoints allows: an agent naming another fails its turn.

With OTEL_EXPORTER_OTLP_ENDPOINT set it exports traces over OTLP (the standard
OTEL_* variables; nothing is exported without it).

It serves the web console (sessions, live timelines, lineage, approvals),
Prometheus metrics of the whole suite, /healthz and /readyz on --http (default
` + defaultHTTP + `; empty: off; if the default port is taken it says so and
goes on without). The console serves only a browser signed in: with the
one-time link rath up prints at the start (it acts as the client identity;
SIGHUP prints a new one), or with a tenant user's own credentials file. It answers
only requests for its own address (and --http-host names); metrics and health
stay open.

It serves the model gateway on --gateway (default 127.0.0.1:4280; empty: off):
agents built with other frameworks call it as OpenAI or Anthropic, with a token
from rath creds token add as their key, and each call is recorded in the
session their base URL names (docs/gateway.md).`,
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
			flush, err := tracing.Setup(cmd.Context(), "rath")
			if err != nil {
				return usageError{err}
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := flush(ctx); err != nil {
					log.Warn("spans not all exported", "err", err)
				}
			}()
			gw.WithKeys(os.Getenv)
			web := httpEndpoint{addr: httpAddr, required: cmd.Flags().Changed("http"), hosts: httpHosts}
			return up(cmd.Context(), cfg, web, gatewayEndpoint{cfg: gw, required: cmd.Flags().Changed("gateway")}, a.Stdout, log)
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
	f.Int64Var(&cfg.StateCacheBytes, "state-cache-bytes", cfg.StateCacheBytes, "bound, in bytes, of the one cache of folded session states that the services of this process share")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.ArchiveAfter, "retention-archive-after", 0, "archive closed sessions this long after they closed (0: only on request)")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.PurgeAfter, "retention-purge-after", 0, "purge archived sessions from the hot stream this long after they were archived (0: never)")
	f.DurationVar(&cfg.Ledger.Ledger.Retention.Interval, "retention-interval", 0, "how often the ledger's retention pass runs (0: every 10m)")
	cfg.Ledger.Ledger.Quotas.Flags(f)
	sandboxFlag(cmd, &cfg.ToolRunner.Backend)
	remoteFlags(cmd, &cfg.ToolRunner)
	f.BoolVar(&cfg.ToolRunner.AllowLocal, "sandbox-allow-local", false, "let workflows and the rath to command put sessions on the local backend (no isolation) while the default isolates")
	f.Var(&cfg.ToolRunner.Sandbox.Net.Allow, "sandbox-allow-net", "addresses, ranges and names (127.0.0.1:8080,10.0.0.0/8,db.internal:5432) that workflows' network lists may name beyond public destinations; loopback, private, link-local and metadata addresses are refused otherwise")
	f.StringVar(&cfg.ToolRunner.Sandbox.Root, "workspaces", cfg.ToolRunner.Sandbox.Root, "directory of the per-session tool workspaces")
	f.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	f.StringVar(&httpAddr, "http", defaultHTTP, "host:port of the web console, Prometheus /metrics, /healthz and /readyz (empty: off)")
	hostFlag(cmd, &httpHosts)
	allowEndpointFlags(cmd, &cfg.Worker.AllowBaseURLs, &cfg.Worker.AllowLoopback)
	f.StringVar(&gw.Listen, "gateway", gw.Listen, "host:port of the model gateway, which records agents built with any framework (docs/gateway.md; empty: off)")
	f.Func("gateway-upstream", "PROVIDER=URL: the provider (openai, anthropic) the model gateway asks for calls in its format, with OPENAI_API_KEY or ANTHROPIC_API_KEY (defaults: the official APIs); repeatable", func(s string) error {
		u, err := gateway.ParseUpstream(s)
		gw.Gateway.Upstreams = gateway.Set(gw.Gateway.Upstreams, u)
		return err
	})
	return cmd
}

// allowEndpointFlags defines the flags that allow the agent worker's model
// endpoints besides the official ones (rath up, rath demo).
func allowEndpointFlags(cmd *cobra.Command, urls *[]string, loopback *bool) {
	f := cmd.Flags()
	f.StringArrayVar(urls, "allow-base-url", nil, "PROVIDER=URL: an API endpoint that agents of PROVIDER (openai, anthropic) may name as base_url besides the official one; requests to it carry the provider's key (repeatable)")
	f.BoolVar(loopback, "allow-loopback-endpoints", false, "let agents name any endpoint on a loopback address (localhost, 127.0.0.0/8, ::1): local model servers, which then get the keys")
}

// up starts NATS (unless cfg names one) and every service, prints where
// clients connect, runs until ctx ends or a service fails and shuts
// everything down in order: services drain, then their connections, then
// the server.
func up(ctx context.Context, cfg runtime.Config, web httpEndpoint, gw gatewayEndpoint, out io.Writer, log *slog.Logger) error {
	if cfg.NATSURL == "" {
		if err := checkListen("NATS", "--listen", cfg.Listen); err != nil {
			if errors.As(err, new(*bind.InUseError)) {
				err = fmt.Errorf("%w (clients then connect with --nats nats://%s or RATH_NATS_URL)", err, nextPort(cfg.Listen))
			}
			return err
		}
	}
	if web.required && web.addr != "" {
		if err := checkListen("the console", "--http", web.addr); err != nil {
			return err
		}
	}
	if gw.required && gw.cfg.Listen != "" {
		if err := checkListen("the model gateway", "--gateway", gw.cfg.Listen); err != nil {
			return err
		}
	}
	rt, err := runtime.Start(ctx, cfg, runtime.WithLogger(log))
	var sandboxErr *runtime.SandboxError
	if errors.As(err, &sandboxErr) {
		printSandboxes(out, "rath", sandboxErr.Sandboxes)
	}
	if err != nil {
		return err
	}
	if ns := rt.Server; ns != nil {
		creds := rt.Identities
		fmt.Fprintf(out, "rath: NATS with JetStream at %s (data %s)\n", rt.URL, cfg.Data)
		fmt.Fprintf(out, "rath: credentials in %s (%s for clients, %s for operators)\n",
			creds.Dir, auth.FileName(auth.RoleClient), auth.FileName(auth.RoleAdmin))
		if n := len(creds.Users()); n > 0 {
			fmt.Fprintf(out, "rath: %s in %s\n", plural(n, "tenant user", "tenant users"), filepath.Join(creds.Dir, auth.TenantsDir))
		}
	} else {
		fmt.Fprintf(out, "rath: using NATS at %s\n", rt.URL)
	}
	log.Info("rath up", "nats", rt.URL, "ledger", cfg.Ledger.Ledger.Name, "authenticated", rt.Identities != nil)
	if rt.KeyID != "" {
		fmt.Fprintf(out, "rath: events signed with key %s (%s; auditors pin %s)\n", rt.KeyID, rt.KeyFile, service.PublicKeyPath(rt.KeyFile))
	}
	var newLink func() // prints a new sign-in link to the console
	if web.addr != "" && !web.required {
		if err := checkListen("the console", "--http", web.addr); err != nil {
			fmt.Fprintf(out, "rath: no console, metrics or health endpoint: %v, or --http \"\" for none\n", err)
			web.addr = ""
		}
	}
	if web.addr != "" {
		w, err := serveWeb(rt, web, log)
		switch {
		case err == nil:
			defer w.stop()
			fmt.Fprintf(out, "rath: console at http://%s/\n", w.addr)
			newLink = func() { w.printLink(out, "rath", "") }
			newLink()
			fmt.Fprintf(out, "rath: metrics and health at http://%s/metrics, /healthz, /readyz\n", w.addr)
		case web.required:
			_ = rt.Stop()
			return err
		default:
			fmt.Fprintf(out, "rath: no console, metrics or health endpoint: %v (choose another with --http, or --http \"\" for none)\n", err)
		}
	}
	if gw.cfg.Listen != "" {
		stop, err := serveGateway(rt, gw, out, log)
		if err != nil {
			_ = rt.Stop()
			return err
		}
		defer stop()
	}
	if rt.Server != nil || newLink != nil {
		defer onHangup(ctx, rt, newLink, log)()
	}
	printSandboxes(out, "rath", rt.Sandboxes)
	rt.StartLoop()
	select {
	case <-ctx.Done():
	case <-rt.Done(): // a service failed, or the ledger stopped
	}
	if err := rt.Stop(); err != nil {
		return err
	}
	log.Info("services stopped")
	return nil
}

// gatewayEndpoint is where rath up serves the model gateway; required when
// the flag named it (a port taken then stops rath up).
type gatewayEndpoint struct {
	cfg      gwservice.Config
	required bool
}

// serveGateway serves the model gateway until the returned stop. A default
// port that is taken, or a runtime without users' credentials, is said and
// gone on without; a named port that fails stops rath up.
func serveGateway(rt *runtime.Runtime, gw gatewayEndpoint, out io.Writer, log *slog.Logger) (stop func(), err error) {
	none := func(why error) (func(), error) {
		if gw.required {
			return nil, why
		}
		fmt.Fprintf(out, "rath: no model gateway: %v (choose another with --gateway, or --gateway \"\" for none)\n", why)
		return func() {}, nil
	}
	if rt.Identities == nil {
		return none(errors.New("the gateway acts as each caller with the caller's credentials, and this runtime has none"))
	}
	gw.cfg.CredsDir = rt.Identities.Dir
	ln, err := gwservice.Listen(gw.cfg)
	if err != nil {
		if cerr := checkListen("the model gateway", "--gateway", gw.cfg.Listen); cerr != nil {
			err = cerr // who holds the port, and the flag that chooses another
		}
		return none(err)
	}
	bus := gwservice.Bus{URL: rt.URL}
	if rt.Server != nil {
		// A user added with rath creds add since the start connects
		// without a SIGHUP: the gateway reloads the users once.
		bus.Options = []nats.Option{nats.InProcessServer(rt.Server)}
		bus.Reload = func() error {
			_, err := rt.ReloadUsers()
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gwservice.Serve(ctx, ln, bus, gw.cfg, log) }()
	fmt.Fprintf(out, "rath: model gateway at http://%s/s/<session>/v1 (OpenAI) and http://%s/s/<session> (Anthropic); API key: a token from rath creds token add\n", ln.Addr(), ln.Addr())
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Error("model gateway stopped", "err", err)
		}
	}, nil
}

// checkListen reports at once that what (NATS, the console) cannot listen
// on addr, the address of flag: by whom it is taken, when another process
// holds it, and the flag's value that chooses the next port. It is rath
// up's check before anything starts; the server's own listen still reports
// a port taken in between.
func checkListen(what, flag, addr string) error {
	err := bind.Check(addr)
	var inUse *bind.InUseError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inUse):
		return fmt.Errorf("%s cannot listen on %w: stop it, or choose another port with %s %s", what, err, flag, nextPort(addr))
	}
	return fmt.Errorf("%s cannot listen on %s (%s): %w", what, addr, flag, err)
}

// nextPort is addr with the port after its own, for a message to suggest.
func nextPort(addr string) string {
	host, p, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil || n <= 0 || n >= 65535 {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1))
}

// startRuntime starts a private runtime with a connection of the client
// role named name (rath demo, rath replay); a configuration that does not
// validate is a usage error.
func startRuntime(ctx context.Context, cfg runtime.Config, name string, log *slog.Logger) (*runtime.Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	return runtime.Start(ctx, cfg, runtime.WithClient(name), runtime.WithLogger(log))
}

// stopLogged stops a private runtime, logging what its services returned.
func stopLogged(rt *runtime.Runtime, log *slog.Logger) func() {
	return func() {
		if err := rt.Stop(); err != nil {
			log.Error("services stopped with an error", "err", err)
		}
	}
}

// onHangup, on each SIGHUP, reloads the identities of the credentials
// directory into the embedded server, so that a tenant's user added with
// "rath creds add" can connect without a restart, and prints a new sign-in
// link to the console (newLink, when it is served). It returns a function
// that stops it.
func onHangup(ctx context.Context, rt *runtime.Runtime, newLink func(), log *slog.Logger) func() {
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
			if newLink != nil {
				newLink()
			}
			if rt.Server == nil {
				continue
			}
			n, err := rt.ReloadUsers()
			if err != nil {
				log.Error("identities not reloaded; the server keeps the ones it had", "dir", rt.Identities.Dir, "err", err)
				continue
			}
			log.Info("identities reloaded", "dir", rt.Identities.Dir, "tenant_users", n)
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
