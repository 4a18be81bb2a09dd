package provider

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kind selects a Provider implementation.
type Kind string

// The provider kinds New understands.
const (
	KindScripted  Kind = "scripted"
	KindOpenAI    Kind = "openai"
	KindAnthropic Kind = "anthropic"
)

// ErrNoAPIKey is returned (wrapped) by Validate and New for a public
// endpoint with no API key: the caller says where the key comes from
// (KeyEnv).
var ErrNoAPIKey = errors.New("needs an API key for the public endpoint")

// KeyEnv is the environment variable the API key of a provider kind is read
// from at the service edge ("" for a kind that needs none).
func KeyEnv(k Kind) string {
	switch k {
	case KindOpenAI:
		return "OPENAI_API_KEY"
	case KindAnthropic:
		return "ANTHROPIC_API_KEY"
	}
	return ""
}

// Config selects and configures a Provider. It is filled once at the service
// edge; the API key is read from the environment there (see the package
// documentation), never below.
type Config struct {
	Kind Kind
	// BaseURL overrides the provider's public endpoint, e.g. a local
	// OpenAI-compatible server. Empty means the public endpoint. It must be
	// under one of Endpoints.
	BaseURL string
	// Endpoints are where requests, and so APIKey, may go: the provider's
	// public endpoint and those the operator allowed. Every request and
	// redirect is checked against them before it is sent.
	Endpoints Endpoints
	// APIKey authenticates with the provider. It is required for the public
	// endpoints and optional for a BaseURL (local servers often need none).
	APIKey string
	// Model is used for requests that do not name one.
	Model string
	// Scripts are the per-agent scripts of KindScripted.
	Scripts map[string]Script
	// HTTPClient sends the requests; nil uses a client whose transport waits
	// at most 10 minutes for response headers. Its timeouts should leave
	// cancellation to the ctx passed to Complete.
	HTTPClient *http.Client
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Kind {
	case KindScripted:
		if len(c.Scripts) == 0 {
			errs = append(errs, errors.New("scripted provider needs at least one script"))
		}
	case KindOpenAI, KindAnthropic:
		if c.BaseURL == "" && c.APIKey == "" {
			errs = append(errs, fmt.Errorf("%s provider: %w", c.Kind, ErrNoAPIKey))
		}
		if err := c.Endpoints.Validate(); err != nil {
			errs = append(errs, err)
		} else if err := c.Endpoints.Check(c.Kind, c.BaseURL); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("unknown provider kind %q (want %s, %s or %s)", c.Kind, KindScripted, KindOpenAI, KindAnthropic))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("provider config: %w", err)
	}
	return nil
}

// New returns the Provider cfg selects. Wrap it in WithRetry for the
// network providers.
func New(cfg Config) (Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Kind {
	case KindOpenAI:
		return NewOpenAI(cfg)
	case KindAnthropic:
		return NewAnthropic(cfg)
	default:
		return NewScripted(cfg.Scripts), nil
	}
}

// httpClient returns c, or a default that, like the SDKs' own, bounds the
// wait for response headers so a stuck connection fails instead of hanging.
func httpClient(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{}
}
