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
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/services/session-ledger/service"
)

func main() {
	cfg := service.DefaultConfig()
	flag.StringVar(&cfg.KeyFile, "key", daemon.EnvOr("RATH_LEDGER_KEY", "keys/ledger.key"), "the ledger's ed25519 signing key (PKCS #8 PEM), created with keys/ledger.pub beside it if missing; ledgers of one deployment share it (env RATH_LEDGER_KEY)")
	var trusted string
	flag.StringVar(&trusted, "trust", "", "comma-separated public key files (PKIX PEM) of earlier keys or other ledgers whose signatures to accept")
	flag.StringVar(&cfg.ApproversFile, "approvers", daemon.EnvOr("RATH_APPROVERS", ""), "the approvers file: which principal holds which approver roles, read at each approval decision (docs/security.md#approver-roles; env RATH_APPROVERS)")
	flag.IntVar(&cfg.Store.Replicas, "replicas", cfg.Store.Replicas, "replicas per stream and bucket (3 on a cluster)")
	flag.DurationVar(&cfg.Store.DedupeWindow, "dedupe-window", cfg.Store.DedupeWindow, "how long an event ID is remembered for deduplication")
	flag.Uint64Var(&cfg.Ledger.SnapshotEvery, "snapshot-every", cfg.Ledger.SnapshotEvery, "store a state snapshot every K events of a session")
	flag.DurationVar(&cfg.Ledger.Retention.ArchiveAfter, "retention-archive-after", 0, "archive closed sessions this long after they closed (0: only on request)")
	flag.DurationVar(&cfg.Ledger.Retention.PurgeAfter, "retention-purge-after", 0, "purge archived sessions from the hot stream this long after they were archived (0: never)")
	flag.DurationVar(&cfg.Ledger.Retention.Interval, "retention-interval", 0, "how often the retention pass runs (0: every 10m)")
	flag.IntVar(&cfg.Ledger.CacheSessions, "cache-sessions", cfg.Ledger.CacheSessions, "sessions whose state stays in memory")
	flag.StringVar(&cfg.Ledger.Name, "name", fmt.Sprintf("ledger-%d", os.Getpid()), "instance name in logs and rejections")
	cfg.Ledger.Quotas.Flags(flag.CommandLine)
	daemon.Main("session-ledger", auth.RoleLedger, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		if trusted != "" {
			cfg.TrustedKeyFiles = strings.Split(trusted, ",")
		}
		return service.Run(ctx, nc, cfg, log)
	})
}
