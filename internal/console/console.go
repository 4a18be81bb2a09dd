// Package console is Rath's web console (issue 16, ADR 0027): pages that
// show sessions as the ledger records them — the list, one session's live
// timeline, any event and the folded state at its sequence, the lineage
// graph with its memory edges, verification and the dossier — and the
// pending approvals with approve and reject. Pages are rendered on the
// server from html/template; one small script (assets/app.js) pages the
// timeline, follows it live over Server-Sent Events and opens events.
// Everything it serves is embedded: nothing is fetched from elsewhere.
//
// The console reads and acts through a Rath client, as the identity of the
// credentials it was started with: it shows what that identity may read
// and does what it may do, through the same protocol as the CLI.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// assets are served as they are; templates are the pages.
//
//go:embed assets templates
var assets embed.FS

// Server serves the console.
type Server struct {
	c     *client.Client
	log   *slog.Logger
	pages *template.Template
	mux   *http.ServeMux
	// timeout bounds each request to the ledger a page makes.
	timeout time.Duration
	// closed ends the live streams (Close).
	closed context.Context
	close  context.CancelFunc

	// login, when set, signs people in with their credentials (login.go);
	// links, with one-time links (links.go); users are the sign-ins by
	// token, pending the links not used yet, idle how long a sign-in
	// lasts unused.
	login   *Login
	links   *Links
	mu      sync.Mutex
	users   map[string]*user
	pending map[linkKey]link
	idle    time.Duration
	now     func() time.Time

	// names keeps the branch names of the trees the sessions list shows
	// (names.go).
	names nameCache

	// hosts are what a request's Host may name (hosts.go); hostsErr is
	// WithHosts' complaint, which New returns.
	hosts    hosts
	hostsErr error
}

// New returns the console of the sessions c may read, acting as c for
// whoever reaches it; with WithLogin, of the sessions each person signed in
// with their credentials may read, acting as them (c may then be nil);
// with WithLinks, acting as c for whoever signed in with a one-time link.
// Either way it answers only requests for its own addresses (WithHosts).
func New(c *client.Client, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	s := &Server{c: c, log: log, pages: pages, mux: http.NewServeMux(), timeout: 10 * time.Second,
		users: make(map[string]*user), pending: make(map[linkKey]link), idle: 8 * time.Hour, now: time.Now, hosts: loopbackOnly}
	s.closed, s.close = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	switch {
	case s.hostsErr != nil:
		return nil, s.hostsErr
	case s.c == nil && s.login == nil:
		return nil, errors.New("console: no client, and no sign-in")
	case s.c == nil && s.links != nil:
		return nil, errors.New("console: sign-in links act as the console's client, and there is none")
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	s.mux.Handle("GET /favicon.ico", http.RedirectHandler("/assets/favicon.svg", http.StatusMovedPermanently))
	s.mux.HandleFunc("GET /login", s.loginForm)
	s.mux.HandleFunc("GET /login/{token}", s.useLink)
	s.mux.HandleFunc("GET /{$}", s.sessions)
	s.mux.HandleFunc("GET /api/sessions", s.sessionsJSON)
	s.mux.HandleFunc("GET /s/{id}", s.session)
	s.mux.HandleFunc("GET /s/{id}/dossier.md", s.dossierMarkdown)
	s.mux.HandleFunc("GET /s/{id}/graph.svg", s.graph)
	s.mux.HandleFunc("GET /api/s/{id}/events", s.eventsJSON)
	s.mux.HandleFunc("GET /api/s/{id}/event/{seq}", s.eventJSON)
	s.mux.HandleFunc("GET /api/s/{id}/state", s.stateJSON)
	s.mux.HandleFunc("GET /api/s/{id}/verify", s.verifyJSON)
	s.mux.HandleFunc("GET /api/s/{id}/live", s.live)
	s.mux.HandleFunc("GET /approvals", s.approvals)
	s.mux.HandleFunc("GET /compare", s.compare)
	s.mux.HandleFunc("GET /evals", s.evals)
	// Actions refuse cross-origin requests: a page elsewhere cannot act
	// through a browser that has the console open.
	cop := http.NewCrossOriginProtection()
	s.mux.Handle("POST /s/{id}/approvals/{approval}/{decision}", cop.Handler(http.HandlerFunc(s.decide)))
	s.mux.Handle("POST /s/{id}/fork", cop.Handler(http.HandlerFunc(s.fork)))
	s.mux.Handle("POST /s/{id}/lifecycle/{action}", cop.Handler(http.HandlerFunc(s.lifecycle)))
	s.mux.Handle("POST /login", cop.Handler(http.HandlerFunc(s.signInCreds)))
	s.mux.Handle("POST /logout", cop.Handler(http.HandlerFunc(s.signOut)))
	return s, nil
}

// Close ends the live streams, which would otherwise hold an HTTP server's
// graceful shutdown until their browsers leave.
func (s *Server) Close() {
	s.close()
	s.closeUsers()
}

// ServeHTTP implements http.Handler. Every response forbids framing and
// loading anything from elsewhere; a request for another host is refused
// first; with sign-in, only the sign-in's own paths and the static assets
// answer before it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !s.checkHost(w, r) {
		return
	}
	if s.signsIn() && !open(r.URL.Path) {
		var ok bool
		if r, ok = s.signedIn(w, r); !ok {
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// signsIn says whether pages need a sign-in.
func (s *Server) signsIn() bool { return s.login != nil || s.links != nil }

// open says whether p answers without a sign-in: the sign-in page, a
// link, the static assets. p is judged cleaned, as the mux routes it (an
// unclean path is only redirected to its clean one).
func open(p string) bool {
	p = path.Clean(p)
	if p == "/login" || strings.HasPrefix(p, "/assets/") {
		return true
	}
	token, ok := strings.CutPrefix(p, "/login/")
	return ok && token != "" && !strings.Contains(token, "/")
}

// ctx bounds a page's requests to the ledger.
func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.timeout)
}

// Frame is what every page's header shows.
type Frame struct {
	Title string
	// Who is the identity the console reads and acts as; SignOut is set
	// when people sign in.
	Who     string
	SignOut bool
}

func (f *Frame) frame() *Frame { return f }

type framed interface{ frame() *Frame }

// render writes a page, titled, or the error that kept it from rendering.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title string, data framed) {
	f := data.frame()
	f.Title, f.Who, f.SignOut = title, s.who(r), s.signsIn()
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: cannot render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// fail answers a request the ledger could not serve, with its reason and a
// status that says whose fault it was.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	code := http.StatusBadGateway
	switch {
	case errors.Is(err, errBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrOutOfRange), errors.Is(err, api.ErrApprovalUnknown):
		code = http.StatusNotFound
	case errors.Is(err, api.ErrMalformed), errors.Is(err, api.ErrInvalidSession):
		code = http.StatusBadRequest
	case errors.Is(err, api.ErrApprovalSettled), errors.Is(err, api.ErrClosed), errors.Is(err, api.ErrTransition):
		code = http.StatusConflict
	}
	s.log.Warn("console: request failed", "path", r.URL.Path, "what", what, "err", err)
	http.Error(w, fmt.Sprintf("%s: %v", what, err), code)
}

var errBadRequest = errors.New("bad request")

// validID refuses a session ID the ledger would refuse, before asking it.
func validID(id string) error {
	if err := events.ValidateSessionID(id); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		d := time.Since(t).Round(time.Second)
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds ago", int(d.Seconds()))
		case d < time.Hour:
			return fmt.Sprintf("%dm ago", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh ago", int(d.Hours()))
		}
		return t.UTC().Format("2006-01-02")
	},
	"stamp": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	// short drops the "rath." every type begins with.
	"short": func(typ string) string { return strings.TrimPrefix(typ, "rath.") },
	// ref shortens a blob reference (a workspace seed's, a bundle's) to its
	// first 12 hex digits; any other value is as it is.
	"ref": shortRef,
}

// shortRef is a label value as the sessions list shows it: a sha256: blob
// reference cut to 12 hex digits and an ellipsis (the full one is the
// title), any other value whole.
func shortRef(v string) string {
	if hex, ok := strings.CutPrefix(v, "sha256:"); ok && len(hex) > 12 {
		return "sha256:" + hex[:12] + "…"
	}
	return v
}
