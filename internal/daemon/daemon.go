// Package daemon runs one Rath service as its own process: it reads the NATS
// URL (--nats, or RATH_NATS_URL) and the service's credentials file
// (--creds, or RATH_CREDS), connects, runs the service until SIGINT or
// SIGTERM, then drains the connection and exits non-zero on failure. Each
// service's main is a few lines around it.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/client"
)

// Run is a service's body: it runs until ctx ends, then returns once drained.
type Run func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error

// Main parses the command line (the service's own flags are already defined
// on flag.CommandLine), runs the service and exits. role is the identity the
// service connects as, which names its credentials file in --help. Each check runs on the
// parsed flags before anything connects: a bad flag is reported as such
// (exit 2), not as whatever the first connection attempt says.
func Main(name string, role auth.Role, run Run, checks ...func() error) {
	url := flag.String("nats", EnvOr("RATH_NATS_URL", nats.DefaultURL), "NATS server URL (env RATH_NATS_URL)")
	creds := flag.String("creds", EnvOr("RATH_CREDS", ""), credsUsage(role))
	httpAddr := flag.String("http", EnvOr("RATH_HTTP", ""), "serve Prometheus /metrics, /healthz and /readyz on this host:port (env RATH_HTTP; empty: off)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("process", name)
	for _, check := range checks {
		if err := check(); err != nil {
			log.Error(name+": invalid flags", "err", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	flush, err := tracing.Setup(ctx, "rath-"+name)
	if err != nil {
		log.Error(name+": tracing", "err", err)
		os.Exit(2)
	}
	err = serve(ctx, name, *url, *creds, *httpAddr, durables(role), run, log)
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if ferr := flush(fctx); ferr != nil {
		log.Warn("spans not all exported", "err", ferr)
	}
	cancel()
	if err != nil {
		log.Error(name+" stopped", "err", err)
		stop()
		os.Exit(1)
	}
}

// credsUsage is the --creds flag's usage, naming the file rath up writes for
// role (the session ledger's is ledger.nk, not session-ledger.nk).
func credsUsage(role auth.Role) string {
	return "credentials file of the service's identity, e.g. <data>/creds/" + auth.FileName(role) + " (rath up's) or its NATS user .creds on a server in operator mode (env RATH_CREDS; empty: none, for a server without authentication)"
}

func serve(ctx context.Context, name, url, creds, httpAddr string, durables []string, run Run, log *slog.Logger) error {
	nc, drain, err := Dial(name, url, Creds{Path: creds, Flag: "--creds", Env: "RATH_CREDS"}, log)
	if err != nil {
		return err
	}
	if httpAddr != "" {
		stop, err := endpoint(httpAddr, nc, durables, log)
		if err != nil {
			nc.Close()
			return err
		}
		defer stop()
	}
	runErr := run(ctx, nc, log)
	drain()
	return runErr
}

// Creds names a credentials file (Path, "" for none) and, for errors, the
// flag and environment variable that set it.
type Creds struct {
	Path, Flag, Env string
}

// Dial connects to url as the identity of the credentials file creds with
// the options every service's connection has, named rath-name. drain
// drains the connection and waits until it is closed: call it once what
// uses the connection has returned, so that its last replies and acks are
// flushed. A process running a second service (the agent worker with
// --with-selector) dials that service's connection here.
func Dial(name, url string, cr Creds, log *slog.Logger) (nc *nats.Conn, drain func(), err error) {
	creds := cr.Path
	closed := make(chan struct{})
	opts := []nats.Option{nats.Name("rath-" + name), nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		// A permission the service's identity lacks shows here, by subject.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("NATS error", "err", err)
		})}
	opts = append(opts, client.KeepAlive()...)
	opts = append(opts, ReconnectLog(log)...)
	if creds != "" {
		copts, _, err := auth.Options(creds)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", cr.Flag, err)
		}
		opts = append(opts, copts...)
	}
	nc, err = nats.Connect(url, opts...)
	if errors.Is(err, nats.ErrAuthorization) {
		if creds == "" {
			return nil, nil, fmt.Errorf("connect to %s: the server requires credentials: pass %s FILE (or %s): %w", url, cr.Flag, cr.Env, err)
		}
		return nil, nil, fmt.Errorf("connect to %s: the server refused the credentials %s: %w", url, creds, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, func() {
		if err := nc.Drain(); err == nil {
			<-closed
		}
	}, nil
}

// EnvOr returns the environment variable key, or def when it is unset. Only
// mains read the environment.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// durables are the durable consumers whose backlog a service's /metrics
// shows: its own, and every service's for the ledger.
func durables(role auth.Role) []string {
	if role != auth.RoleLedger {
		return auth.Durables(role)
	}
	return auth.AllDurables()
}

// endpoint serves /metrics, /healthz and /readyz (ready while NATS is
// connected) on addr; stop closes it.
func endpoint(addr string, nc *nats.Conn, durables []string, log *slog.Logger) (stop func(), err error) {
	srv, err := telemetry.Serve(addr, nc, durables, log)
	if err != nil {
		return nil, err
	}
	log.Info("serving metrics and health", "addr", srv.Addr(), "paths", "/metrics /healthz /readyz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	}, nil
}

// ReconnectLog returns the options that log when a service's connection is
// lost and where it went again: on a cluster, which service was on a node
// that went down or hung, and when it moved.
func ReconnectLog(log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS connection reconnected", "server", nc.ConnectedUrl()) }),
	}
}
