// Command selector runs Rath's selector against a NATS server or cluster:
// it evaluates each session's workflow rules after every event and appends
// the routing decision and the routed request.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/services/selector/service"
)

func main() {
	cfg := service.DefaultConfig()
	flag.Int64Var(&cfg.States.MaxBytes, "state-cache-bytes", cfg.States.MaxBytes, "approximate bytes of folded session states kept in memory")
	daemon.Main("selector", auth.RoleSelector, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		return service.Run(ctx, nc, cfg, log)
	})
}
