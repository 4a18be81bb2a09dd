package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/openrath/rath/internal/workflow"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// testServer builds testdata/server once per test binary.
func testServer(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rath-mcp-test-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "server")
		out, err := exec.Command("go", "build", "-o", binary, "./testdata/server").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build test MCP server: %v", buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newPool(t *testing.T, mod func(*Config)) *Pool {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Path = os.Getenv("PATH")
	cfg.Scratch = t.TempDir()
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewPool(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func target(t *testing.T, session string) Target {
	return Target{
		Workflow: "sha256:test",
		Server:   workflow.MCPServer{Name: "calc", Command: []string{testServer(t)}, Env: map[string]string{"GREETING": "hello"}},
		Session:  session,
		Dir:      t.TempDir(),
	}
}

func call(t *testing.T, p *Pool, tg Target, tool, args string) Result {
	t.Helper()
	res, err := p.Call(context.Background(), tg, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

func pidOf(t *testing.T, p *Pool, tg Target) int {
	t.Helper()
	pid, err := strconv.Atoi(call(t, p, tg, "pid", "").Text)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// gone waits until a process no longer exists.
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestToolsListsEachToolWithItsSchema(t *testing.T) {
	p := newPool(t, nil)
	tg := target(t, "")
	tools, err := p.Tools(context.Background(), tg.Workflow, tg.Server)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	echo, ok := byName["echo"]
	if !ok || echo.Description != "Echo the text." || len(tools) != 8 {
		t.Fatalf("tools %+v", tools)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(echo.InputSchema, &schema); err != nil || schema.Type != "object" || schema.Properties["text"] == nil {
		t.Fatalf("echo schema %s (%v)", echo.InputSchema, err)
	}
	// Listed once: a second listing is the first's, without a process.
	again, err := p.Tools(context.Background(), tg.Workflow, tg.Server)
	if err != nil || len(again) != len(tools) {
		t.Fatalf("second listing %v %v", again, err)
	}
}

func TestCallReturnsTextAndErrors(t *testing.T) {
	p := newPool(t, nil)
	tg := target(t, "s1")
	for _, c := range []struct {
		tool, args string
		want       Result
	}{
		{"echo", `{"text":"hi there"}`, Result{Text: "hi there"}},
		{"add", `{"a":2,"b":40}`, Result{Text: "42"}},
		{"fail", ``, Result{Text: "failing as asked", IsError: true}},
		{"image", `null`, Result{Text: "a dot\n[image: image/png, 4 bytes]"}},
	} {
		if got := call(t, p, tg, c.tool, c.args); got != c.want {
			t.Errorf("%s(%s) = %+v, want %+v", c.tool, c.args, got, c.want)
		}
	}
	if _, err := p.Call(context.Background(), tg, "nope", nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown tool: %v", err)
	}
	if _, err := p.Call(context.Background(), tg, "echo", json.RawMessage(`["x"]`)); err == nil || !strings.Contains(err.Error(), "JSON object") {
		t.Errorf("array arguments: %v", err)
	}
}

func TestServerEnvironmentIsOnlyPathHomeAndItsSpec(t *testing.T) {
	t.Setenv("RATH_TEST_SECRET", "s3cret")
	p := newPool(t, nil)
	tg := target(t, "s1")
	lines := strings.Split(call(t, p, tg, "env", "").Text, "\n")
	env := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	if env["PWD"] != tg.Dir {
		t.Errorf("working directory %q, want the workspace %q", env["PWD"], tg.Dir)
	}
	delete(env, "PWD")
	if len(env) != 3 || env["PATH"] != os.Getenv("PATH") || env["GREETING"] != "hello" || env["HOME"] == os.Getenv("HOME") || env["HOME"] == "" {
		t.Errorf("environment %v", env)
	}
}

func TestOneProcessPerSessionKeptBetweenCalls(t *testing.T) {
	p := newPool(t, nil)
	a, b := target(t, "a"), target(t, "b")
	pa := pidOf(t, p, a)
	if again := pidOf(t, p, a); again != pa {
		t.Fatalf("second call ran on process %d, first on %d", again, pa)
	}
	if pb := pidOf(t, p, b); pb == pa {
		t.Fatal("two sessions share a process")
	}
	// The same session under another workflow version is another process.
	a2 := a
	a2.Workflow = "sha256:other"
	if pidOf(t, p, a2) == pa {
		t.Fatal("two workflow versions share a process")
	}
}

func TestServerThatDiedIsStartedAgain(t *testing.T) {
	p := newPool(t, nil)
	tg := target(t, "s1")
	first := pidOf(t, p, tg)
	_, err := p.Call(context.Background(), tg, "crash", nil)
	if err == nil || !strings.Contains(err.Error(), "exited during the call") {
		t.Fatalf("crash: %v", err)
	}
	if second := pidOf(t, p, tg); second == first {
		t.Fatal("call ran on the dead process")
	}
}

func TestCloseSessionStopsItsServers(t *testing.T) {
	p := newPool(t, nil)
	a, b := target(t, "a"), target(t, "b")
	pa, pb := pidOf(t, p, a), pidOf(t, p, b)
	p.CloseSession("a")
	gone(t, pa)
	if syscall.Kill(pb, 0) != nil {
		t.Fatal("closing session a stopped session b's server")
	}
	if pidOf(t, p, a) == pa {
		t.Fatal("closed session's process reused")
	}
}

func TestIdleServerStops(t *testing.T) {
	p := newPool(t, func(c *Config) { c.Idle = 50 * time.Millisecond })
	pid := pidOf(t, p, target(t, "s1"))
	gone(t, pid)
}

func TestCloseStopsEverything(t *testing.T) {
	p := newPool(t, nil)
	tg := target(t, "s1")
	pid := pidOf(t, p, tg)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	gone(t, pid)
	if _, err := p.Call(context.Background(), tg, "echo", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestStartFailuresSayWhy(t *testing.T) {
	p := newPool(t, func(c *Config) { c.StartTimeout = 5 * time.Second })
	missing := target(t, "s1")
	missing.Server.Command = []string{"rath-no-such-mcp-server"}
	if _, err := p.Call(context.Background(), missing, "echo", nil); err == nil || !strings.Contains(err.Error(), "not found in PATH") {
		t.Errorf("missing command: %v", err)
	}
	quits := target(t, "s2")
	quits.Server.Command = []string{"sh", "-c", "echo broken config >&2; exit 1"}
	if _, err := p.Call(context.Background(), quits, "echo", nil); err == nil || !strings.Contains(err.Error(), "broken config") {
		t.Errorf("server that quits: %v", err)
	}
	if _, err := p.Tools(context.Background(), "sha256:x", quits.Server); err == nil {
		t.Error("listing a server that quits succeeded")
	}
}

func TestRender(t *testing.T) {
	size := int64(3)
	for _, c := range []struct {
		name string
		res  *sdk.CallToolResult
		want string
	}{
		{"texts", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: "b"}}}, "a\nb"},
		{"audio", &sdk.CallToolResult{Content: []sdk.Content{&sdk.AudioContent{MIMEType: "audio/wav", Data: []byte("xy")}}}, "[audio: audio/wav, 2 bytes]"},
		{"link", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ResourceLink{URI: "file:///a", Name: "a", Size: &size}}}, "[resource link: file:///a (a)]"},
		{"embedded text", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///b", MIMEType: "text/plain", Text: "body"}}}}, "[resource: file:///b, text/plain]\nbody"},
		{"embedded blob", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///c", Blob: []byte{1, 2}}}}}, "[resource: file:///c, 2 bytes]"},
		{"structured only", &sdk.CallToolResult{StructuredContent: map[string]int{"n": 1}}, `{"n":1}`},
		{"invalid UTF-8", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a\xffb"}}}, "a\uFFFDb"},
	} {
		if got := render(c.res); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestLookup(t *testing.T) {
	wf, err := workflow.Parse([]byte(`name: w
agents:
  - {name: a, provider: scripted, script: s.yaml, tools: [calc.add]}
mcp_servers:
  - {name: calc, command: [calc]}
rules:
  - {name: r, when: "true", route: {agent: a}}
`), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s, tool, ok := Lookup(wf, "calc.add"); !ok || s.Name != "calc" || tool != "add" {
		t.Errorf("calc.add: %v %q %v", s, tool, ok)
	}
	for _, name := range []string{"add", "fs.read", "calc.", ".add"} {
		if _, _, ok := Lookup(wf, name); ok {
			t.Errorf("%q found", name)
		}
	}
}
