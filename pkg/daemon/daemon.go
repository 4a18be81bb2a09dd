// Package daemon runs one Rath service as its own process: it reads the NATS
// URL (--nats, or RATH_NATS_URL), connects, runs the service until SIGINT or
// SIGTERM, then drains the connection and exits non-zero on failure. Each
// service's main is a few lines around it.
package daemon

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
)

// Run is a service's body: it runs until ctx ends, then returns once drained.
type Run func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error

// Main parses the command line (the service's own flags are already defined
// on flag.CommandLine), runs the service and exits.
func Main(name string, run Run) {
	url := flag.String("nats", EnvOr("RATH_NATS_URL", nats.DefaultURL), "NATS server URL (env RATH_NATS_URL)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("process", name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, name, *url, run, log); err != nil {
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, name, url string, run Run, log *slog.Logger) error {
	closed := make(chan struct{})
	nc, err := nats.Connect(url, nats.Name("rath-"+name), nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	runErr := run(ctx, nc, log)
	// Drain flushes the last replies and acks; wait for it before exiting.
	if err := nc.Drain(); err == nil {
		<-closed
	}
	return runErr
}

// EnvOr returns the environment variable key, or def when it is unset. Only
// mains read the environment.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
