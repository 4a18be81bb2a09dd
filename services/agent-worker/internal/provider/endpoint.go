package provider

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ErrEndpointNotAllowed is returned, wrapped, by Endpoints.Check, and so by
// New, and by Complete for a redirect, when a URL is not under an endpoint
// the operator allowed for the provider. Nothing is sent to such a URL, so
// the provider's API key is not either.
var ErrEndpointNotAllowed = errors.New("not an endpoint this agent worker allows")

// Endpoint is an API endpoint of one provider: requests, and with them the
// provider's API key, may go to every URL of the same scheme, host and port
// whose path is the endpoint's or below it, segment by segment
// ("http://127.0.0.1:8080/v1" covers ".../v1/chat/completions", not
// ".../v1beta" nor ".../admin").
type Endpoint struct {
	Kind Kind
	URL  string
}

// ParseEndpoint reads an endpoint as the agent worker's --allow-base-url
// names it: "openai=http://127.0.0.1:8080/v1".
func ParseEndpoint(s string) (Endpoint, error) {
	kind, raw, ok := strings.Cut(s, "=")
	if !ok {
		return Endpoint{}, fmt.Errorf("endpoint %q: want PROVIDER=URL, e.g. %s=http://127.0.0.1:8080/v1", s, KindOpenAI)
	}
	e := Endpoint{Kind: Kind(kind), URL: raw}
	return e, e.validate()
}

func (e Endpoint) validate() error {
	if e.Kind != KindOpenAI && e.Kind != KindAnthropic {
		return fmt.Errorf("endpoint %s=%s: provider must be %s or %s", e.Kind, shown(e.URL), KindOpenAI, KindAnthropic)
	}
	if _, err := parsePrefix(e.URL); err != nil {
		return fmt.Errorf("endpoint %s=%s: %w", e.Kind, shown(e.URL), err)
	}
	return nil
}

// shown is raw as errors may show it: without a password it may hold.
func shown(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// Endpoints are where requests of the live providers may go. Each
// provider's official endpoint (DefaultOpenAIBaseURL,
// DefaultAnthropicBaseURL) is always allowed, and the zero value allows
// those alone: an agent's base URL comes from its workflow or from a
// session label, which any client of the bus may write, and a request
// carries the operator's API key.
type Endpoints struct {
	// Allowed are further endpoints, each for one provider.
	Allowed []Endpoint
	// Loopback allows every endpoint on a loopback address (localhost,
	// 127.0.0.0/8, ::1) for every provider: local model servers, and tests.
	// Any local process that listens there then gets the keys.
	Loopback bool
}

// Validate reports every malformed endpoint at once.
func (e Endpoints) Validate() error {
	var errs []error
	for _, a := range e.Allowed {
		errs = append(errs, a.validate())
	}
	return errors.Join(errs...)
}

// Check says whether requests of the provider kind may go to the base URL
// raw; empty is the official endpoint. A URL that is not a plain http(s)
// URL (user information, a query, a fragment, "." or ".." path segments) is
// refused whatever is allowed.
func (e Endpoints) Check(kind Kind, raw string) error {
	if raw == "" {
		return nil
	}
	p, err := parsePrefix(raw)
	if err != nil {
		return fmt.Errorf("%s base URL %q: %w", kind, raw, err)
	}
	if !e.allows(kind, p) {
		return fmt.Errorf("%s base URL %q: %w", kind, raw, ErrEndpointNotAllowed)
	}
	return nil
}

// checkRequest checks the URL of a request about to be sent.
func (e Endpoints) checkRequest(kind Kind, u *url.URL) error {
	p, err := prefixOf(u)
	if err == nil && e.allows(kind, p) {
		return nil
	}
	where := *u
	where.User, where.RawQuery, where.Fragment = nil, "", ""
	if err != nil {
		return fmt.Errorf("%s request to %s: %w", kind, where.String(), err)
	}
	return fmt.Errorf("%s request to %s: %w", kind, where.String(), ErrEndpointNotAllowed)
}

func (e Endpoints) allows(kind Kind, p prefix) bool {
	if e.Loopback && p.loopback() {
		return true
	}
	if off := official(kind); off != "" {
		if o, err := parsePrefix(off); err == nil && o.covers(p) {
			return true
		}
	}
	for _, a := range e.Allowed {
		if a.Kind != kind {
			continue
		}
		if o, err := parsePrefix(a.URL); err == nil && o.covers(p) {
			return true
		}
	}
	return false
}

// official is the provider's own endpoint, or "" for a kind without one.
func official(kind Kind) string {
	switch kind {
	case KindOpenAI:
		return DefaultOpenAIBaseURL
	case KindAnthropic:
		return DefaultAnthropicBaseURL
	}
	return ""
}

// prefix is a URL reduced to what endpoints are matched by: the scheme and
// host in lower case, the port made explicit, the path without its
// trailing slash. Matching compares these parts, never the URL's text, so
// "https://api.openai.com.evil.com" (another host) and
// "https://api.openai.com@evil.com" (the host evil.com) are not
// api.openai.com.
type prefix struct {
	scheme, host, port, path string
}

func parsePrefix(raw string) (prefix, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return prefix{}, errors.New("not an http or https URL")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return prefix{}, errors.New("an endpoint has no query or fragment")
	}
	return prefixOf(u)
}

func prefixOf(u *url.URL) (prefix, error) {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return prefix{}, errors.New("not an http or https URL")
	case u.Opaque != "" || u.Hostname() == "":
		return prefix{}, errors.New("no host")
	case u.User != nil:
		return prefix{}, errors.New("user information is not allowed in an endpoint")
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return prefix{}, errors.New(`"." and ".." path segments are not allowed`)
		}
	}
	port := u.Port()
	switch {
	case port == "" && u.Scheme == "http":
		port = "80"
	case port == "" && u.Scheme == "https":
		port = "443"
	default:
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return prefix{}, fmt.Errorf("bad port %q", port)
		}
		port = strconv.FormatUint(n, 10)
	}
	return prefix{scheme: u.Scheme, host: strings.ToLower(u.Hostname()), port: port, path: strings.TrimRight(u.Path, "/")}, nil
}

// covers says whether q is p or below it.
func (p prefix) covers(q prefix) bool {
	return p.scheme == q.scheme && p.host == q.host && p.port == q.port &&
		(q.path == p.path || strings.HasPrefix(q.path, p.path+"/"))
}

func (p prefix) loopback() bool {
	if p.host == "localhost" {
		return true
	}
	ip := net.ParseIP(p.host)
	return ip != nil && ip.IsLoopback()
}

// guarded returns a copy of c (or of the default client) that follows a
// redirect only to a URL check allows: Go's client keeps headers such as
// x-api-key on a redirect to another host, and Authorization on one to
// another port or scheme of the same host.
func guarded(c *http.Client, check func(*url.URL) error) *http.Client {
	g := *httpClient(c)
	next := g.CheckRedirect
	g.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := check(req.URL); err != nil {
			return fmt.Errorf("redirect refused: %w", err)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &g
}
