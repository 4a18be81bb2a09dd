package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// call requests a tool call in a session (no workflow: every tool is allowed)
// and waits for its completion.
func (r *rig) call(t *testing.T, id, callID, tool string, args any) *events.ToolCompleted {
	t.Helper()
	ctx := context.Background()
	raw, _ := json.Marshal(args)
	req, err := r.c.Emit(ctx, id, &events.ToolRequested{CallID: callID, Tool: tool, Arguments: raw, Agent: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var done *events.ToolCompleted
	found := errors.New("found")
	err = r.c.Watch(wctx, id, func(ev events.Stored) error {
		switch ev.Type {
		case events.TypeToolCompleted:
			if d := data[events.ToolCompleted](t, ev); d.CallID == callID {
				done = d
				return found
			}
		case events.TypeToolFailed:
			if d := data[events.ToolFailed](t, ev); d.CallID == callID {
				t.Fatalf("%s failed: %s", callID, d.Error)
			}
		}
		return nil
	}, client.From(req.Seq))
	if !errors.Is(err, found) {
		t.Fatalf("waiting for %s: %v", callID, err)
	}
	return done
}

// A fork gets its own workspace at the commit its parent's workspace had at
// the fork point: neither branch sees the other's later side effects.
func TestForkWorkspacesAreIsolated(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	r.start(t, "parent", events.SessionStarted{Task: "branching", Labels: map[string]string{"workspace": "repo"}})
	first := r.call(t, "parent", "w1", "write_file", map[string]string{"path": "notes.txt", "content": "shared\n"})
	st, _ := r.c.State(ctx, "parent")
	fork, err := r.c.Fork(ctx, api.ForkRequest{Parent: "parent", At: st.Seq, ID: "branch"})
	if err != nil {
		t.Fatal(err)
	}
	r.call(t, "parent", "w2", "write_file", map[string]string{"path": "notes.txt", "content": "parent only\n"})
	read := r.call(t, "branch", "r1", "read_file", map[string]string{"path": "notes.txt"})
	if !strings.Contains(read.Result, "shared") || strings.Contains(read.Result, "parent only") {
		t.Fatalf("the fork reads %q", read.Result)
	}
	r.call(t, "branch", "w3", "write_file", map[string]string{"path": "branch.txt", "content": "branch only\n"})
	list := r.call(t, "parent", "l1", "list_files", map[string]any{})
	if strings.Contains(list.Result, "branch.txt") {
		t.Fatalf("the parent sees the fork's file: %q", list.Result)
	}
	bst, _ := r.c.State(ctx, "branch")
	if bst.Sandbox == nil || bst.Sandbox.Session != "branch" || bst.Sandbox.Commit != first.CommitAfter || bst.Sandbox.Seq <= fork.Seq {
		t.Fatalf("fork placement %+v, want its own at commit %s", bst.Sandbox, first.CommitAfter)
	}
	log, _ := r.c.Log(ctx, "branch", client.Range{From: bst.Sandbox.Seq, To: bst.Sandbox.Seq})
	if p := data[events.SandboxPlaced](t, log[0]); !strings.Contains(p.Reason, "fork of parent at commit "+first.CommitAfter) {
		t.Fatalf("placement reason %q", p.Reason)
	}
}

// With two tool runners, each with a workspace root of its own, a session's
// calls reach either; the one that does not hold the workspace hands the call
// over, so every call sees every earlier change and the session is placed once.
func TestToolRunnersHandCallsOver(t *testing.T) {
	r := start(t) // one runner already
	second := toolrunner.DefaultConfig()
	second.Backend = "local" // as start's
	second.Sandbox.Root = t.TempDir()
	second.Sandbox.Path = os.Getenv("PATH")
	second.Sandbox.Env = toolrunner.SandboxEnv(toolrunner.PassEnvDefault, os.Getenv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	tnc := natstest.ConnectAs(t, r.url, auth.RoleToolRunner) // closed after the runner stopped
	go func() { done <- toolrunner.Run(ctx, tnc, second, quiet) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second runner: %v", err)
		}
	})

	r.start(t, "shared", events.SessionStarted{Labels: map[string]string{"workspace": "repo"}})
	const n = 10
	for i := 0; i < n; i++ {
		r.call(t, "shared", fmt.Sprintf("w%d", i), "write_file", map[string]string{"path": fmt.Sprintf("f%d.txt", i), "content": "x"})
		list := r.call(t, "shared", fmt.Sprintf("l%d", i), "list_files", map[string]any{})
		for j := 0; j <= i; j++ {
			if !strings.Contains(list.Result, fmt.Sprintf("f%d.txt", j)) {
				t.Fatalf("after %d writes the workspace lacks f%d.txt: %q", i+1, j, list.Result)
			}
		}
	}
	log, err := r.c.Log(context.Background(), "shared", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	placed := 0
	for _, ev := range log {
		if ev.Type == events.TypeSandboxPlaced {
			placed++
		}
	}
	if placed != 1 {
		t.Fatalf("placed %d times", placed)
	}
}
