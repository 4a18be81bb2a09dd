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
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// On a NATS server in operator mode a person signs in with their NATS user
// .creds file and the console acts as the principal its JWT's tag names; an
// expired or untagged file is refused with the reason.
func TestSignInWithUserJWT(t *testing.T) {
	op := natstest.StartOperator(t)
	lopts, _, err := auth.Options(op.CredsFile(t, "ledger", auth.RoleLedger, auth.RoleLedger.Principal()))
	if err != nil {
		t.Fatal(err)
	}
	lnc, err := nats.Connect(op.URL(), lopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lnc.Close)
	testrig.Run(t, "ledger", func(ctx context.Context) error {
		return ledger.Run(ctx, lnc, ledger.ConfigIn(t.TempDir()), slog.New(slog.DiscardHandler))
	})
	alice := events.Principal{Tenant: "acme", User: "alice"}
	creds := op.Creds(t, auth.RoleClient, alice)
	copts, _, err := auth.OptionsFrom(creds, "alice's")
	if err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(op.URL(), copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	c, err := client.New(anc, client.As(alice))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(context.Background(), "alices-work", events.SessionStarted{Task: "t"}); err != nil {
		t.Fatal(err)
	}

	srv, err := console.New(nil, slog.New(slog.DiscardHandler), console.WithLogin(console.Login{URL: op.URL()}))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(b []byte) (int, string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("creds", "alice.creds")
		fw.Write(b)
		mw.Close()
		resp, err := browser.Post(web.URL+"/login", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for name, c := range map[string]struct {
		edit func(*jwt.UserClaims)
		want string
	}{
		"expired":  {func(c *jwt.UserClaims) { c.Expires = time.Now().Add(-time.Minute).Unix() }, "expired at"},
		"untagged": {func(c *jwt.UserClaims) { c.Tags = nil }, "rath-principal:"},
	} {
		if code, body := signIn(op.Creds(t, auth.RoleClient, alice, c.edit)); code != http.StatusUnauthorized || !strings.Contains(body, c.want) {
			t.Errorf("sign-in with an %s JWT: %d, want 401 saying %q:\n%s", name, code, c.want, body)
		}
	}
	if code, _ := signIn(creds); code != http.StatusSeeOther {
		t.Fatalf("alice's sign-in with her .creds: %d", code)
	}
	resp, err := browser.Get(web.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	list, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(list), `href="/s/alices-work"`) || !strings.Contains(string(list), "as <b>acme/alice</b>") {
		t.Errorf("alice's sessions page:\n%s", list)
	}
}
