// Package service is the model gateway's composition root (ADR 0039): it
// serves internal/gateway over HTTP, authenticating callers with the gateway
// tokens in the credentials directory and acting on the bus as each caller,
// with the caller's own credentials file, until the context ends.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/gateway"
)

// DefaultListen is where the gateway listens by default: loopback only.
const DefaultListen = "127.0.0.1:4280"

// The providers a gateway configured with none asks.
const (
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
)

// Config is the model gateway's configuration.
type Config struct {
	// Listen is the HTTP address (host:port; port 0 picks one).
	Listen string
	// CredsDir holds the users' credentials files (rath up's <data>/creds)
	// and, unless TokensFile names another, the gateway tokens.
	CredsDir   string
	TokensFile string
	Gateway    gateway.Config
}

// DefaultConfig is the gateway on loopback, asking OpenAI's and Anthropic's
// APIs.
func DefaultConfig() Config {
	return Config{Listen: DefaultListen, Gateway: gateway.Config{Upstreams: []gateway.Upstream{
		{Kind: "openai", BaseURL: DefaultOpenAIBaseURL}, {Kind: "anthropic", BaseURL: DefaultAnthropicBaseURL}}}}
}

// WithKeys sets each upstream's key from the environment (getenv):
// OPENAI_API_KEY, ANTHROPIC_API_KEY, as the agent worker reads them.
func (c *Config) WithKeys(getenv func(string) string) {
	for i, u := range c.Gateway.Upstreams {
		c.Gateway.Upstreams[i].Key = getenv(strings.ToUpper(u.Kind) + "_API_KEY")
	}
}

// Tokens is the gateway tokens file the configuration names.
func (c Config) Tokens() string {
	if c.TokensFile != "" {
		return c.TokensFile
	}
	return filepath.Join(c.CredsDir, auth.TokensFile)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("gateway listen address %q: %w", c.Listen, err))
	}
	if c.CredsDir == "" {
		errs = append(errs, errors.New("gateway: the credentials directory is required (its users' files and tokens)"))
	}
	return errors.Join(append(errs, c.Gateway.Validate())...)
}

// Listen opens the gateway's listener.
func Listen(cfg Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("model gateway: %w", err)
	}
	return ln, nil
}

// Bus is how the gateway reaches the NATS server.
type Bus struct {
	URL string
	// Options are added to each caller's connection (an in-process
	// server's).
	Options []nats.Option
	// Reload, if set, makes the server learn the users added to the
	// credentials directory since it started (rath up's embedded server).
	Reload func() error
}

// Serve serves the gateway on ln until ctx ends, connecting to the NATS
// server as each caller, then shuts the HTTP server down and drains the
// connections.
func Serve(ctx context.Context, ln net.Listener, bus Bus, cfg Config, log *slog.Logger) error {
	log = log.With("service", "model-gateway")
	if err := cfg.Validate(); err != nil {
		ln.Close()
		return fmt.Errorf("model gateway config: %w", err)
	}
	conns := gateway.NewConns(bus.URL, gateway.UserCreds(cfg.CredsDir), bus.Reload, bus.Options...)
	defer conns.Close()
	g, err := gateway.New(cfg.Gateway, auth.OpenTokens(cfg.Tokens()), conns.Client, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("model gateway: %w", err)
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	for _, u := range cfg.Gateway.Upstreams {
		log.Info("model gateway listening", "addr", ln.Addr().String(), "provider", u.Kind, "upstream", u.BaseURL, "key", u.Key != "")
	}
	select {
	case err := <-errc:
		return fmt.Errorf("model gateway: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("model gateway: shut down: %w", err)
	}
	return nil
}
