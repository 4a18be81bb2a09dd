package console_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// linkRig is rath up's console: one-time links that sign in as the client
// identity, answering only its own address; a ledger with a session s1.
type linkRig struct {
	c     *client.Client
	srv   *console.Server
	web   *httptest.Server
	clock *clock
}

const linkTTL = time.Minute

func startLinks(t *testing.T, tls bool) *linkRig {
	t.Helper()
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(context.Background(), "s1", events.SessionStarted{Task: "look at s1"}); err != nil {
		t.Fatal(err)
	}
	r := &linkRig{c: c, clock: &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	r.web = serve(t, tls, func(addr string) http.Handler {
		r.srv, err = console.New(c, slog.New(slog.DiscardHandler), console.WithHosts(addr),
			console.WithLinks(console.Links{TTL: linkTTL}), console.WithClock(r.clock.now))
		if err != nil {
			t.Fatal(err)
		}
		return r.srv
	})
	return r
}

// serve starts a test server whose handler knows the address it listens on.
func serve(t *testing.T, tls bool, handler func(addr string) http.Handler) *httptest.Server {
	t.Helper()
	web := httptest.NewUnstartedServer(nil)
	web.Config.Handler = handler(web.Listener.Addr().String())
	if tls {
		web.StartTLS()
	} else {
		web.Start()
	}
	t.Cleanup(web.Close)
	return web
}

// browser is a client with its own cookies that does not follow redirects.
func (r *linkRig) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := *r.web.Client() // the server's transport (its TLS certificate), not its client
	b.Jar = jar
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &b
}

type answer struct {
	code int
	to   string
	body string
	resp *http.Response
}

// do sends method path (a form body for POST) as b, with host as the Host
// when it is set.
func (r *linkRig) do(t *testing.T, b *http.Client, method, path, host string) answer {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("reason=from+the+test&at=1")
	}
	req, err := http.NewRequest(method, r.web.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if host != "" {
		req.Host = host
	}
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Location"), string(got), resp}
}

func (r *linkRig) link(t *testing.T, next string) string {
	t.Helper()
	p, expires, err := r.srv.Link(next)
	if err != nil {
		t.Fatal(err)
	}
	if want := r.clock.now().Add(linkTTL); !expires.Equal(want) {
		t.Errorf("link expires %v, want %v", expires, want)
	}
	if !strings.HasPrefix(p, "/login/") {
		t.Fatalf("link %q", p)
	}
	return p
}

// head is s1's last sequence: what the ledger holds.
func (r *linkRig) head(t *testing.T) (uint64, string) {
	t.Helper()
	st, err := r.c.State(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	return st.Seq, string(st.Status)
}

// Nothing of a console that signs in with links answers before a sign-in:
// pages send the browser to sign in, the API and every action answer 401
// and append nothing; forged, reused, expired links and links from another
// host are refused; a link signs a browser in once, in a cookie no script
// reads and no other site's request carries.
func TestLinkSignIn(t *testing.T) {
	r := startLinks(t, false)
	anon := r.browser(t)
	seq, status := r.head(t)

	for _, path := range []string{"/", "/s/s1", "/approvals", "/compare?a=s1&b=s1", "/s/s1/dossier.md", "/s/s1/graph.svg"} {
		if a := r.do(t, anon, http.MethodGet, path, ""); a.code != http.StatusSeeOther || a.to != "/login" || strings.Contains(a.body, "look at s1") {
			t.Errorf("GET %s before sign-in: %d → %q, want the sign-in page and no data:\n%s", path, a.code, a.to, a.body)
		}
	}
	for _, path := range []string{"/api/sessions", "/api/s/s1/events", "/api/s/s1/event/1", "/api/s/s1/state", "/api/s/s1/verify", "/api/s/s1/live", "/login/x/../../api/s/s1/events"} {
		if a := r.do(t, anon, http.MethodGet, path, ""); a.code == http.StatusOK || strings.Contains(a.body, "look at s1") || strings.Contains(a.body, "rath.session") {
			t.Errorf("GET %s before sign-in: %d, want no data:\n%s", path, a.code, a.body)
		}
	}
	if a := r.do(t, anon, http.MethodGet, "/api/s/s1/events", ""); a.code != http.StatusUnauthorized {
		t.Errorf("the API before sign-in: %d, want 401", a.code)
	}
	for _, path := range []string{"/s/s1/lifecycle/pause", "/s/s1/lifecycle/close", "/s/s1/fork", "/s/s1/approvals/a1/approve", "/logout"} {
		if a := r.do(t, anon, http.MethodPost, path, ""); a.code != http.StatusUnauthorized {
			t.Errorf("POST %s before sign-in: %d, want 401:\n%s", path, a.code, a.body)
		}
	}
	if got, st := r.head(t); got != seq || st != status {
		t.Fatalf("after actions before sign-in s1 is at %d (%s), was %d (%s): something was appended", got, st, seq, status)
	}
	if a := r.do(t, anon, http.MethodGet, "/login", ""); a.code != http.StatusOK || !strings.Contains(a.body, "one-time sign-in link") || strings.Contains(a.body, `name="creds"`) {
		t.Errorf("the sign-in page of a console with links only: %d\n%s", a.code, a.body)
	}
	if a := r.do(t, anon, http.MethodPost, "/login", ""); a.code != http.StatusUnauthorized || !strings.Contains(a.body, "does not take credentials") {
		t.Errorf("a credentials sign-in on a console with links only: %d\n%s", a.code, a.body)
	}
	if a := r.do(t, anon, http.MethodGet, "/assets/app.js", ""); a.code != http.StatusOK {
		t.Errorf("the script before sign-in: %d", a.code)
	}

	// Links nobody issued: refused, and no cookie.
	var raw [32]byte
	rand.Read(raw[:])
	valid := r.link(t, "/s/s1")
	for name, path := range map[string]string{
		"forged":          "/login/" + base64.RawURLEncoding.EncodeToString(raw[:]),
		"empty-ish":       "/login/%20",
		"a prefix":        valid[:len(valid)-1],
		"a longer one":    valid + "A",
		"upper case":      "/login/" + strings.ToUpper(strings.TrimPrefix(valid, "/login/")),
		"a cookie's name": "/login/rath_console",
	} {
		a := r.do(t, anon, http.MethodGet, path, "")
		if a.code != http.StatusUnauthorized || !strings.Contains(a.body, "not valid") || len(a.resp.Cookies()) != 0 {
			t.Errorf("a %s link: %d, cookies %v, want 401 and none:\n%s", name, a.code, a.resp.Cookies(), a.body)
		}
	}
	if a := r.do(t, anon, http.MethodGet, "/", ""); a.code != http.StatusSeeOther {
		t.Fatalf("after refused links: %d, want still signed out", a.code)
	}
	// A link opened for another host (a rebinding page) is refused and
	// stays unused; a HEAD (a link preview) does not use it up.
	_, port, _ := net.SplitHostPort(r.web.Listener.Addr().String())
	if a := r.do(t, anon, http.MethodGet, valid, "attacker.example:"+port); a.code != http.StatusMisdirectedRequest {
		t.Errorf("the link for another host: %d, want 421", a.code)
	}
	if a := r.do(t, anon, http.MethodHead, valid, ""); a.code != http.StatusMethodNotAllowed {
		t.Errorf("HEAD of the link: %d, want 405", a.code)
	}

	// The link signs in once.
	me := r.browser(t)
	a := r.do(t, me, http.MethodGet, valid, "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `href="/s/s1" data-continue`) || !strings.Contains(a.body, "as <b>"+r.c.Principal().String()) {
		t.Fatalf("the link: %d\n%s", a.code, a.body)
	}
	cookies := a.resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Secure || cookies[0].Path != "/" {
		t.Fatalf("the sign-in cookie: %+v, want one, HttpOnly, SameSite=Strict, not Secure without TLS", cookies)
	}
	if cc := a.resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the link's page: Cache-Control %q", cc)
	}
	if a := r.do(t, me, http.MethodGet, "/s/s1", ""); a.code != http.StatusOK || !strings.Contains(a.body, "look at s1") {
		t.Fatalf("s1 signed in: %d\n%s", a.code, a.body)
	}
	if a := r.do(t, me, http.MethodGet, "/api/s/s1/events", ""); a.code != http.StatusOK || !strings.Contains(a.body, "rath.session.started") {
		t.Fatalf("the API signed in: %d\n%s", a.code, a.body)
	}
	if a := r.do(t, r.browser(t), http.MethodGet, valid, ""); a.code != http.StatusUnauthorized || len(a.resp.Cookies()) != 0 {
		t.Errorf("the link again: %d, cookies %v, want 401 and none", a.code, a.resp.Cookies())
	}

	// Signed in, a page asked for by another host is still refused, and
	// its action does nothing.
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "localhost.:" + port} {
		if a := r.do(t, me, http.MethodGet, "/api/s/s1/events", host); a.code != http.StatusMisdirectedRequest || strings.Contains(a.body, "rath.session") ||
			!strings.Contains(a.body, "does not answer to the host") {
			t.Errorf("GET for %s signed in: %d, want 421:\n%s", host, a.code, a.body)
		}
		if a := r.do(t, me, http.MethodPost, "/s/s1/lifecycle/pause", host); a.code != http.StatusMisdirectedRequest {
			t.Errorf("POST for %s signed in: %d, want 421", host, a.code)
		}
	}
	if got, st := r.head(t); got != seq || st != status {
		t.Fatalf("after actions for another host s1 is at %d (%s), was %d (%s)", got, st, seq, status)
	}
	// From its own address it acts.
	if a := r.do(t, me, http.MethodPost, "/s/s1/lifecycle/pause", ""); a.code != http.StatusSeeOther {
		t.Fatalf("pause signed in: %d\n%s", a.code, a.body)
	}
	if _, st := r.head(t); st != "paused" {
		t.Fatalf("after pause: %s", st)
	}

	// A link not used within its TTL is refused.
	late := r.link(t, "")
	r.clock.add(linkTTL)
	if a := r.do(t, r.browser(t), http.MethodGet, late, ""); a.code != http.StatusUnauthorized || len(a.resp.Cookies()) != 0 {
		t.Errorf("an expired link: %d, want 401", a.code)
	}
	// A sign-in idle 8 hours ends; signing out ends it at once.
	if a := r.do(t, me, http.MethodGet, "/", ""); a.code != http.StatusOK {
		t.Fatalf("signed in after the link expired: %d", a.code)
	}
	r.clock.add(8*time.Hour + time.Second)
	if a := r.do(t, me, http.MethodGet, "/", ""); a.code != http.StatusSeeOther || a.to != "/login" {
		t.Errorf("after 8 idle hours: %d → %q, want the sign-in page", a.code, a.to)
	}
	again := r.browser(t)
	r.do(t, again, http.MethodGet, r.link(t, ""), "")
	if a := r.do(t, again, http.MethodGet, "/", ""); a.code != http.StatusOK {
		t.Fatalf("a second link: %d", a.code)
	}
	r.do(t, again, http.MethodPost, "/logout", "")
	if a := r.do(t, again, http.MethodGet, "/", ""); a.code != http.StatusSeeOther {
		t.Errorf("after signing out: %d, want the sign-in page", a.code)
	}

	// Links lead only to the console's own pages.
	for _, next := range []string{"https://attacker.example/", "//attacker.example/", "/\\attacker.example", "javascript:alert(1)", "s/s1"} {
		if p, _, err := r.srv.Link(next); err == nil {
			t.Errorf("a link to %q: %q, want it refused", next, p)
		}
	}
}

// Over TLS the sign-in cookie is Secure.
func TestLinkSignInOverTLS(t *testing.T) {
	r := startLinks(t, true)
	me := r.browser(t)
	a := r.do(t, me, http.MethodGet, r.link(t, ""), "")
	cookies := a.resp.Cookies()
	if a.code != http.StatusOK || len(cookies) != 1 || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("the link over TLS: %d, cookies %+v, want one Secure, HttpOnly, SameSite=Strict", a.code, cookies)
	}
	if a := r.do(t, me, http.MethodGet, "/s/s1", ""); a.code != http.StatusOK {
		t.Fatalf("s1 over TLS: %d", a.code)
	}
}
