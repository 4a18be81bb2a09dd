package mcpproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/internal/mcpproxy"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

var alice = events.Principal{Tenant: "acme", User: "alice"}

// ledger starts a real JetStream and ledger, and returns a client acting
// as alice.
func ledger(t *testing.T) *client.Client {
	t.Helper()
	_, nc := natstest.Start(t)
	url := nc.ConnectedUrl()
	natstest.AddUsers(t, url, alice)
	testrig.Ledger(t, url)
	c, err := client.New(natstest.ConnectUser(t, url, alice), client.As(alice), client.WithRetryFor(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// syncBuffer is a log both the test and the proxy write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func recorder(t *testing.T, c *client.Client, session, name string, log io.Writer) *mcpproxy.Recorder {
	t.Helper()
	rec, err := mcpproxy.New(mcpproxy.Config{Client: c, Session: session, Name: name, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rec
}

// host is a scripted MCP host on the proxy's stdin and stdout.
type host struct {
	t   *testing.T
	w   *io.PipeWriter
	out *bufio.Reader
}

func (h *host) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.w, line+"\n"); err != nil {
		h.t.Fatalf("write %s: %v", line, err)
	}
}

// read returns the next line the server sent, as the host reads it.
func (h *host) read() string {
	h.t.Helper()
	line, err := h.out.ReadString('\n')
	if err != nil {
		h.t.Fatalf("read from the proxy: %v (got %q)", err, line)
	}
	return strings.TrimSuffix(line, "\n")
}

// expect reads a line and fails unless it is want, byte for byte.
func (h *host) expect(want string) {
	h.t.Helper()
	if got := h.read(); got != want {
		h.t.Fatalf("the host read\n%s\nwant\n%s", got, want)
	}
}

// calls returns the session's tool events by call ID, in order of the
// calls' requests.
type recorded struct {
	req     *events.ToolRequested
	started *events.ToolStarted
	done    *events.ToolCompleted
	failed  *events.ToolFailed
	source  string
}

func calls(t *testing.T, c *client.Client, session string) ([]string, map[string]*recorded, events.Stored) {
	t.Helper()
	var order []string
	byID := map[string]*recorded{}
	var first events.Stored
	err := c.Events(context.Background(), session, client.Range{}, func(ev events.Stored) error {
		if ev.Seq == 1 {
			first = ev
		}
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		get := func(id string) *recorded {
			r := byID[id]
			if r == nil {
				r = &recorded{source: ev.Source}
				byID[id] = r
				order = append(order, id)
			}
			return r
		}
		switch d := d.(type) {
		case *events.ToolRequested:
			get(d.CallID).req = d
		case *events.ToolStarted:
			get(d.CallID).started = d
		case *events.ToolCompleted:
			get(d.CallID).done = d
		case *events.ToolFailed:
			get(d.CallID).failed = d
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return order, byID, first
}

// The proxy relays every line untouched both ways (a server's request to
// the host and the host's answer too, a line that is not JSON, a batch),
// and records each tools/call: its arguments, as run by its caller; the
// server's name and version; the result or the error with the duration; a
// huge result in a blob; an id the host reused before its answer, a call
// without a name (relayed, not recorded), and a call the server died
// during (failed, saying so with its stderr).
func TestStdioRelaysAndRecords(t *testing.T) {
	c := ledger(t)
	var logs syncBuffer
	rec := recorder(t, c, "stdio", "fake", &logs)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	server := exec.Command(os.Args[0], "-test.run=^$")
	server.Env = append(os.Environ(), fakeEnv+"=1")
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		err := mcpproxy.RunStdio(context.Background(), rec, server, inR, outW, &stderr)
		outW.Close()
		done <- err
	}()
	h := &host{t: t, w: inW, out: bufio.NewReaderSize(outR, 1<<20)}

	h.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"scripted","version":"1"}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":0, "result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake-server","version":"1.2.3"}}}`)
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	h.expect(`{"jsonrpc":"2.0", "id":1, "result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`)
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":2, "result":{"content":[{"type":"text","text":"hello"}]}}`)
	// A string id that prints like a number id is another request.
	h.send(`{"jsonrpc":"2.0","id":"2","method":"tools/call","params":{"name":"fail"}}`)
	h.expect(`{"jsonrpc":"2.0", "id":"2", "error":{"code":-32000,"message":"failing as asked"}}`)
	h.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"broken","arguments":{}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":3, "result":{"content":[{"type":"text","text":"it broke"}],"isError":true}}`)
	h.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"huge"}}`)
	if got := h.read(); len(got) < 100<<10 {
		t.Fatalf("the huge answer arrived as %d bytes", len(got))
	}
	// The server asks the host, and the host answers: both pass through.
	h.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask_host"}}`)
	h.expect(`{"jsonrpc":"2.0", "id":"srv-1", "method":"roots/list"}`)
	h.send(`{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}`)
	h.expect(`{"jsonrpc":"2.0", "id":5, "result":{"content":[{"type":"text","text":"host said {'roots':[]}"}]}}`)
	// Not JSON, both ways: relayed, recorded as nothing.
	h.send(`this is not json`)
	h.expect(`{"jsonrpc":"2.0", "id":null, "error":{"code":-32700,"message":"parse error"}}`)
	h.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"garble"}}`)
	h.expect(`this is { not json`)
	h.expect(`{"jsonrpc":"2.0", "id":6, "result":{"content":[{"type":"text","text":"after garble"}]}}`)
	// No name: the server refuses it; nothing is recorded.
	h.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":7, "error":{"code":-32602,"message":"no tool named"}}`)
	// An id reused before its answer: the first call cannot be told apart.
	h.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"hold"}}`)
	h.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"text":"second"}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":8, "result":{"content":[{"type":"text","text":"second"}]}}`)
	// A batch (protocol 2025-03-26).
	h.send(`[{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"in a batch"}}},{"jsonrpc":"2.0","method":"notifications/progress"}]`)
	h.expect(`[{"jsonrpc":"2.0", "id":9, "result":{"content":[{"type":"text","text":"in a batch"}]}}]`)
	// Arguments over the inline limit are kept in a blob.
	big := strings.Repeat("a", evidence.InlineLimit+1000)
	bigArgs := `{"text":"` + big + `"}`
	h.send(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":` + bigArgs + `}}`)
	h.expect(`{"jsonrpc":"2.0", "id":11, "result":{"content":[{"type":"text","text":"` + big + `"}]}}`)
	// The server dies during a call.
	h.send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"die"}}`)
	if line, err := h.out.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the server died the host read %q, %v; want the end", line, err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("RunStdio returned %v, want the server's exit status 3", err)
	}
	inW.Close()
	if err := rec.Close("the proxy stopped"); err != nil {
		t.Fatalf("close: %v\n%s", err, logs.String())
	}
	if !strings.Contains(stderr.String(), "dying as asked") {
		t.Errorf("the server's stderr did not pass through: %q", stderr.String())
	}
	if !strings.Contains(logs.String(), "without a tool name") {
		t.Errorf("the log does not say a call without a name was not recorded:\n%s", logs.String())
	}

	order, byID, first := calls(t, c, "stdio")
	if first.Type != events.TypeSessionStarted || first.Actor != alice.String() {
		t.Errorf("the session starts with %s by %q, want %s by %s", first.Type, first.Actor, events.TypeSessionStarted, alice)
	}
	type want struct {
		tool, args, result, err string
	}
	wants := []want{
		{tool: "fake.echo", args: `{"text":"hello"}`, result: "hello"},
		{tool: "fake.fail", err: "the server answered error -32000: failing as asked"},
		{tool: "fake.broken", args: `{}`, err: "it broke"},
		{tool: "fake.huge", result: "blob"},
		{tool: "fake.ask_host", result: "host said {'roots':[]}"},
		{tool: "fake.garble", result: "after garble"},
		{tool: "fake.hold", err: "the host sent another request with the same JSON-RPC id 8 before the server answered this one"},
		{tool: "fake.echo", args: `{"text":"second"}`, result: "second"},
		{tool: "fake.echo", args: `{"text":"in a batch"}`, result: "in a batch"},
		{tool: "fake.echo", args: "big", result: "blob"},
		{tool: "fake.die", err: "the MCP server exited before answering: exit status 3; its stderr ends: dying as asked"},
	}
	if len(order) != len(wants) {
		t.Fatalf("%d calls recorded, want %d", len(order), len(wants))
	}
	for i, w := range wants {
		r := byID[order[i]]
		if r.req == nil || r.started == nil || (r.done == nil) == (r.failed == nil) {
			t.Fatalf("call %d (%s): recorded %+v", i, w.tool, r)
		}
		if w.args == "big" {
			var note string
			if err := json.Unmarshal(r.req.Arguments, &note); err != nil || !strings.HasPrefix(note, fmt.Sprintf("[arguments: %d bytes in all: ", len(bigArgs))) {
				t.Errorf("call %d: big arguments kept as %.80s (%v)", i, r.req.Arguments, err)
			}
			ref := strings.TrimSuffix(note[strings.LastIndex(note, " ")+1:], "]")
			if whole, err := c.GetBlob(context.Background(), ref); err != nil || string(whole) != bigArgs {
				t.Errorf("call %d: the blob %s of the arguments holds %d bytes (%v)", i, ref, len(whole), err)
			}
			w.args = string(r.req.Arguments)
		}
		if r.req.Tool != w.tool || r.req.Runner != events.RunnerCaller || string(r.req.Arguments) != w.args || r.source != mcpproxy.Source {
			t.Errorf("call %d: requested %s %s runner %q from %q, want %s %s by the caller from %s", i, r.req.Tool, r.req.Arguments, r.req.Runner, r.source, w.tool, w.args, mcpproxy.Source)
		}
		if sb := r.started.Sandbox; sb == nil || sb.Backend != mcpproxy.Backend || sb.SandboxID != "fake-server@1.2.3" {
			t.Errorf("call %d: started in %+v, want mcp/fake-server@1.2.3", i, sb)
		}
		switch {
		case w.err != "":
			if r.failed == nil || !strings.HasPrefix(r.failed.Error, w.err) {
				t.Errorf("call %d (%s): completed %+v failed %+v, want failed with %q", i, w.tool, r.done, r.failed, w.err)
			}
		case w.result == "blob":
			if r.done == nil || r.done.ResultRef == "" || len(r.done.Result) > evidence.InlineLimit+200 {
				t.Fatalf("call %d: the huge result is not in a blob: %+v", i, r.failed)
			}
			whole, err := c.GetBlob(context.Background(), r.done.ResultRef)
			if want := map[bool]string{true: big, false: strings.Repeat("é", 50<<10)}[w.tool == "fake.echo"]; err != nil || string(whole) != want {
				t.Errorf("call %d: the blob holds %d bytes (%v), want the whole result", i, len(whole), err)
			}
		default:
			if r.done == nil || r.done.Result != w.result || r.done.DurationMS < 0 || r.done.Sandbox == nil {
				t.Errorf("call %d (%s): completed %+v failed %+v, want %q", i, w.tool, r.done, r.failed, w.result)
			}
		}
	}
}

// The recorder refuses what cannot name a session or a server.
func TestConfigRefusesBadNames(t *testing.T) {
	for _, cfg := range []mcpproxy.Config{
		{Session: "ok", Name: "fs"},
		{Client: &client.Client{}, Session: "a/b", Name: "fs"},
		{Client: &client.Client{}, Session: "ok", Name: "fs.read"},
		{Client: &client.Client{}, Session: "ok", Name: ""},
		{Client: &client.Client{}, Session: "ok", Name: strings.Repeat("a", 65)},
		{Client: &client.Client{}, Session: "ok", Name: "fs", Drain: -time.Second},
	} {
		if _, err := mcpproxy.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
}

func TestNameOf(t *testing.T) {
	for cmd, want := range map[string]string{
		"npx -y @modelcontextprotocol/server-filesystem /tmp": "filesystem",
		"uvx mcp-server-git --repository .":                   "git",
		"./bin/weather-mcp":                                   "weather",
		"node dist/index.js":                                  "dist",
		"docker run -i --rm mcp/fetch":                        "fetch",
		"python3 -m weather_server":                           "weather_server",
		"/usr/bin/123":                                        "mcp-123",
		"npx @scope/pkg@1.2.3":                                "pkg",
	} {
		got := mcpproxy.NameOf(strings.Fields(cmd))
		if got != want {
			t.Errorf("NameOf(%s) = %q, want %q", cmd, got, want)
		}
		if err := mcpproxy.ValidateName(got); err != nil {
			t.Errorf("NameOf(%s): %v", cmd, err)
		}
	}
}

func TestNameOfURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:8930/mcp":         "mcp",
		"http://localhost/mcp":              "mcp",
		"https://[::1]:9/mcp":               "mcp",
		"https://weather.example.com/mcp":   "weather",
		"https://9lives.example.com/mcp":    "mcp-9lives",
		"https://x_y.example.com:8443/a/b/": "x_y",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := mcpproxy.NameOfURL(u); got != want {
			t.Errorf("NameOfURL(%s) = %q, want %q", raw, got, want)
		}
	}
}

// A session that has ended records nothing: Open says so before the
// proxy relays anything.
func TestOpenRefusesAnEndedSession(t *testing.T) {
	c := ledger(t)
	ctx := context.Background()
	if _, err := c.Start(ctx, "done", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Emit(ctx, "done", &events.SessionClosed{Reason: "finished"}); err != nil {
		t.Fatal(err)
	}
	rec, err := mcpproxy.New(mcpproxy.Config{Client: c, Session: "done", Name: "fs"})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close("")
	if err := rec.Open(ctx); err == nil || !strings.Contains(err.Error(), "records no more calls") {
		t.Fatalf("Open of a closed session: %v", err)
	}
}

// A record that fails (here: the session was closed meanwhile) is logged
// and the relay goes on; Close says how many were lost. A call the server
// has not answered when the host leaves is failed, saying so.
func TestStdioRelayOutlivesRecording(t *testing.T) {
	c := ledger(t)
	var logs syncBuffer
	rec := recorder(t, c, "closing", "fake", &logs)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	server := exec.Command(os.Args[0], "-test.run=^$")
	server.Env = append(os.Environ(), fakeEnv+"=1")
	done := make(chan error, 1)
	go func() {
		err := mcpproxy.RunStdio(context.Background(), rec, server, inR, outW, io.Discard)
		outW.Close()
		done <- err
	}()
	h := &host{t: t, w: inW, out: bufio.NewReader(outR)}
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"recorded"}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":1, "result":{"content":[{"type":"text","text":"recorded"}]}}`)
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hold"}}`)
	inW.Close()
	if line, err := h.out.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the host left it read %q, %v", line, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("RunStdio: %v", err)
	}
	if err := rec.Close("the proxy stopped"); err != nil {
		t.Fatal(err)
	}
	order, byID, _ := calls(t, c, "closing")
	if len(order) != 2 || byID[order[1]].failed == nil || byID[order[1]].failed.Error != "the host closed the connection before the server answered" {
		t.Fatalf("recorded %d calls, the second %+v", len(order), byID[order[len(order)-1]])
	}

	// The session closes under a second proxy: its calls are relayed, not recorded.
	rec = recorder(t, c, "closing", "fake", &logs)
	if _, err := c.Emit(context.Background(), "closing", &events.SessionClosed{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	inR, inW = io.Pipe()
	outR, outW = io.Pipe()
	server = exec.Command(os.Args[0], "-test.run=^$")
	server.Env = append(os.Environ(), fakeEnv+"=1")
	go func() {
		err := mcpproxy.RunStdio(context.Background(), rec, server, inR, outW, io.Discard)
		outW.Close()
		done <- err
	}()
	h = &host{t: t, w: inW, out: bufio.NewReader(outR)}
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"relayed"}}}`)
	h.expect(`{"jsonrpc":"2.0", "id":1, "result":{"content":[{"type":"text","text":"relayed"}]}}`)
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("RunStdio: %v", err)
	}
	if err := rec.Close("the proxy stopped"); err == nil || !strings.Contains(err.Error(), "2 records of session closing are lost") {
		t.Fatalf("Close: %v", err)
	}
	if !strings.Contains(logs.String(), "a record failed; the relay goes on") {
		t.Errorf("the log does not say the records failed:\n%s", logs.String())
	}
}
