package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	c         *client.Client
	store     *eventstore.Store
	ref       string
	workspace string // the sandbox root
	url       string // the NATS server's
	// runner is the tool runner running; restart stops it and runs a new
	// one on the same configuration, as a restarted process would.
	runner  *testrig.Service
	restart func(t *testing.T)
}

// setup runs the ledger and the tool runner in-process, and stores a
// workflow whose MCP server "calc" is the test server of the mcp package.
// The runner places sessions on the local backend. It must stop cleanly when
// the test ends.
func setup(t *testing.T) *rig {
	t.Helper()
	return setupWith(t, `name: calc
agents:
  - name: a
    provider: scripted
    script: a.yaml
    tools: [calc.add, calc.write, calc.fail, calc.pid, word_count, nope]
mcp_servers:
  - name: calc
    command: [`+calcServer(t)+`]
    env: {GREETING: hello}
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`, func(c *service.Config) { c.Backend = "local" })
}

// setupWith is setup with another workflow (whose agents' scripts are
// "- content: hi") and the runner's configuration adjusted by opts.
func setupWith(t *testing.T, workflowYAML string, opts ...func(*service.Config)) *rig {
	t.Helper()
	dir := t.TempDir()
	wfFile := filepath.Join(dir, "w.yaml")
	write(t, wfFile, workflowYAML)
	// Stored as any client of the bus could store it, whatever destinations
	// its network lists name: the runner decides (its Sandbox.Net).
	wf, err := workflow.Load(wfFile, workflow.AllowNet(anyDestination))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range wf.Agents {
		if a.Script != "" {
			write(t, a.ScriptPath, "- content: hi\n")
		}
	}

	ns, nc := natstest.Start(t)
	// The runner stops before the ledger it appends through: it starts
	// after it.
	testrig.Ledger(t, ns.ClientURL())
	tnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleToolRunner)
	cfg := service.DefaultConfig()
	cfg.Sandbox.Root = filepath.Join(dir, "workspaces")
	cfg.Sandbox.Path = os.Getenv("PATH")
	cfg.MCP.Scratch = t.TempDir()
	for _, o := range opts {
		o(&cfg)
	}
	run := func() *testrig.Service {
		return testrig.Run(t, "tool runner", func(ctx context.Context) error { return service.Run(ctx, tnc, cfg, quiet) })
	}
	runner := run()

	// The ledger makes the streams; the test attaches to them once they
	// exist (making them too would race the ledger).
	actx, acancel := context.WithTimeout(context.Background(), time.Minute)
	defer acancel()
	store, err := eventstore.AttachWait(actx, nc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(nc)
	r := &rig{c: c, store: store, ref: testrig.Bundle(t, store, wf), workspace: cfg.Sandbox.Root, url: ns.ClientURL(), runner: runner}
	r.restart = func(t *testing.T) {
		t.Helper()
		if err := r.runner.Stop(); err != nil {
			t.Fatalf("stop the tool runner: %v", err)
		}
		r.runner = run()
	}
	return r
}

var (
	buildOnce sync.Once
	calcBin   string
	buildErr  error
)

// calcServer builds the mcp package's test server once per test binary.
func calcServer(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rath-mcp-calc-")
		if err != nil {
			buildErr = err
			return
		}
		calcBin = filepath.Join(dir, "calc")
		if out, err := exec.Command("go", "build", "-o", calcBin, "../internal/mcp/testdata/server").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build test MCP server: %v", buildErr)
	}
	return calcBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if calcBin != "" {
		os.RemoveAll(filepath.Dir(calcBin))
	}
	os.Exit(code)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) start(t *testing.T, id string) {
	t.Helper()
	if _, err := r.c.Start(context.Background(), id, events.SessionStarted{Workflow: "calc", WorkflowRef: r.ref}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) request(t *testing.T, id, callID, tool, args string) {
	t.Helper()
	req := &events.ToolRequested{CallID: callID, Tool: tool, Agent: "a"}
	if args != "" {
		req.Arguments = json.RawMessage(args)
	}
	if _, err := r.c.Emit(context.Background(), id, req); err != nil {
		t.Fatal(err)
	}
}

// finish waits for the call's completion or failure and returns the
// session's log up to it.
func (r *rig) finish(t *testing.T, id, callID string) []events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log []events.Stored
	found := errors.New("found")
	err := r.c.Watch(ctx, id, func(ev events.Stored) error {
		log = append(log, ev)
		if ev.Type != events.TypeToolCompleted && ev.Type != events.TypeToolFailed {
			return nil
		}
		var d struct {
			CallID string `json:"call_id"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.CallID == callID {
			return found
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("call %s did not finish: %v", callID, err)
	}
	return log
}

// of returns the events of one call, decoded.
func of(t *testing.T, log []events.Stored, callID string) []any {
	t.Helper()
	var out []any
	for _, ev := range log {
		d, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch d := d.(type) {
		case *events.ToolStarted:
			if d.CallID == callID {
				out = append(out, d)
			}
		case *events.ToolCompleted:
			if d.CallID == callID {
				out = append(out, d)
			}
		case *events.ToolFailed:
			if d.CallID == callID {
				out = append(out, d)
			}
		case *events.ChunkAppended:
			if d.ToolCallID == callID {
				out = append(out, d)
			}
		}
	}
	return out
}

// A tool of an MCP server of the session's workflow is registered when the
// session starts, runs in the session's workspace, and leaves the same
// evidence as a built-in: started with the sandbox, the result as a tool
// chunk, then the completion with commits and diff.
func TestMCPToolsRunWithEvidence(t *testing.T) {
	r := setup(t)
	r.start(t, "s1")

	deadline := time.Now().Add(30 * time.Second)
	for {
		spec, err := r.store.Tool(context.Background(), "calc.add")
		if err == nil {
			if spec.Server != "tool-runner" || !strings.Contains(string(spec.Parameters), `"a"`) {
				t.Fatalf("registered %+v", spec)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calc.add not registered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	r.request(t, "s1", "c1", "calc.add", `{"a":2,"b":3}`)
	got := of(t, r.finish(t, "s1", "c1"), "c1")
	if len(got) != 3 {
		t.Fatalf("events of c1: %#v", got)
	}
	started, chunk, done := got[0].(*events.ToolStarted), got[1].(*events.ChunkAppended), got[2].(*events.ToolCompleted)
	if started.Sandbox == nil || started.Sandbox.Backend != "local" || started.Attempt != 1 {
		t.Errorf("started %+v", started)
	}
	if chunk.Role != events.RoleTool || chunk.Content != "5" || chunk.Agent != "a" {
		t.Errorf("chunk %+v", chunk)
	}
	if done.Result != "5" || done.ExitCode != 0 || done.CommitBefore == "" || done.CommitAfter != done.CommitBefore || done.Sandbox == nil {
		t.Errorf("completed %+v", done)
	}

	// The server works in the session's workspace: its writes are the
	// call's diff.
	r.request(t, "s1", "c2", "calc.write", `{"path":"note.txt","content":"from MCP\n"}`)
	got = of(t, r.finish(t, "s1", "c2"), "c2")
	wrote, ok := got[len(got)-1].(*events.ToolCompleted)
	if !ok || wrote.CommitAfter == wrote.CommitBefore || !strings.Contains(wrote.Diff, "+from MCP") {
		t.Fatalf("write evidence %#v", got[len(got)-1])
	}
	if b, err := os.ReadFile(filepath.Join(r.workspace, "s1", "note.txt")); err != nil || string(b) != "from MCP\n" {
		t.Fatalf("workspace file: %q %v", b, err)
	}

	// The server's error fails the call, and the model reads why.
	r.request(t, "s1", "c3", "calc.fail", "")
	got = of(t, r.finish(t, "s1", "c3"), "c3")
	failed, ok := got[len(got)-1].(*events.ToolFailed)
	if !ok || failed.Error != "failing as asked" || got[len(got)-2].(*events.ChunkAppended).Content != "error: failing as asked" {
		t.Fatalf("fail evidence %#v", got)
	}
}

// Routing: a tool another server registered is left to it; a tool nobody
// serves fails at once rather than waiting forever.
func TestRoutingLeavesCustomToolsAndFailsUnknownOnes(t *testing.T) {
	r := setup(t)
	if err := r.store.PutTool(context.Background(), eventstore.ToolSpec{Name: "word_count", Server: "tool-word_count", Parameters: json.RawMessage(`{"type":"object"}`)}); err != nil {
		t.Fatal(err)
	}
	r.start(t, "s2")
	r.request(t, "s2", "custom", "word_count", `{"text":"a b"}`)
	r.request(t, "s2", "unknown", "nope", "")
	got := of(t, r.finish(t, "s2", "unknown"), "unknown")
	failed, ok := got[len(got)-1].(*events.ToolFailed)
	if !ok || !strings.Contains(failed.Error, "unknown tool nope") {
		t.Fatalf("unknown tool: %#v", got)
	}
	// Events of a session are handled in order: the custom call was seen
	// first, screened (no gate holds it: rath.tool.call.cleared) and left
	// to its server.
	st, err := r.c.State(context.Background(), "s2")
	if err != nil {
		t.Fatal(err)
	}
	if call := st.Tools["custom"]; call == nil || call.Status != "requested" || len(call.Seqs) != 2 || call.Screened != session.ScreenedClear {
		t.Fatalf("custom call %+v", call)
	}
}

// A session's server process stops when the session closes.
func TestServerStopsWhenItsSessionCloses(t *testing.T) {
	r := setup(t)
	r.start(t, "s3")
	r.request(t, "s3", "p", "calc.pid", "")
	got := of(t, r.finish(t, "s3", "p"), "p")
	pid, err := strconv.Atoi(got[len(got)-1].(*events.ToolCompleted).Result)
	if err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("server %d not running after the call", pid)
	}
	if _, err := r.c.Emit(context.Background(), "s3", &events.SessionClosed{Outcome: "done"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("server %d still running after its session closed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
