package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
)

// rath start --workflow refuses a workflow whose agent names a tool that
// nobody offers (issue 30: it was accepted, and the session stalled for
// minutes): not registered and not a tool of an MCP server the workflow
// declares. It names the tool, the agent, what is registered and the way
// out; --allow-unregistered-tools starts it anyway. Before any tool runner
// registered its tools nothing is known: it says so and starts.
func TestStartChecksTheWorkflowsTools(t *testing.T) {
	url := startLedger(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.yaml", "- content: hi\n")
	wf := write("w.yaml", `name: tools
agents:
  - name: coder
    provider: scripted
    script: a.yaml
    tools: [run, run_tests, calc.add]
mcp_servers:
  - name: calc
    command: [calc-server]
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`)
	r := rath(t, url, "start", "--id", "early", "--workflow", wf)
	if r.code != exitOK || !strings.Contains(r.stderr, "no tool runner has registered its tools yet") {
		t.Fatalf("before any runner: exit %d, stderr %q", r.code, r.stderr)
	}

	// A tool runner registers its built-in tools (as the tool-runner role).
	store, err := eventstore.AttachWait(context.Background(), natstest.ConnectAs(t, url, auth.RoleToolRunner))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"run", "read_file"} {
		if err := store.PutTool(context.Background(), eventstore.ToolSpec{Name: name, Description: name, Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
			t.Fatal(err)
		}
	}
	r = rath(t, url, "start", "--id", "stalls", "--workflow", wf)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no tool runner or tool server offers run_tests (agent coder) (registered: read_file, run)") || !strings.Contains(r.stderr, "--allow-unregistered-tools") {
		t.Fatalf("an unregistered tool: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := rath(t, url, "state", "stalls"); r.code == exitOK {
		t.Errorf("the refused session was started:\n%s", r.stdout)
	}
	if r := rath(t, url, "start", "--id", "anyway", "--workflow", wf, "--allow-unregistered-tools"); r.code != exitOK {
		t.Errorf("--allow-unregistered-tools: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := store.PutTool(context.Background(), eventstore.ToolSpec{Name: "run_tests", Description: "Runs the tests.", Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-tests"}); err != nil {
		t.Fatal(err)
	}
	if r := rath(t, url, "start", "--id", "served", "--workflow", wf); r.code != exitOK || r.stderr != "" {
		t.Errorf("every tool offered: exit %d, stderr %q", r.code, r.stderr)
	}
}
