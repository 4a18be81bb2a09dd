// Package e2e runs the agent loop end to end on a real embedded JetStream:
// the ledger, the memory service, the selector, the agent worker (scripted
// models) and the tool runner (real tools in real git workspaces), each
// through its composition root, wired by internal/runtime as `rath up` is.
package e2e_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testsuite"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rig is the whole suite on a test server, as `rath up` runs it.
type rig struct {
	url   string     // the server's, to connect a role (natstest.ConnectAs)
	nc    *nats.Conn // of the client role
	c     *client.Client
	store *eventstore.Store
	seeds string // the directory workspace labels name seeds under
}

// start runs every service in-process; workers stop before the ledger.
func start(t *testing.T) *rig {
	t.Helper()
	return startWith(t, worker.DefaultConfig(), quiet)
}

// startWith is start with the agent worker's configuration, every service
// logging to log.
func startWith(t *testing.T, wcfg worker.Config, log *slog.Logger) *rig {
	t.Helper()
	return startSeeded(t, "testdata", wcfg, log)
}

// startUsers is start with tenants' users known to the server before the
// services run, for natstest.ConnectUser to connect them without reloading
// the server under traffic.
func startUsers(t *testing.T, users ...events.Principal) *rig {
	t.Helper()
	return startSeeded(t, "testdata", worker.DefaultConfig(), quiet, users...)
}

// startSeeded is startWith with the workspaces seeded from the directory
// seeds (an example's, say) instead of testdata, and users known to the
// server before the services start (see startUsers).
func startSeeded(t *testing.T, seeds string, wcfg worker.Config, log *slog.Logger, users ...events.Principal) *rig {
	t.Helper()
	ns, _ := natstest.Start(t)
	if len(users) > 0 {
		natstest.AddUsers(t, ns.ClientURL(), users...)
	}
	cfg := testsuite.Config(t, ns.ClientURL())
	cfg.Worker = wcfg
	rt := testsuite.Start(t, ns, cfg, runtime.WithLogger(log), runtime.WithClient("e2e"))
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	// The test inspects the streams and blobs as an operator would.
	store, err := eventstore.AttachWait(context.Background(), natstest.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{url: ns.ClientURL(), nc: rt.Conn, c: c, store: store, seeds: seeds}
}

// start starts session id as start says; a "workspace" label names a
// directory under the rig's seeds, which is packed and stored as the
// session's seed (client.SeedWorkspace), as rath start --workspace does.
func (r *rig) start(t *testing.T, id string, start events.SessionStarted) {
	t.Helper()
	ctx := context.Background()
	if dir := start.Labels[client.LabelWorkspace]; dir != "" {
		start.Labels = maps.Clone(start.Labels)
		if err := r.c.SeedWorkspace(ctx, filepath.Join(r.seeds, dir), &start); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.c.Start(ctx, id, start); err != nil {
		t.Fatal(err)
	}
}

// run starts a session of a workflow in testdata and waits until it is
// closed.
func (r *rig) run(t *testing.T, id, wfFile, workspace string) (*session.State, []events.Stored) {
	t.Helper()
	return r.runPath(t, id, filepath.Join("testdata", wfFile), workspace)
}

// startWorkflow starts session id of the workflow at path (its bundle
// stored, workflow.Store) with start's task and labels, without waiting.
func (r *rig) startWorkflow(t *testing.T, id, path string, start events.SessionStarted) {
	t.Helper()
	ctx := context.Background()
	wf, err := workflow.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if start.WorkflowRef, err = workflow.Store(ctx, wf, r.store.PutBlob); err != nil {
		t.Fatal(err)
	}
	start.Workflow, start.WorkflowHash = wf.Name, wf.Hash()
	r.start(t, id, start)
}

// runPath is run with the workflow file's path.
func (r *rig) runPath(t *testing.T, id, path, workspace string) (*session.State, []events.Stored) {
	t.Helper()
	ctx := context.Background()
	start := events.SessionStarted{Task: "make TestAdd pass"}
	if workspace != "" {
		start.Labels = map[string]string{"workspace": workspace}
	}
	r.startWorkflow(t, id, path, start)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var log []events.Stored
	closed := errors.New("closed")
	if err := r.c.Watch(wctx, id, func(ev events.Stored) error {
		log = append(log, ev)
		if ev.Type == events.TypeSessionClosed {
			return closed
		}
		return nil
	}); !errors.Is(err, closed) {
		types := make([]string, len(log))
		for i, ev := range log {
			types[i] = ev.Type
		}
		t.Fatalf("session %s did not close: %v; log: %v", id, err, types)
	}
	st, err := r.c.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st, log
}

func data[T any](t *testing.T, ev events.Stored) *T {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := d.(*T)
	if !ok {
		t.Fatalf("event %d is %s", ev.Seq, ev.Type)
	}
	return v
}

// A two-agent workflow with tool calls: the researcher reads, the coder fixes
// the code and runs the tests, and the session closes when they pass. The log
// alone explains every step.
func TestTwoAgentsFixAFailingTest(t *testing.T) {
	r := start(t)
	st, log := r.run(t, "fix", "two-agents.yaml", "repo")

	if st.Status != session.StatusClosed || st.Outcome != "succeeded" {
		t.Fatalf("session ended %s/%s (%s)", st.Status, st.Outcome, st.CloseReason)
	}
	// Every turn was routed by a recorded decision, and requested after it.
	var routes []string
	for i, ev := range log {
		if ev.Type != events.TypeTurnRequested {
			continue
		}
		req := data[events.TurnRequested](t, ev)
		prev := log[i-1]
		if prev.Type != events.TypeSelectorDecided || ev.Causation != prev.Causation {
			t.Fatalf("turn %s at %d not preceded by its decision", req.TurnID, ev.Seq)
		}
		routes = append(routes, req.Rule+"→"+req.Agent)
	}
	want := []string{"start→researcher", "continue→researcher", "code-after-research→coder", "continue→coder", "continue→coder"}
	if !slices.Equal(routes, want) {
		t.Fatalf("routes %v, want %v", routes, want)
	}
	// Tool evidence: the write changed calc.go (diff and commits), the test
	// run passed, each in the session's own sandbox.
	var wrote, tested bool
	for _, ev := range log {
		if ev.Type != events.TypeToolCompleted {
			continue
		}
		done := data[events.ToolCompleted](t, ev)
		if done.Sandbox == nil || done.Sandbox.Backend != "local" || done.CommitBefore == "" || done.CommitAfter == "" {
			t.Fatalf("tool %s lacks sandbox evidence: %+v", done.CallID, done)
		}
		switch done.Tool {
		case "write_file":
			wrote = strings.Contains(done.Diff, "-func Add(a, b int) int { return a - b }") &&
				strings.Contains(done.Diff, "+func Add(a, b int) int { return a + b }") && done.CommitAfter != done.CommitBefore
		case "run":
			tested = done.ExitCode == 0 && strings.Contains(done.Result, "ok")
		}
	}
	if !wrote || !tested {
		t.Fatalf("evidence: wrote %v, tested %v", wrote, tested)
	}
	if st.Sandbox == nil || st.Sandbox.Session != "fix" {
		t.Fatalf("placement %+v", st.Sandbox)
	}
	// Usage by agent, from the model call events.
	if st.Usage.ByAgent["researcher"].Calls != 2 || st.Usage.ByAgent["coder"].Calls != 3 || st.Counts.Turns != 5 {
		t.Fatalf("usage %+v turns %d", st.Usage.ByAgent, st.Counts.Turns)
	}
	// The model saw the tool results: the coder's last answer is the
	// scripted branch for passing tests.
	last := st.Chunks[len(st.Chunks)-1]
	if last.Agent != "coder" || last.Content != "The tests pass." {
		t.Fatalf("last chunk %+v", last)
	}
	if rep, err := r.c.Verify(context.Background(), "fix"); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A budget stops a workflow that would otherwise loop, with the reason.
func TestBudgetStopsALoop(t *testing.T) {
	r := start(t)
	st, _ := r.run(t, "loop", "looping.yaml", "")
	if st.Outcome != workflow.OutcomeBudget || !strings.Contains(st.CloseReason, "max_turns=3") || st.Counts.Turns != 3 {
		t.Fatalf("closed %s (%s) after %d turns", st.Outcome, st.CloseReason, st.Counts.Turns)
	}
	last := st.Decisions[len(st.Decisions)-1]
	if last.Rule != "budget" || last.Route != "close:"+workflow.OutcomeBudget {
		t.Fatalf("last decision %+v", last)
	}
}
