// Package gateway is Rath's model gateway (ADR 0039): an HTTP endpoint that
// speaks a model provider's wire format, so that an agent built with any
// framework becomes a Rath session by changing only its base URL and key.
//
// Each call is authenticated with a Rath gateway token (auth.MintToken),
// which names one tenant's user; the gateway acts on the bus as that user,
// so the ledger's tenant checks and quotas hold as for any client. The
// session is named by the path (/s/<session>/v1/...) or by the
// Rath-Session header, and started on first use. What the call adds to the
// conversation (not the whole history again) is recorded before the
// provider is asked; the answer, its tool calls (run by the caller:
// events.RunnerCaller) and the model call with its usage after. The
// provider and its key are the operator's: the caller's token never leaves
// the gateway.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// Source is the CloudEvents source of the events the gateway records.
const Source = "rath/model-gateway"

// HeaderSession names the session of a call whose path does not; HeaderAgent
// names the agent a call is recorded for (DefaultAgent when absent).
const (
	HeaderSession = "Rath-Session"
	HeaderAgent   = "Rath-Agent"
	DefaultAgent  = "agent"
)

// LabelGateway is the label of a session the gateway started: the wire
// format it was started with.
const LabelGateway = "rath.gateway"

const (
	// maxBody bounds a request's body and a provider's answer.
	maxBody = 16 << 20
	// maxToolCalls bounds the tool calls of one streamed answer.
	maxToolCalls = 128
)

var validAgent = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Authenticator maps a presented token to the tenant's user it acts as.
// auth.Tokens is one.
type Authenticator interface {
	Lookup(token string) (events.Principal, string, error)
}

// Clients returns a client that acts on the bus as p (its own connection,
// with p's credentials).
type Clients func(ctx context.Context, p events.Principal) (*client.Client, error)

// Upstream is a provider the gateway asks: its wire format, base URL and
// the operator's key.
type Upstream struct {
	// Kind is the provider's wire format: "openai" or "anthropic". Calls
	// the gateway serves in that format go to this provider.
	Kind string
	// BaseURL is the provider's API base; requests go to BaseURL +
	// "/chat/completions" (openai: "https://api.openai.com/v1") or BaseURL
	// + "/v1/messages" (anthropic: "https://api.anthropic.com").
	BaseURL string
	// Key is the operator's API key, sent as a bearer token. Never logged,
	// recorded or returned.
	Key string
}

// Config configures a gateway.
type Config struct {
	// Upstreams are the providers asked, one per kind; a wire format with
	// none is not served.
	Upstreams []Upstream
	// Timeout bounds one provider call (default 10 minutes): a streamed
	// answer is read whole even when the caller went away, so that it is
	// recorded.
	Timeout time.Duration
	// HTTPClient calls the provider (default: one that follows no redirect,
	// so the key goes nowhere else).
	HTTPClient *http.Client
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Upstreams) == 0 {
		errs = append(errs, errors.New("gateway: no upstream provider"))
	}
	seen := map[string]bool{}
	for _, u := range c.Upstreams {
		if _, ok := wires[u.Kind]; !ok {
			errs = append(errs, fmt.Errorf("gateway upstream: provider must be %s or %s, got %q", kindOpenAI, kindAnthropic, u.Kind))
		}
		if seen[u.Kind] {
			errs = append(errs, fmt.Errorf("gateway upstream: provider %s is named twice", u.Kind))
		}
		seen[u.Kind] = true
		if !strings.HasPrefix(u.BaseURL, "http://") && !strings.HasPrefix(u.BaseURL, "https://") {
			errs = append(errs, fmt.Errorf("gateway upstream %s: base URL must be an http or https URL", u.Kind))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("gateway timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// Gateway records the model calls of agents built elsewhere.
type Gateway struct {
	cfg       Config
	upstreams map[string]Upstream // by kind
	auth      Authenticator
	clients   Clients
	log       *slog.Logger
	http      *http.Client
	convos    *convos
}

// New returns a gateway.
func New(cfg Config, auth Authenticator, clients Clients, log *slog.Logger) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the provider redirected: not followed, so the key goes nowhere else")
		}}
	}
	ups := map[string]Upstream{}
	for _, u := range cfg.Upstreams {
		u.BaseURL = strings.TrimRight(u.BaseURL, "/")
		ups[u.Kind] = u
	}
	return &Gateway{cfg: cfg, upstreams: ups, auth: auth, clients: clients, log: log, http: hc, convos: newConvos(64 << 20)}, nil
}

// Handler returns the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, w := range []wire{openAI{}, anthropic{}} {
		endpoint := "/v1" + w.path()
		if w.kind() == kindAnthropic {
			endpoint = w.path()
		}
		live := func(rw http.ResponseWriter, r *http.Request) { g.chat(rw, r, w) }
		mux.HandleFunc("POST /s/{session}"+endpoint, live)
		mux.HandleFunc("POST "+endpoint, live)
		mux.HandleFunc("POST /replay/{session}"+endpoint, func(rw http.ResponseWriter, r *http.Request) { g.replay(rw, r, w) })
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openAI{}.fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such endpoint: %s %s (the gateway serves POST /s/<session>/v1/chat/completions and /s/<session>/v1/messages; docs/gateway.md)", r.Method, r.URL.Path))
	})
	return mux
}

// call is one authenticated call, as the handlers see it.
type call struct {
	session string
	agent   string
	who     events.Principal
	token   string // the token's name, for logs
	c       *client.Client
	body    []byte // the request's body, as the caller sent it
	wire    wire
	up      Upstream
	// tenant is the session's, answer the ID of the answer being
	// streamed: where its deltas go, and what they name.
	tenant, answer string
}

// key names the call's session in the gateway's memory: by the caller's
// tenant too, so that what the gateway knows of a session (its calls, their
// answers) is never a caller of another tenant's, whatever ID it names.
func (k *call) key() string { return k.who.Tenant + "/" + k.session }

// open authenticates the call and names its session and agent; on failure
// it has answered the caller.
func (g *Gateway) open(w http.ResponseWriter, r *http.Request, wi wire) (*call, bool) {
	fail := wi.fail
	up, ok := g.upstreams[wi.kind()]
	if !ok {
		fail(w, http.StatusNotImplemented, "not_served", fmt.Sprintf("this gateway asks no %s provider: the operator names one with --gateway-upstream %s=URL", wi.kind(), wi.kind()))
		return nil, false
	}
	tok := bearer(r)
	if tok == "" {
		fail(w, http.StatusUnauthorized, "invalid_api_key", "no Rath gateway token: send it as the API key (Authorization: Bearer <token>); mint one with rath creds token add")
		return nil, false
	}
	who, name, err := g.auth.Lookup(tok)
	if err != nil {
		g.log.Warn("gateway call refused", "err", err, "remote", r.RemoteAddr)
		fail(w, http.StatusUnauthorized, "invalid_api_key", "the Rath gateway token is not valid (unknown or revoked)")
		return nil, false
	}
	k := &call{who: who, token: name, session: r.PathValue("session"), agent: r.Header.Get(HeaderAgent), wire: wi, up: up}
	if k.session == "" {
		k.session = r.Header.Get(HeaderSession)
	}
	if k.session == "" {
		fail(w, http.StatusBadRequest, "invalid_request_error", "name the session: use the base URL /s/<session>/v1 or the "+HeaderSession+" header")
		return nil, false
	}
	if err := events.ValidateSessionID(k.session); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return nil, false
	}
	if k.agent == "" {
		k.agent = DefaultAgent
	}
	if !validAgent.MatchString(k.agent) {
		fail(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("invalid %s header %q: want 1-64 characters of a-z 0-9 . _ -, starting with a letter or digit", HeaderAgent, k.agent))
		return nil, false
	}
	c, err := g.clients(r.Context(), who)
	if err != nil {
		g.log.Error("gateway: no connection for the caller", "user", who.String(), "err", err)
		fail(w, http.StatusServiceUnavailable, "rath_unavailable", "Rath cannot act as "+who.String()+" now: "+err.Error())
		return nil, false
	}
	k.c = c
	return k, true
}

// bearer is the token of a request: the bearer token of its
// Authorization header, or its x-api-key header (Anthropic's clients).
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}

// readBody reads a call's body, at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, int, string, string)) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request body is larger than %d bytes", maxBody))
		return nil, false
	case err != nil:
		fail(w, http.StatusBadRequest, "invalid_request_error", "read the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// ParseUpstream reads an upstream as --gateway-upstream names it:
// "openai=https://api.openai.com/v1". The key is not part of it.
func ParseUpstream(s string) (Upstream, error) {
	kind, url, ok := strings.Cut(s, "=")
	if !ok {
		return Upstream{}, fmt.Errorf("upstream %q: want PROVIDER=URL, e.g. openai=https://api.openai.com/v1", s)
	}
	u := Upstream{Kind: kind, BaseURL: url}
	return u, Config{Upstreams: []Upstream{u}}.Validate()
}

// Set replaces the upstream of u's kind in ups, or adds it.
func Set(ups []Upstream, u Upstream) []Upstream {
	for i := range ups {
		if ups[i].Kind == u.Kind {
			ups[i] = u
			return ups
		}
	}
	return append(ups, u)
}
