// Command memory-svc runs Rath's memory service against a NATS server or
// cluster: versioned memory items with provenance on the RATH_MEMORY
// stream, BM25 recall, and the provenance questions, over rath.memory.*.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/services/memory-svc/service"
)

func main() {
	cfg := service.DefaultConfig()
	flag.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of the RATH_MEMORY stream (3 on a cluster)")
	flag.IntVar(&cfg.Inflight, "inflight", cfg.Inflight, "requests handled at once")
	flag.Int64Var(&cfg.States.MaxBytes, "state-cache-bytes", cfg.States.MaxBytes, "approximate bytes of folded session states kept in memory")
	daemon.Main("memory-svc", auth.RoleMemory, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		return service.Run(ctx, nc, cfg, log)
	})
}
