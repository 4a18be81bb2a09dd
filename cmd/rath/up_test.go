package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
)

func TestUp(t *testing.T) {
	cfg := runtime.DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- up(ctx, cfg, httpEndpoint{addr: "127.0.0.1:0", required: true}, gatewayEndpoint{}, &out, slog.New(slog.DiscardHandler))
	}()

	waitFor(t, &out, "\n")
	m := regexp.MustCompile(`^rath: NATS with JetStream at (nats://127\.0\.0\.1:\d+) \(data .+\)\n`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("up printed %q, want the client URL", out.String())
	}
	upCreds.Store(m[1], filepath.Join(cfg.Data, "creds", "client.nk"))
	waitReady(t, m[1])
	if got := ok(t, m[1], "start", "--id", "s1"); got != "s1\n" {
		t.Errorf("start through rath up printed %q", got)
	}
	// Its metrics say what the ledger stored and answered, and the
	// consumers' backlog; health and readiness answer.
	web := regexp.MustCompile(`rath: metrics and health at (http://127\.0\.0\.1:\d+)/metrics`).FindStringSubmatch(out.String())
	if web == nil {
		t.Fatalf("up printed %q, want the metrics endpoint", out.String())
	}
	// The selector creates its durable consumer as it starts, after up
	// printed: the scrape waits until the consumer is there.
	metrics := ""
	for deadline := time.Now().Add(30 * time.Second); ; {
		metrics = get(t, web[1]+"/metrics", http.StatusOK)
		if strings.Contains(metrics, `rath_consumer_pending{consumer="selector"}`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // pacing the polls, as waitReady does
	}
	for _, want := range []string{
		`rath_ledger_appends_total{type="rath.session.started"}`,
		`rath_requests_total{op="append",outcome="ok",service="ledger"}`,
		`rath_consumer_pending{consumer="selector"}`,
		`rath_dead_letters 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	get(t, web[1]+"/healthz", http.StatusOK)
	if body := get(t, web[1]+"/readyz", http.StatusOK); body != "ready\n" {
		t.Errorf("/readyz: %q", body)
	}
	// The console on the same address serves only a browser signed in
	// (with the link up printed, as the client) and only for its own
	// address; metrics and health stay open, and change nothing.
	if !strings.Contains(out.String(), "rath: console at "+web[1]+"/\n") {
		t.Errorf("up printed %q, want the console's address", out.String())
	}
	checkUpConsole(t, m[1], web[1], out.String())
	if nc, err := nats.Connect(m[1]); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("anonymous connect to rath up: %v, want %v", err, nats.ErrAuthorization)
	}
	first, err := auth.Load(filepath.Join(cfg.Data, "creds"))
	if err != nil {
		t.Fatalf("rath up's credentials: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("up returned %v after cancel, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not stop after cancel")
	}
	if r := rath(t, m[1], "ls", "--timeout", "200ms"); r.code != exitUnavailable {
		t.Errorf("after up stopped, ls exited %d (%s), want %d", r.code, r.stderr, exitUnavailable)
	}

	// A restart on the same data directory keeps every identity: the client
	// credentials of the first run still work.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	// Its metrics port taken by someone else: the default's is reported and
	// rath up goes on without; one the user named stops it, naming why.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var named syncBuffer
	if err := up(ctx, cfg, httpEndpoint{addr: taken.Addr().String(), required: true}, gatewayEndpoint{}, &named, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Errorf("up on a taken --http port returned %v, want an error naming it", err)
	}
	var again syncBuffer
	go func() {
		done <- up(ctx, cfg, httpEndpoint{addr: taken.Addr().String()}, gatewayEndpoint{}, &again, slog.New(slog.DiscardHandler))
	}()
	waitFor(t, &again, "\n")
	m = regexp.MustCompile(`^rath: NATS with JetStream at (nats://127\.0\.0\.1:\d+)`).FindStringSubmatch(again.String())
	if m == nil {
		t.Fatalf("up printed %q, want the client URL", again.String())
	}
	upCreds.Store(m[1], filepath.Join(cfg.Data, "creds", "client.nk"))
	waitReady(t, m[1])
	if got := ok(t, m[1], "ls"); !strings.Contains(got, "s1") {
		t.Errorf("ls after the restart printed %q, want s1", got)
	}
	if !strings.Contains(again.String(), "rath: no console, metrics or health endpoint: ") || !strings.Contains(again.String(), taken.Addr().String()+": address in use") {
		t.Errorf("up with its default metrics port taken printed %q, want it said", again.String())
	}
	// ... and the signing key: the events of the first run verify, and the
	// key file is the auditor's to pin.
	keyLine := regexp.MustCompile(`rath: events signed with key ([0-9a-f]{16}) \(`)
	k1, k2 := keyLine.FindStringSubmatch(out.String()), keyLine.FindStringSubmatch(again.String())
	if k1 == nil || k2 == nil || k1[1] != k2[1] {
		t.Fatalf("signing key of the first and second run: %q, %q", k1, k2)
	}
	pub := filepath.Join(cfg.Data, "keys", "ledger.pub")
	if got := ok(t, m[1], "verify", "s1", "--key", pub); !strings.Contains(got, "signed by "+k1[1]) {
		t.Errorf("verify after the restart printed %q", got)
	}
	reused, err := auth.Load(filepath.Join(cfg.Data, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range auth.Roles() {
		if reused.Identity(r) != first.Identity(r) {
			t.Errorf("role %s has a new identity after the restart", r)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("second up returned %v", err)
	}
}

// TestUpPortTaken: an address another process listens on stops rath up at
// once, saying it is in use, by whom, and the flag that chooses another.
func TestUpPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	next := nextPort(addr)
	holder := fmt.Sprintf("by pid %d (", os.Getpid()) // the listener is this test's
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"nats", []string{"--listen", addr}, []string{"rath: NATS cannot listen on " + addr + ": address in use", "--listen " + next, "--nats nats://" + next}},
		{"http", []string{"--listen", "127.0.0.1:0", "--http", addr}, []string{"rath: the console cannot listen on " + addr + ": address in use", "--http " + next}},
		{"gateway", []string{"--listen", "127.0.0.1:0", "--http", "", "--gateway", addr}, []string{"rath: the model gateway cannot listen on " + addr + ": address in use", "--gateway " + next}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := execute(context.Background(), env{Args: append([]string{"up", "--data", t.TempDir(), "--workspaces", t.TempDir()}, tc.args...), Stdout: &out, Stderr: &errb})
			if code != exitError {
				t.Errorf("up %s on a taken port exited %d, want %d", strings.Join(tc.args, " "), code, exitError)
			}
			msg := errb.String()
			for _, want := range append(tc.wants, holder) {
				if !strings.Contains(msg, want) {
					t.Errorf("up %s on a taken port printed %q, want %q in it", strings.Join(tc.args, " "), msg, want)
				}
			}
			if strings.Contains(msg, "not ready") || strings.Contains(msg, "--help") || strings.Contains(out.String(), "NATS with JetStream at") {
				t.Errorf("up %s on a taken port started something or waited: stdout %q, stderr %q", strings.Join(tc.args, " "), out.String(), msg)
			}
		})
	}
}

func TestUpConfig(t *testing.T) {
	var out bytes.Buffer
	code := execute(context.Background(), env{Args: []string{"up", "--sync", "sometimes", "--data", t.TempDir()}, Stdout: &out, Stderr: &out})
	if code != exitUsage {
		t.Errorf("up --sync sometimes exited %d (%s), want %d", code, out.String(), exitUsage)
	}
	// The agent worker's flags are checked with the rest, before anything starts.
	out.Reset()
	code = execute(context.Background(), env{Args: []string{"up", "--allow-loopback-endpoints", "--allow-base-url", "openai=http://127.0.0.1:8080/v1",
		"--allow-base-url", "openai=https://u@llm.example.com", "--data", t.TempDir()}, Stdout: &out, Stderr: &out})
	if code != exitUsage || !strings.Contains(out.String(), "--allow-base-url: endpoint openai=https://u@llm.example.com: user information") {
		t.Errorf("up --allow-base-url with user information exited %d (%s), want %d naming it", code, out.String(), exitUsage)
	}
}

// The model gateway's flags are checked before anything starts: an
// upstream that is not PROVIDER=URL of a known provider and an http(s) URL
// is a usage error naming the flag and the problem, and a named address it
// cannot listen on stops rath up, naming it.
func TestUpGatewayFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--gateway-upstream", "nonsense"}, exitUsage, "want PROVIDER=URL"},
		{[]string{"--gateway-upstream", "ftp=http://127.0.0.1:1/v1"}, exitUsage, `provider must be openai or anthropic, got "ftp"`},
		{[]string{"--gateway-upstream", "openai=file:///etc/passwd"}, exitUsage, "base URL must be an http or https URL"},
		{[]string{"--gateway-upstream", "openai="}, exitUsage, "base URL must be an http or https URL"},
		{[]string{"--gateway", "not-an-address"}, exitError, "the model gateway cannot listen on not-an-address (--gateway)"},
	} {
		var out bytes.Buffer
		code := execute(context.Background(), env{Args: append([]string{"up", "--listen", "127.0.0.1:0", "--http", "", "--data", t.TempDir(), "--workspaces", t.TempDir()}, tc.args...), Stdout: &out, Stderr: &out})
		if code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("up %s exited %d (%s), want %d saying %q", strings.Join(tc.args, " "), code, out.String(), tc.code, tc.want)
		}
		if strings.Contains(out.String(), "NATS with JetStream at") {
			t.Errorf("up %s started something: %s", strings.Join(tc.args, " "), out.String())
		}
	}
}

// --state-cache-bytes is checked before anything starts: a negative, a
// non-numeric or an absurd bound is a usage error naming the flag.
func TestUpStateCacheBytes(t *testing.T) {
	for _, v := range []string{"-1", "lots", "1.5", "", "99999999999999999999", "1099511627777"} {
		var out bytes.Buffer
		code := execute(context.Background(), env{Args: []string{"up", "--state-cache-bytes", v, "--data", t.TempDir(), "--workspaces", t.TempDir()}, Stdout: &out, Stderr: &out})
		if code != exitUsage || !strings.Contains(out.String(), "state-cache-bytes") {
			t.Errorf("up --state-cache-bytes %q exited %d (%s), want %d naming the flag", v, code, out.String(), exitUsage)
		}
		if strings.Contains(out.String(), "NATS with JetStream at") {
			t.Errorf("up --state-cache-bytes %q started something: %s", v, out.String())
		}
	}
}

// get fetches url and fails the test unless it answers with code.
func get(t *testing.T, url string, code int) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != code {
		t.Fatalf("GET %s: %s %q, want %d", url, res.Status, body, code)
	}
	return string(body)
}

// checkUpConsole checks rath up's console at web, whose output is out, on
// the NATS at url with a session s1: nothing before a sign-in, the link
// once, nothing for another host, metrics and health open to all.
func checkUpConsole(t *testing.T, url, web, out string) {
	t.Helper()
	link := regexp.MustCompile(`rath: console sign-in link \(signs one browser in, once, until \d\d:\d\d:\d\d\): (` + regexp.QuoteMeta(web) + `/login/[A-Za-z0-9_-]{43})\n`).FindStringSubmatch(out)
	if link == nil {
		t.Fatalf("up printed %q, want a sign-in link to the console", out)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, web+path, strings.NewReader("reason=x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if host != "" {
			req.Host = host
		}
		res, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := do("GET", "/", ""); code != http.StatusSeeOther || strings.Contains(body, "s1") {
		t.Errorf("the console before sign-in: %d, want the sign-in page:\n%s", code, body)
	}
	if code, body := do("GET", "/api/s/s1/events", ""); code != http.StatusUnauthorized || strings.Contains(body, "rath.session") {
		t.Errorf("the console's API before sign-in: %d, want 401:\n%s", code, body)
	}
	if code, _ := do("POST", "/s/s1/lifecycle/pause", ""); code != http.StatusUnauthorized {
		t.Errorf("pause before sign-in: %d, want 401", code)
	}
	if code, body := do("GET", "/login", ""); code != http.StatusOK || !strings.Contains(body, "one-time sign-in link") || !strings.Contains(body, `name="creds"`) {
		t.Errorf("rath up's sign-in page offers the link and the credentials: %d\n%s", code, body)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(web, "http://"))
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := do("GET", path, "attacker.example:"+port); code != http.StatusOK {
			t.Errorf("GET %s for any host: %d, want 200", path, code)
		}
		if code, _ := do("POST", path, ""); code < 400 {
			t.Errorf("POST %s: %d, want it refused", path, code)
		}
	}
	if code, _ := do("GET", strings.TrimPrefix(link[1], web), "attacker.example:"+port); code != http.StatusMisdirectedRequest {
		t.Errorf("the link for another host: %d, want 421", code)
	}
	if code, body := do("GET", strings.TrimPrefix(link[1], web), ""); code != http.StatusOK {
		t.Fatalf("the link: %d\n%s", code, body)
	}
	if code, body := do("GET", "/", ""); code != http.StatusOK || !strings.Contains(body, `href="/s/s1"`) || !strings.Contains(body, "as <b>default/client") {
		t.Errorf("the console's sessions page signed in: %d, want s1 listed, as the client:\n%s", code, body)
	}
	if code, body := do("GET", "/api/s/s1/events", "attacker.example:"+port); code != http.StatusMisdirectedRequest || strings.Contains(body, "rath.session") {
		t.Errorf("signed in, the API for another host: %d, want 421:\n%s", code, body)
	}
	if code, _ := do("POST", "/s/s1/lifecycle/pause", "attacker.example:"+port); code != http.StatusMisdirectedRequest {
		t.Errorf("signed in, pause for another host: %d, want 421", code)
	}
	if st := ok(t, url, "state", "s1"); !strings.Contains(st, "active") {
		t.Errorf("s1 after the refused pauses:\n%s", st)
	}
	fresh, _ := cookiejar.New(nil)
	browser.Jar = fresh
	if code, _ := do("GET", strings.TrimPrefix(link[1], web), ""); code != http.StatusUnauthorized {
		t.Errorf("the link used again: %d, want 401", code)
	}
}
