package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/pkg/toolserver"
)

// One agent turn calls a tool of the workflow's MCP server and a custom
// tool served from the bus; the tool runner runs the first, the custom
// server the second, the selector waits for both, and the agent's next turn
// ends the session.
func TestMCPAndCustomToolsInTheLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts an MCP server program: run without -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "calc")
	if out, err := exec.Command("go", "build", "-o", bin, "../services/tool-runner/internal/mcp/testdata/server").CombinedOutput(); err != nil {
		t.Fatalf("build test MCP server: %v\n%s", err, out)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("counter.yaml", `- content: Counting.
  tool_calls:
    - name: calc.add
      arguments: {a: 2, b: 3}
    - name: word_count
      arguments: {text: one two three}
- content: Both tools answered.
`)
	wfFile := write("tools.yaml", `name: tools
agents:
  - name: counter
    provider: scripted
    model: scripted-1
    script: counter.yaml
    tools: [calc.add, word_count]
mcp_servers:
  - name: calc
    command: [`+bin+`]
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: counter}
  - name: done
    when: event.type == "rath.agent.turn.completed" && event.data.tool_calls == 0
    route: {close: {outcome: succeeded}}
budgets:
  max_turns: 4
`)

	r := start(t)
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	// A custom tool server uses the tool runner's identity (docs/security.md).
	tnc := natstest.ConnectAs(t, r.url, auth.RoleToolRunner)
	go func() {
		served <- toolserver.Serve(sctx, tnc, toolserver.Tool{
			Name:       "word_count",
			Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Handle: func(_ context.Context, args json.RawMessage) (string, error) {
				var in struct{ Text string }
				err := json.Unmarshal(args, &in)
				return strings.Repeat("word ", len(strings.Fields(in.Text))), err
			},
		}, toolserver.WithLogger(quiet))
	}()
	t.Cleanup(func() { // before the runtime stops: cleanups run last first
		stop()
		if err := <-served; err != nil {
			t.Errorf("tool server: %v", err)
		}
	})

	ctx := context.Background()
	r.startWorkflow(t, "tools", wfFile, events.SessionStarted{})
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var log []events.Stored
	closed := errors.New("closed")
	if err := r.c.Watch(wctx, "tools", func(ev events.Stored) error {
		log = append(log, ev)
		if ev.Type == events.TypeSessionClosed {
			return closed
		}
		return nil
	}); !errors.Is(err, closed) {
		for _, ev := range log {
			t.Logf("%d %s %s", ev.Seq, ev.Type, events.Summary(ev))
		}
		t.Fatalf("session did not close: %v (%d events)", err, len(log))
	}

	st, err := r.c.State(ctx, "tools")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" || st.Counts.Turns != 2 {
		t.Fatalf("closed %s after %d turns (%s)", st.Outcome, st.Counts.Turns, st.CloseReason)
	}
	results := map[string]*events.ToolCompleted{}
	sources := map[string]string{}
	for _, ev := range log {
		if ev.Type == events.TypeToolCompleted {
			done := data[events.ToolCompleted](t, ev)
			results[done.Tool], sources[done.Tool] = done, ev.Source
		}
	}
	if add := results["calc.add"]; add == nil || add.Result != "5" || add.Sandbox == nil || sources["calc.add"] != "rath/tool-runner" {
		t.Fatalf("calc.add: %+v from %s", add, sources["calc.add"])
	}
	if wc := results["word_count"]; wc == nil || wc.Result != "word word word " || sources["word_count"] != toolserver.Source("word_count") {
		t.Fatalf("word_count: %+v from %s", wc, sources["word_count"])
	}
	for _, call := range st.Tools {
		if call.Status != session.ToolCompleted || call.Attempts != 1 {
			t.Fatalf("call %+v", call)
		}
	}
}
