package agentserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// gated is a workflow with a served planner whose run calls need a
// maintainer's approval, and a scripted reviewer the server must leave to
// the agent worker.
const gated = `name: gated
agents:
  - name: planner
    served: true
    system: You plan.
    tools: [run, todo]
  - name: reviewer
    provider: scripted
    model: m
    script: reviewer.yaml
gates:
  - name: run-needs-approval
    tools: [run]
    action: run a command
    approver: maintainers
rules:
  - name: never
    when: event.type == "rath.session.paused"
    route: {close: {outcome: cancelled}}
`

// fixture is a ledger, a session running gated, and a server of the
// planner (not consuming: the test hands it events).
type fixture struct {
	c     *client.Client
	s     *server
	calls *atomic.Int32
}

func setup(t *testing.T, ans Answer) *fixture {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	ctx := context.Background()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{c: c, calls: &atomic.Int32{}}
	agent := Func(func(ctx context.Context, turn Turn) (Answer, error) {
		f.calls.Add(1)
		if turn.System != "You plan." || len(turn.Tools) != 2 || turn.State == nil || turn.State.Task != "plan" {
			t.Errorf("turn %+v", turn)
		}
		return ans, nil
	})
	// The agent worker records the answers; here it takes no turn itself.
	wnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker) // closed after the worker stops
	wctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- service.Served(wctx, wnc, service.DefaultConfig(), quiet) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("the agent worker's record API: %v", err)
		}
	})
	o := options{log: quiet, as: events.Service("agent-worker")}
	if f.s, err = newServer(ctx, natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker), "planner", agent, o); err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Parse([]byte(gated), "testdata/gated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The reviewer's script is not read here: only the agent worker runs it.
	ref, err := workflow.Store(ctx, wf, c.PutBlob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "s", events.SessionStarted{Task: "plan", Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}); err != nil {
		t.Fatal(err)
	}
	return f
}

// request appends a turn request and returns it as stored.
func (f *fixture) request(t *testing.T, turnID, agent string) events.Stored {
	t.Helper()
	ack, err := f.c.Emit(context.Background(), "s", &events.TurnRequested{TurnID: turnID, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	log, err := f.c.Log(context.Background(), "s", client.Range{From: ack.Seq, To: ack.Seq})
	if err != nil || len(log) != 1 {
		t.Fatalf("read back the request: %v", err)
	}
	return log[0]
}

// A turn handled twice (a redelivery) asks the agent once and records its
// answer once, in the agent worker's order, in one atomic append; a gated
// call comes with its approval request just before it, naming it.
func TestTurnRecordedOnceWithItsGate(t *testing.T) {
	f := setup(t, Answer{Text: "Run the tests, then note them.",
		ToolCalls: []ToolCall{{Tool: "run", Arguments: json.RawMessage(`{"command":["go","test"]}`)},
			{ID: "note", Tool: "todo", Arguments: json.RawMessage(`{"action":"add","id":"t"}`)}},
		Usage: Usage{Provider: "openai", Model: "gpt-x", TokensIn: 10, TokensOut: 3}})
	ctx := context.Background()
	req := f.request(t, "turn-1", "planner")
	for range 2 {
		if err := f.s.handle(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("the agent was asked %d times", n)
	}
	log, err := f.c.Log(ctx, "s", client.Range{From: req.Seq + 1})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range log {
		types = append(types, ev.Type)
		if ev.Causation != req.ID || ev.Source != Source("planner") || ev.Correlation != "turn-1" {
			t.Errorf("%s: causation %s, source %s, correlation %s", ev.Type, ev.Causation, ev.Source, ev.Correlation)
		}
	}
	want := []string{events.TypeChunkAppended, events.TypeApprovalRequested, events.TypeToolRequested, events.TypeToolRequested,
		events.TypeModelCalled, events.TypeTurnCompleted}
	if len(types) != len(want) {
		t.Fatalf("recorded %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("recorded %v, want %v", types, want)
		}
	}
	st, err := f.c.State(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	run, note := st.Tools["turn-1-0"], st.Tools["note"]
	if run == nil || run.Approval == "" || note == nil || note.Approval != "" {
		t.Fatalf("calls %+v %+v", run, note)
	}
	if a, ok := st.Approvals[run.Approval]; !ok || a.Gate != "run-needs-approval" || a.CallID != "turn-1-0" {
		t.Fatalf("approval %+v", a)
	}
	if u := st.Usage.ByModel["openai/gpt-x"]; u.In != 10 || u.Out != 3 || st.Counts.TurnsByAgent["planner"] != 1 || st.Turn != nil {
		t.Fatalf("usage %+v, turns %+v, turn in flight %+v", st.Usage, st.Counts, st.Turn)
	}
}

// Turns of other agents, and of agents the workflow does not serve, are
// not the server's: it neither asks its agent nor records anything.
func TestOtherTurnsLeftAlone(t *testing.T) {
	f := setup(t, Answer{Text: "never"})
	ctx := context.Background()
	for _, agent := range []string{"reviewer", "nobody"} {
		req := f.request(t, "turn-"+agent, agent)
		if err := f.s.handle(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// The planner's server, handed the reviewer's turn under its own name
	// in a workflow that does not serve it, leaves it too.
	f.s.name = "reviewer"
	if err := f.s.handle(ctx, f.request(t, "turn-r2", "reviewer")); err != nil {
		t.Fatal(err)
	}
	st, err := f.c.State(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 0 || len(st.Chunks) != 0 || st.Counts.Turns != 0 {
		t.Fatalf("asked %d times; state %+v", f.calls.Load(), st.Counts)
	}
}

// An agent's error ends its turn as failed, with the error's message.
func TestAgentErrorFailsTheTurn(t *testing.T) {
	f := setup(t, Answer{})
	f.s.agent = Func(func(context.Context, Turn) (Answer, error) { panic("no plan") })
	ctx := context.Background()
	if err := f.s.handle(ctx, f.request(t, "turn-1", "planner")); err != nil {
		t.Fatal(err)
	}
	st, err := f.c.State(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts.TurnsFailed != 1 || st.Turn != nil {
		t.Fatalf("counts %+v, turn %+v", st.Counts, st.Turn)
	}
}

func TestServeRefusesNames(t *testing.T) {
	for _, name := range []string{"", "worker", "my-agent", "1st"} {
		if err := Serve(context.Background(), nil, name, Func(nil)); err == nil {
			t.Errorf("Serve(%q): no error", name)
		}
	}
}
