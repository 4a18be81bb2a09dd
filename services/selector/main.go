// Command selector runs Rath's selector against a NATS server or cluster:
// it evaluates each session's workflow rules after every event and appends
// the routing decision and the routed request.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/services/selector/service"
)

func main() {
	cfg := service.DefaultConfig()
	url := flag.String("nats", envOr("RATH_NATS_URL", nats.DefaultURL), "NATS server URL (env RATH_NATS_URL)")
	flag.IntVar(&cfg.Store.Replicas, "replicas", cfg.Store.Replicas, "replicas per stream and bucket (3 on a cluster)")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, cfg, log); err != nil {
		log.Error("selector stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, cfg service.Config, log *slog.Logger) error {
	closed := make(chan struct{})
	nc, err := nats.Connect(url, nats.Name("rath-selector"), nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	runErr := service.Run(ctx, nc, cfg, log)
	if err := nc.Drain(); err == nil {
		<-closed
	}
	return runErr
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
