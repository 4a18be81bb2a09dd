package service_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/service"
)

// TestEscapesAreContainedAndRecorded runs a hostile agent's calls through
// the runner on the isolating backend: each escape is contained, and the
// session records how (exit code, the limits, what the network proxy
// decided).
func TestEscapesAreContainedAndRecorded(t *testing.T) {
	needBwrap(t)
	t.Setenv("OPENAI_API_KEY", "sk-operator-key-7777")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "allowed host answered")
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	wf := `name: boxes
sandbox: bwrap
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
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`
	r := setupWith(t, wf, sandboxUIDs, func(c *service.Config) { c.Isolation.Processes = 64 })
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
}
