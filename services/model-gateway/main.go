// Command model-gateway records the model calls of agents built with any
// framework as Rath sessions (ADR 0039): point the agent's OpenAI base URL
// at http://<listen>/s/<session>/v1 and give it a Rath gateway token as its
// API key (rath creds token add); for Anthropic's clients, the base URL
// http://<listen>/s/<session>. The providers' keys are the operator's, read
// from OPENAI_API_KEY and ANTHROPIC_API_KEY.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/services/model-gateway/service"
)

func main() {
	cfg := service.DefaultConfig()
	url := flag.String("nats", daemon.EnvOr("RATH_NATS_URL", nats.DefaultURL), "NATS server URL (env RATH_NATS_URL)")
	flag.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP address the gateway serves")
	flag.StringVar(&cfg.CredsDir, "creds-dir", daemon.EnvOr("RATH_CREDS_DIR", ""), "credentials directory holding the tenants' users' files and the gateway tokens, e.g. <data>/creds (env RATH_CREDS_DIR)")
	flag.StringVar(&cfg.TokensFile, "tokens", "", "gateway tokens file (default <creds-dir>/gateway-tokens)")
	flag.Func("upstream", "PROVIDER=URL: the provider (openai, anthropic) the gateway asks for calls in its format (defaults: openai="+service.DefaultOpenAIBaseURL+", anthropic="+service.DefaultAnthropicBaseURL+"); repeatable", func(s string) error {
		u, err := gateway.ParseUpstream(s)
		cfg.Gateway.Upstreams = gateway.Set(cfg.Gateway.Upstreams, u)
		return err
	})
	flag.Parse()
	cfg.WithKeys(os.Getenv)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("process", "model-gateway")
	if err := cfg.Validate(); err != nil {
		log.Error("model-gateway: invalid flags", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := service.Listen(cfg)
	if err == nil {
		err = service.Serve(ctx, ln, service.Bus{URL: *url}, cfg, log)
	}
	if err != nil {
		log.Error("model-gateway stopped", "err", err)
		os.Exit(1)
	}
}
