package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/mcpproxy"
	"github.com/openrath/rath/pkg/events"
)

// A real MCP server from npm (@modelcontextprotocol/server-filesystem,
// pinned by testdata/mcp-server/package-lock.json) behind rath mcp-proxy,
// driven by a scripted host on the proxy's stdin and stdout: the host reads
// the server's answers, and the session records each call as its caller's,
// with the server's name and version, the result or the error, and the
// duration. Node and npm are required: without them the test fails, naming
// the tool (scripts/install-sandbox.sh installs them).
func TestMCPProxyRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npm ci and an MCP server from npm on node")
	}
	node, npm := needTool(t, "node"), needTool(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := npmInstall(ctx, t, npm, filepath.Join("testdata", "mcp-server"))
	notes := t.TempDir()
	if err := os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("buy milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	url := startLedger(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		c := execute(ctx, env{
			Args: slices.Concat([]string{"--nats", url}, credsArgs(url), []string{"mcp-proxy", "--session", "notes", "--",
				node, filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), notes}),
			Stdin: inR, Stdout: outW, Stderr: &stderr,
		})
		outW.Close()
		code <- c
	}()
	out := bufio.NewReader(outR)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("write %s: %v (stderr %s)", line, err, stderr.String())
		}
	}
	read := func() map[string]any {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (stderr %s)", err, stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("the host read %q: %v", line, err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"scripted-host","version":"1"}}}`)
	if m := read(); !strings.Contains(jsonString(m["result"]), `"secure-filesystem-server"`) {
		t.Fatalf("initialize answered %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if m := read(); !strings.Contains(jsonString(m["result"]), `"read_text_file"`) {
		t.Fatalf("tools/list answered %v", m)
	}
	todo := filepath.Join(notes, "todo.txt")
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":` + jsonString(todo) + `}}}`)
	if m := read(); !strings.Contains(jsonString(m["result"]), "buy milk") {
		t.Fatalf("read_text_file answered %v", m)
	}
	send(`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/etc/passwd"}}}`)
	if m := read(); m["id"] != "three" {
		t.Fatalf("the call outside the allowed directory answered %v", m)
	}
	inW.Close() // the host is done: the proxy stops the server and exits
	if c := <-code; c != exitOK {
		t.Fatalf("rath mcp-proxy exited %d: %s", c, stderr.String())
	}

	var evs []events.Stored
	for _, line := range strings.Split(strings.TrimSpace(ok(t, url, "log", "notes", "--json")), "\n") {
		ev, err := events.ParseStored([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := []string{events.TypeSessionStarted,
		events.TypeToolRequested, events.TypeToolStarted, events.TypeToolCompleted,
		events.TypeToolRequested, events.TypeToolStarted, events.TypeToolFailed}
	if !slices.Equal(types, want) {
		t.Fatalf("the session holds %v, want %v", types, want)
	}
	started, _ := evs[0].Decode()
	if l := started.(*events.SessionStarted).Labels[mcpproxy.Label]; l != "filesystem" {
		t.Errorf("the session's label %s is %q, want filesystem (derived from the command)", mcpproxy.Label, l)
	}
	req, _ := evs[1].Decode()
	st, _ := evs[2].Decode()
	done, _ := evs[3].Decode()
	failed, _ := evs[6].Decode()
	r := req.(*events.ToolRequested)
	if r.Tool != "filesystem.read_text_file" || r.Runner != events.RunnerCaller || !strings.Contains(string(r.Arguments), "todo.txt") {
		t.Errorf("requested %+v", r)
	}
	if sb := st.(*events.ToolStarted).Sandbox; sb == nil || sb.Backend != "mcp" || sb.SandboxID != "secure-filesystem-server@0.2.0" {
		t.Errorf("started in %+v, want mcp/secure-filesystem-server@0.2.0", sb)
	}
	if d := done.(*events.ToolCompleted); d.CallID != r.CallID || d.Result != "buy milk\n" || d.DurationMS < 0 {
		t.Errorf("completed %+v", d)
	}
	if f := failed.(*events.ToolFailed); !strings.Contains(f.Error, "outside allowed directories") && !strings.Contains(f.Error, "Access denied") {
		t.Errorf("the call outside the allowed directory failed with %q", f.Error)
	}
	for _, ev := range evs[1:] {
		if ev.Source != mcpproxy.Source || ev.Actor == "" {
			t.Errorf("event %d from %q by %q", ev.Seq, ev.Source, ev.Actor)
		}
	}
	// The dossier reads the calls as the caller's, on the server named.
	dossier := filepath.Join(t.TempDir(), "dossier")
	ok(t, url, "export", "notes", "--out", dossier)
	md, err := os.ReadFile(filepath.Join(dossier, "dossier.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "run by the caller, outside Rath's sandbox; the caller reports sandbox mcp/secure-filesystem-server@0.2.0"; !strings.Contains(string(md), want) {
		t.Errorf("the dossier lacks %q:\n%s", want, md)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The command line is refused, naming the problem, before anything runs.
func TestMCPProxyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp-proxy", "--", "cat"}, "--session is required"},
		{[]string{"mcp-proxy", "--session", "s"}, "name the server"},
		{[]string{"mcp-proxy", "--session", "s", "cat"}, "put the server's command after --"},
		{[]string{"mcp-proxy", "--session", "s", "--listen", "127.0.0.1:0", "--upstream", "http://x/mcp", "--", "cat"}, "not both"},
		{[]string{"mcp-proxy", "--session", "s", "--listen", "127.0.0.1:0"}, "--listen and --upstream go together"},
		{[]string{"mcp-proxy", "--session", "s", "--listen", "127.0.0.1:0", "--upstream", "file:///etc/passwd"}, "want an http:// or https:// URL"},
		{[]string{"mcp-proxy", "--session", "s", "--name", "fs.read", "--", "cat"}, "invalid server name"},
		{[]string{"mcp-proxy", "--session", "s", "--listen", "0.0.0.0:8931", "--upstream", "http://x/mcp"}, "loopback address only"},
		{[]string{"mcp-proxy", "--session", "s", "--listen", "8931", "--upstream", "http://x/mcp"}, "want host:port"},
		{[]string{"mcp-proxy", "--session", "a/b", "--", "cat"}, "invalid session ID"},
	} {
		r := rath(t, "nats://127.0.0.1:1", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("rath %s: exit %d, %q; want %d naming %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

// Over streamable HTTP, rath mcp-proxy serves the upstream's path on a
// loopback port, relays a call's answer as the server sent it, records the
// call, and stops cleanly when interrupted.
func TestMCPProxyHTTP(t *testing.T) {
	url := startLedger(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/mcp" {
			http.NotFound(w, r)
			return
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}]}}\n\n", m.ID)
	}))
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- execute(ctx, env{
			Args:  slices.Concat([]string{"--nats", url}, credsArgs(url), []string{"mcp-proxy", "--session", "weather", "--listen", "127.0.0.1:0", "--upstream", upstream.URL + "/api/mcp"}),
			Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
		})
	}()
	waitFor(t, &stderr, "/api/mcp for ")
	addr := regexp.MustCompile(`serving (http://\S+/api/mcp) `).FindStringSubmatch(stderr.String())
	if addr == nil {
		t.Fatalf("no address in %q", stderr.String())
	}
	resp, err := http.Post(addr[1], "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"forecast","arguments":{"city":"Oslo"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}]}}\n\n" {
		t.Fatalf("the host read %q", body)
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("rath mcp-proxy exited %d: %s", c, stderr.String())
	}
	log := ok(t, url, "log", "weather")
	for _, want := range []string{"mcp.forecast", "sunny", "in mcp/mcp"} {
		if !strings.Contains(log, want) {
			t.Errorf("rath log weather lacks %q:\n%s", want, log)
		}
	}
}
