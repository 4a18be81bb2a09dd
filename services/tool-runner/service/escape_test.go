package service_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/service"
)

// TestEscapesAreContainedAndRecorded runs a hostile agent's calls through
// the runner on each isolating backend: each escape is contained, and the
// session records how (exit code, the limits, what the network proxy
// decided).
func TestEscapesAreContainedAndRecorded(t *testing.T) {
	for _, backend := range []string{events.BackendBwrap, events.BackendGVisor} {
		t.Run(backend, func(t *testing.T) { escapesAreContainedAndRecorded(t, backend) })
	}
}

func escapesAreContainedAndRecorded(t *testing.T, backend string) {
	needBackend(t, backend)
	t.Setenv("OPENAI_API_KEY", "sk-operator-key-7777")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "allowed host answered")
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	// Another listener on the host's loopback, as rath up's console and
	// NATS port are, which the operator did not allow: a tenant's workflow
	// names it by address (prober) and by a name that resolves to it
	// (rebinder, this host's own name).
	console := strings.TrimPrefix(consoleSrv(t).URL, "http://")
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	byName := strings.ToLower(hostname) + ":" + console[strings.LastIndex(console, ":")+1:]
	wf := `name: boxes
sandbox: ` + backend + `
agents:
  - name: plain
    provider: scripted
    script: plain.yaml
    tools: [run]
  - name: fetcher
    provider: scripted
    script: fetcher.yaml
    tools: [run]
    network: [` + strconv.Quote(host) + `]
  - name: prober
    provider: scripted
    script: prober.yaml
    tools: [run]
    network: [` + strconv.Quote(console) + `]
  - name: rebinder
    provider: scripted
    script: rebinder.yaml
    tools: [run]
    network: [` + strconv.Quote(byName) + `]
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`
	r := setupWith(t, wf, sandboxUIDs, func(c *service.Config) {
		c.Isolation.Processes = 64
		// The operator allows the test's upstream, which listens on the
		// loopback too.
		if err := c.Sandbox.Net.Allow.Set(host); err != nil {
			t.Fatal(err)
		}
	})
	r.startWith(t, "e1", nil)

	run := func(callID, agent, script string) string {
		t.Helper()
		shell := "bash" // for /dev/tcp
		if !strings.Contains(script, "/dev/tcp") {
			shell = "sh" // dash gives up at the first refused fork; bash retries for seconds
		}
		args := fmt.Sprintf(`{"command": [%q, "-c", %s], "timeout_seconds": 20}`, shell, strconv.Quote(script))
		return r.ok(t, "e1", callID, agent, "run", args).Result
	}
	// The runner's environment (provider keys) is out of reach.
	if res := run("c1", "plain", `cat /proc/[0-9]*/environ | tr "\0" "\n"; env`); strings.Contains(res, "sk-operator-key-7777") {
		t.Errorf("a tool read the operator's key:\n%s", res)
	}
	// A fork bomb stops at the process limit, and the session says so.
	res := run("c2", "plain", `while sleep 1000.301 & do :; done`)
	for _, want := range []string{"Cannot fork", "limits: ", "nproc=64"} {
		if !strings.Contains(res, want) {
			t.Errorf("fork bomb result lacks %q:\n%s", want, res)
		}
	}
	if strings.HasPrefix(res, "exit code 0") {
		t.Errorf("fork bomb: %s", res)
	}
	// The network: none for plain, the allowed host for fetcher, through
	// the proxy, with the proxy's decisions in the result.
	get := fmt.Sprintf(`u=${HTTP_PROXY#http://}; [ -n "$u" ] || { echo no proxy; exit 7; }; exec 3<>/dev/tcp/${u%%:*}/${u##*:} && printf 'GET http://%[1]s/ HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n' >&3 && cat <&3`, host)
	if res := run("c3", "plain", get+`; echo x > /dev/tcp/`+strings.ReplaceAll(host, ":", "/")); strings.Contains(res, "allowed host answered") || !strings.Contains(res, "no proxy") {
		t.Errorf("an agent without network reached a host:\n%s", res)
	}
	res = run("c4", "fetcher", get)
	if !strings.Contains(res, "allowed host answered") || !strings.Contains(res, "network: GET "+host+" allowed") {
		t.Errorf("the allowed host, recorded:\n%s", res)
	}
	// A loopback port the operator did not allow, named by address: the
	// runner refuses the call before the command runs, naming the entry.
	connect := fmt.Sprintf(`u=${HTTP_PROXY#http://}; [ -n "$u" ] || { echo no proxy; exit 7; }; exec 3<>/dev/tcp/${u%%:*}/${u##*:} && printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\nGET /api HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n' >&3 && cat <&3`, console)
	args := fmt.Sprintf(`{"command": ["bash", "-c", %s], "timeout_seconds": 20}`, strconv.Quote(connect))
	done, failed := r.call(t, "e1", "c5", "prober", "run", args)
	if failed == nil || !strings.Contains(failed.Error, console) || !strings.Contains(failed.Error, "loopback") || !strings.Contains(failed.Error, "--sandbox-allow-net") {
		t.Errorf("a loopback port by address: %+v %+v", done, failed)
	}
	// By a name that resolves to the loopback: the proxy refuses the
	// CONNECT, and the call's result records it.
	if _, err := net.LookupHost(hostname); err != nil {
		t.Logf("this host's name %s does not resolve (%v): the refusal by name is not tried", hostname, err)
		return
	}
	connect = strings.ReplaceAll(connect, console, byName)
	args = fmt.Sprintf(`{"command": ["bash", "-c", %s], "timeout_seconds": 20}`, strconv.Quote(connect))
	res = r.ok(t, "e1", "c6", "rebinder", "run", args).Result
	if !strings.Contains(res, "403 Forbidden") || strings.Contains(res, "console answered") || !strings.Contains(res, "network: CONNECT "+byName+" refused: "+strings.ToLower(hostname)+" resolves to ") {
		t.Errorf("a loopback port by a name that resolves to it:\n%s", res)
	}
}

// consoleSrv stands for rath up's console: it must never answer a sandbox.
func consoleSrv(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a sandbox reached the console: %s %s", r.Method, r.URL)
		fmt.Fprintln(w, "console answered")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// anyDestination admits every address in a workflow the rig stores (names
// are admitted unless special): the rig plays a client that skips the
// check, and the runner decides.
var anyDestination = func() egress.Allowlist {
	l, err := egress.ParseAllowlist([]string{"0.0.0.0/0,::/0"})
	if err != nil {
		panic(err)
	}
	return l
}()
