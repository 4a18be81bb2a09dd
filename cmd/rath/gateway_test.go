package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	gwservice "github.com/openrath/rath/services/model-gateway/service"
)

// TestUpServesTheGateway: rath up serves the model gateway; a tenant's user
// with a token minted in its credentials directory records a call through
// it, as that user, in a session of that user's tenant.
func TestUpServesTheGateway(t *testing.T) {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-operator" {
			http.Error(w, "wrong key", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m-1","choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer provider.Close()
	cfg := gatewayRuntime(t)
	dir := filepath.Join(cfg.Data, "creds")
	set, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	alice := events.Principal{Tenant: "acme", User: "alice"}
	if _, err := set.AddUser(alice); err != nil {
		t.Fatal(err)
	}
	token, err := auth.MintToken(dir, alice, "")
	if err != nil {
		t.Fatal(err)
	}
	m, nm := upWithGateway(t, cfg, provider.URL)
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, m+"/s/greet/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(answer, []byte(`"hello"`)) {
		t.Fatalf("gateway answered %d %s", resp.StatusCode, answer)
	}
	opts, who, err := client.Credentials(auth.UserPath(dir, alice))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(nm, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.As(who))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := c.Log(context.Background(), "greet", client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Type+" by "+ev.Actor)
	}
	want := []string{events.TypeSessionStarted, events.TypeChunkAppended, events.TypeChunkAppended, events.TypeModelCalled}
	if len(got) != len(want) {
		t.Fatalf("recorded %q", got)
	}
	for i := range want {
		if got[i] != want[i]+" by acme/alice" {
			t.Errorf("event %d is %s, want %s by acme/alice", i+1, got[i], want[i])
		}
	}
	st, err := c.State(context.Background(), "greet")
	if err != nil || st.Tenant != "acme" {
		t.Errorf("the session's state: %v, tenant %q, want acme", err, st.Tenant)
	}
}

// gatewayRuntime is rath up's configuration for a test: storing under a
// directory of the test's, NATS on a free port.
func gatewayRuntime(t *testing.T) runtime.Config {
	cfg := runtime.DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	return cfg
}

// upWithGateway runs rath up with cfg until the test ends, its model
// gateway on a free port asking the OpenAI-compatible provider at
// providerURL (its /v1) with the key sk-operator, and returns the
// gateway's URL and NATS's.
func upWithGateway(t *testing.T, cfg runtime.Config, providerURL string) (gwURL, natsURL string) {
	t.Helper()
	gw := gwservice.DefaultConfig()
	gw.Listen = "127.0.0.1:0"
	gw.Gateway.Upstreams = []gateway.Upstream{{Kind: "openai", BaseURL: providerURL + "/v1", Key: "sk-operator"}}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- up(ctx, cfg, httpEndpoint{}, gatewayEndpoint{cfg: gw, required: true}, &out, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("up returned %v", err)
		}
	})
	waitFor(t, &out, "model gateway at")
	m := regexp.MustCompile(`rath: model gateway at (http://127\.0\.0\.1:\d+)/s/<session>/v1 `).FindStringSubmatch(out.String())
	nm := regexp.MustCompile(`rath: NATS with JetStream at (nats://127\.0\.0\.1:\d+) `).FindStringSubmatch(out.String())
	if m == nil || nm == nil {
		t.Fatalf("up printed %q, want the gateway's and NATS's addresses", out.String())
	}
	return m[1], nm[1]
}

// gatewayUser adds the tenant user acme/alice to the credentials directory
// of a running rath up and mints it a gateway token, with the CLI, as the
// docs say; it returns the token and alice's credentials file.
func gatewayUser(ctx context.Context, t *testing.T, dir string) (token, creds string) {
	t.Helper()
	rathOK(ctx, t, "creds", "add", "--dir", dir, "--tenant", "acme", "--user", "alice")
	token = strings.TrimSpace(rathOK(ctx, t, "creds", "token", "add", "--dir", dir, "--user", "acme/alice"))
	return token, auth.UserPath(dir, events.Principal{Tenant: "acme", User: "alice"})
}

// rathOK runs the CLI in this process and returns its output; an exit
// other than 0 fails the test.
func rathOK(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := execute(ctx, env{Args: args, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	if code != exitOK {
		t.Fatalf("rath %s: exit %d, %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}
