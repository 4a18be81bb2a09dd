package console_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// With sign-in, a person reads and acts as the credentials they upload: a
// tenant's user sees that tenant's sessions only, pages need a sign-in,
// other credentials are refused with the reason, and signing out ends it.
func TestSignIn(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	alice := events.Principal{Tenant: "acme", User: "alice"}
	bob := events.Principal{Tenant: "globex", User: "bob"}
	// Users before services: the server reloads its identities for each.
	aliceConn := natstest.ConnectUser(t, url, alice)
	bobConn := natstest.ConnectUser(t, url, bob)
	testrig.Ledger(t, url)
	ctx := context.Background()
	for _, u := range []struct {
		p  events.Principal
		nc *nats.Conn
		id string
	}{{alice, aliceConn, "alices-work"}, {bob, bobConn, "bobs-work"}} {
		c, err := client.New(u.nc, client.As(u.p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Start(ctx, u.id, events.SessionStarted{Task: "work of " + u.p.String()}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := console.New(nil, slog.New(slog.DiscardHandler), console.WithLogin(console.Login{URL: url}))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := browser.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}
	signIn := func(creds []byte) (int, string, string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("creds", "mine.creds")
		fw.Write(creds)
		mw.Close()
		resp, err := browser.Post(web.URL+"/login", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}

	if code, to, _ := get("/"); code != http.StatusSeeOther || to != "/login" {
		t.Fatalf("a page before sign-in: %d → %q, want the sign-in page", code, to)
	}
	if code, _, _ := get("/api/s/alices-work/events"); code != http.StatusUnauthorized {
		t.Fatalf("the API before sign-in: %d, want 401", code)
	}
	if code, _, body := get("/login"); code != 200 || !strings.Contains(body, `type="file" name="creds"`) {
		t.Fatalf("the sign-in page: %d\n%s", code, body)
	}
	for name, creds := range map[string][]byte{
		"not credentials":       []byte("hello"),
		"an operator's (admin)": read(t, natstest.CredsFile(t, url, auth.RoleAdmin)),
		"nothing":               nil,
	} {
		code, _, body := signIn(creds)
		if code != http.StatusUnauthorized || !strings.Contains(body, `class="bad"`) {
			t.Errorf("sign-in with %s: %d, want 401 with the reason:\n%s", name, code, body)
		}
	}

	code, to, _ := signIn(read(t, auth.UserPath(natstest.CredsDir(t, url), alice)))
	if code != http.StatusSeeOther || to != "/" {
		t.Fatalf("alice's sign-in: %d → %q", code, to)
	}
	_, _, list := get("/")
	if !strings.Contains(list, `href="/s/alices-work"`) || strings.Contains(list, "bobs-work") || !strings.Contains(list, "as <b>acme/alice</b>") {
		t.Errorf("alice's sessions page:\n%s", list)
	}
	if code, _, _ := get("/s/bobs-work"); code == http.StatusOK {
		t.Error("alice opened bob's session")
	}
	if code, _, _ := get("/s/alices-work"); code != http.StatusOK {
		t.Errorf("alice's own session: %d", code)
	}

	resp, err := browser.Post(web.URL+"/logout", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, to, _ := get("/"); code != http.StatusSeeOther || to != "/login" {
		t.Fatalf("after signing out: %d → %q, want the sign-in page", code, to)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A sign-in unused for longer than Idle ends, with its connection.
func TestSignInIdlesOut(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	alice := events.Principal{Tenant: "acme", User: "alice"}
	natstest.ConnectUser(t, url, alice)
	testrig.Ledger(t, url)
	srv, err := console.New(nil, slog.New(slog.DiscardHandler), console.WithLogin(console.Login{URL: url, Idle: time.Nanosecond}))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("creds", "alice.nk")
	fw.Write(read(t, auth.UserPath(natstest.CredsDir(t, url), alice)))
	mw.Close()
	resp, err := browser.Post(web.URL+"/login", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("sign-in: %s → %q", resp.Status, resp.Header.Get("Location"))
	}
	resp, err = browser.Get(web.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("after idling out: %s → %q, want the sign-in page", resp.Status, resp.Header.Get("Location"))
	}
}
