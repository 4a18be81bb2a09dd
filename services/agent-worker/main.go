// Command agent-worker takes the agent turns of Rath sessions: it builds each
// agent's context from the session, calls its model (scripted, OpenAI-style
// or Anthropic) and records the answer, usage and tool calls.
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
	"github.com/openrath/rath/services/agent-worker/service"
	selector "github.com/openrath/rath/services/selector/service"
)

func main() {
	cfg := service.DefaultConfig()
	flag.IntVar(&cfg.Retry.MaxAttempts, "model-attempts", 4, "attempts per model call (429 and 5xx are retried)")
	flag.Int64Var(&cfg.States.MaxBytes, "state-cache-bytes", cfg.States.MaxBytes, "approximate bytes of folded session states kept in memory")
	flag.Int64Var(&cfg.ContextBytes, "context-cache-bytes", cfg.ContextBytes, "approximate bytes of agents' model contexts kept built in memory")
	flag.Func("allow-base-url", "PROVIDER=URL: an API endpoint agents of PROVIDER (openai, anthropic) may name as base_url, besides the official one; requests carry the provider's key (repeatable)", func(s string) error {
		cfg.AllowBaseURLs = append(cfg.AllowBaseURLs, s)
		return nil
	})
	flag.BoolVar(&cfg.AllowLoopback, "allow-loopback-endpoints", false, "let agents name any endpoint on a loopback address (localhost, 127.0.0.0/8, ::1): local model servers, which then get the keys")
	withSelector := flag.Bool("with-selector", false, "also run the selector in this process, handing its turn requests to this worker (docs/operations.md); it connects as --selector-creds")
	selectorCreds := daemon.Creds{Flag: "--selector-creds", Env: "RATH_SELECTOR_CREDS"}
	flag.StringVar(&selectorCreds.Path, "selector-creds", daemon.EnvOr(selectorCreds.Env, ""), "with --with-selector: the selector's credentials file, e.g. <data>/creds/selector.nk (env RATH_SELECTOR_CREDS)")
	daemon.Main("agent-worker", auth.RoleAgentWorker, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		cfg.Keys = service.KeysFromEnv(os.Getenv)
		if !*withSelector {
			return service.Run(ctx, nc, cfg, log)
		}
		snc, drain, err := daemon.Dial("selector", strings.Join(nc.Servers(), ","), selectorCreds, log)
		if err != nil {
			return fmt.Errorf("selector: %w", err)
		}
		defer drain()
		return service.WithSelector(ctx, nc, snc, cfg, selector.DefaultConfig(), log)
	}, func() error { return cfg.Validate() }) // after the flags are parsed
}
