// Command session-ledger runs the Rath session ledger against a NATS server
// or cluster: it validates, sequences and hash-chains session events, and
// answers state, log, fork, merge and verify requests.
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

	"github.com/openrath/rath/services/session-ledger/service"
)

func main() {
	cfg := service.DefaultConfig()
	url := flag.String("nats", envOr("RATH_NATS_URL", nats.DefaultURL), "NATS server URL (env RATH_NATS_URL)")
	flag.IntVar(&cfg.Store.Replicas, "replicas", cfg.Store.Replicas, "replicas per stream and bucket (3 on a cluster)")
	flag.DurationVar(&cfg.Store.DedupeWindow, "dedupe-window", cfg.Store.DedupeWindow, "how long an event ID is remembered for deduplication")
	flag.Uint64Var(&cfg.Ledger.SnapshotEvery, "snapshot-every", cfg.Ledger.SnapshotEvery, "store a state snapshot every K events of a session")
	flag.IntVar(&cfg.Ledger.CacheSessions, "cache-sessions", cfg.Ledger.CacheSessions, "sessions whose state stays in memory")
	flag.StringVar(&cfg.Ledger.Name, "name", fmt.Sprintf("ledger-%d", os.Getpid()), "instance name in logs and rejections")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, cfg, log); err != nil {
		log.Error("session ledger stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, cfg service.Config, log *slog.Logger) error {
	closed := make(chan struct{})
	nc, err := nats.Connect(url, nats.Name("rath-session-ledger"), nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	runErr := service.Run(ctx, nc, cfg, log)
	// Drain flushes the last replies and acks; wait for it before exiting.
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
