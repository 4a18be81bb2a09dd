package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Login makes the console ask each person to sign in with their own Rath
// credentials (a tenant user's .nk file, as `rath creds add` writes it, or a
// NATS user .creds file whose JWT names the principal): the console then
// reads and acts as that user, on a NATS connection of theirs, so a tenant's
// user sees only the tenant's sessions and an approval records who gave it.
type Login struct {
	// URL is the NATS the console connects users to.
	URL string
	// Options are added to every user's connection (a name, timeouts).
	Options []nats.Option
	// Idle ends a sign-in unused this long (default 8 hours).
	Idle time.Duration
}

// Option configures a Server.
type Option func(*Server)

// WithLogin has the console sign people in (Login) instead of acting as the
// client it was given.
func WithLogin(l Login) Option {
	return func(s *Server) {
		if l.Idle > 0 {
			s.idle = l.Idle
		}
		s.login = &l
	}
}

// WithHosts has the console answer only requests whose Host is one of the
// addresses it serves: addr, the address its listener bound (host:port;
// on loopback also localhost, 127.0.0.1 and [::1] with its port; on every
// address, 0.0.0.0 or [::], any IP literal with its port and localhost),
// and names the operator gave (NAME:PORT, or NAME with any port: a proxy's
// name). Without it the console answers to loopback names only, on any
// port. Any other Host is refused (421), signed in or not.
func WithHosts(addr string, names ...string) Option {
	return func(s *Server) {
		s.hosts, s.hostsErr = newHosts(addr, names)
	}
}

// WithClock has the console read the time from now (sign-ins' idling,
// links' expiry), for tests.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// cookieName holds a signed-in person's token.
const cookieName = "rath_console"

// maxCreds bounds an uploaded credentials file.
const maxCreds = 16 << 10

// user is one person signed in.
type user struct {
	c *client.Client
	// nc is the sign-in's own connection (credentials); nil for a link's,
	// which shares the console's client.
	nc    *nats.Conn
	as    events.Principal
	used  time.Time
	token string
}

// end closes the sign-in's own connection, if it has one.
func (u *user) end() {
	if u.nc != nil {
		u.nc.Close()
	}
}

// signIn records a new sign-in of c as as, on nc when it is the sign-in's
// own, and returns it with its token (a random cookie value).
func (s *Server) signIn(c *client.Client, nc *nats.Conn, as events.Principal) (*user, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("console: sign-in token: %w", err)
	}
	u := &user{c: c, nc: nc, as: as, used: s.now(), token: base64.RawURLEncoding.EncodeToString(raw[:])}
	s.mu.Lock()
	s.users[u.token] = u
	s.mu.Unlock()
	return u, nil
}

// setCookie gives the browser the sign-in's token: never readable by a
// script, never sent with a request another site started, and over TLS
// only when the console is served over TLS.
func setCookie(w http.ResponseWriter, r *http.Request, u *user) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: u.token, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

type userKey struct{}

// client is the client a request reads and acts through: the signed-in
// person's, or the console's own without sign-in.
func (s *Server) client(r *http.Request) *client.Client {
	if u, ok := r.Context().Value(userKey{}).(*user); ok {
		return u.c
	}
	return s.c
}

// signedIn admits a request with a live sign-in, or sends the person to
// sign in (an API request and any other method than GET gets 401, and
// nothing is done).
func (s *Server) signedIn(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	ck, err := r.Cookie(cookieName)
	var u *user
	if err == nil {
		u = s.user(ck.Value)
	}
	if u == nil {
		if strings.HasPrefix(r.URL.Path, "/api/") || r.Method != http.MethodGet {
			http.Error(w, "console: sign in first (/login)", http.StatusUnauthorized)
			return r, false
		}
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return r, false
	}
	return r.WithContext(withUser(r.Context(), u)), true
}

// withUser is ctx of a request u makes.
func withUser(ctx context.Context, u *user) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// user returns the live sign-in of token. Every sign-in that idled out
// ends here, with its connection: one abandoned without signing out does
// not hold a connection for the console's life.
func (s *Server) user(token string) *user {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for t, u := range s.users {
		if now.Sub(u.used) > s.idle {
			delete(s.users, t)
			u.end()
		}
	}
	u := s.users[token]
	if u == nil {
		return nil
	}
	u.used = now
	return u
}

// loginPage offers the ways this console signs people in: Creds, the
// credentials form; Links, the one-time links rath up prints.
type loginPage struct {
	Frame
	Error        string
	Creds, Links bool
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if !s.signsIn() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login.html", "Sign in", s.loginPage(""))
}

func (s *Server) loginPage(err string) *loginPage {
	return &loginPage{Frame: Frame{Title: "Sign in"}, Error: err, Creds: s.login != nil, Links: s.links != nil}
}

// refuseSignIn answers a sign-in that failed with the sign-in page and why.
func (s *Server) refuseSignIn(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, "login.html", s.loginPage(why)); err != nil {
		s.log.Error("console: render", "page", "login.html", "err", err)
		return
	}
	_, _ = io.WriteString(w, b.String())
}

// signInCreds connects as the uploaded credentials, checks that the ledger
// answers that identity, and sets the cookie of the new sign-in.
func (s *Server) signInCreds(w http.ResponseWriter, r *http.Request) {
	if s.login == nil {
		s.refuseSignIn(w, "this console does not take credentials: open the one-time sign-in link")
		return
	}
	creds, err := uploaded(r)
	if err == nil {
		var u *user
		if u, err = s.connect(r.Context(), creds); err == nil {
			s.endSignIn(r)
			setCookie(w, r, u)
			s.log.Info("console: signed in", "as", u.as.String(), "with", "credentials")
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
	}
	s.log.Warn("console: sign-in refused", "err", err)
	s.refuseSignIn(w, err.Error())
}

// uploaded reads the credentials from the form: a file, or pasted text.
func uploaded(r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxCreds+4096)
	if f, _, err := r.FormFile("creds"); err == nil {
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxCreds+1))
		if err != nil {
			return nil, fmt.Errorf("read the credentials file: %w", err)
		}
		if len(b) > maxCreds {
			return nil, fmt.Errorf("the credentials file is larger than %d bytes: is it a credentials file?", maxCreds)
		}
		if len(b) > 0 {
			return b, nil
		}
	}
	if text := r.FormValue("text"); strings.TrimSpace(text) != "" {
		return []byte(text), nil
	}
	return nil, errors.New("choose your credentials file (the .nk rath creds add writes, or a NATS .creds), or paste it")
}

// connect signs in as creds: only a tenant user's credentials (the client
// role), so that a console never reads as a service.
func (s *Server) connect(ctx context.Context, creds []byte) (*user, error) {
	opts, id, err := auth.OptionsFrom(creds, "the uploaded credentials")
	clear(creds)
	if err != nil {
		return nil, err
	}
	if id.Role != auth.RoleClient {
		return nil, fmt.Errorf("these are %s credentials: sign in with a user's (client role) credentials", id.Role)
	}
	opts = append(append(append([]nats.Option{nats.Name("rath-console " + id.Principal.String()), nats.MaxReconnects(-1)}, client.KeepAlive()...), s.login.Options...), opts...)
	nc, err := nats.Connect(s.login.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("NATS at %s refused %s: %w", s.login.URL, id.Principal, err)
	}
	c, err := client.New(nc, client.As(id.Principal), client.WithSource("rath/console"))
	if err != nil {
		nc.Close()
		return nil, err
	}
	// The ledger must answer this identity (a removed user, a wrong server).
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := c.List(ctx, api.ListRequest{Status: "no such status"}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("the ledger does not answer %s: %w", id.Principal, err)
	}
	u, err := s.signIn(c, nc, id.Principal)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return u, nil
}

// endSignIn ends the sign-in r's cookie names, if any, and its connection.
func (s *Server) endSignIn(r *http.Request) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return
	}
	s.mu.Lock()
	u := s.users[ck.Value]
	delete(s.users, ck.Value)
	s.mu.Unlock()
	if u != nil {
		u.end()
	}
}

// signOut ends the sign-in and its connection.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	s.endSignIn(r)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// closeUsers ends every sign-in (Close).
func (s *Server) closeUsers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, u := range s.users {
		u.end()
		delete(s.users, t)
	}
}

// who is the identity pages say they act as: nobody's before a sign-in.
func (s *Server) who(r *http.Request) string {
	if u, ok := r.Context().Value(userKey{}).(*user); ok {
		return u.as.String()
	}
	if s.c != nil && !s.signsIn() {
		return s.c.Principal().String()
	}
	return ""
}
