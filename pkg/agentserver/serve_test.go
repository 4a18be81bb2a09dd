package agentserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testsuite"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// A workflow mixing a served Go planner with a scripted reviewer runs to
// its close through the unchanged selector: two processes serve the
// planner on one durable consumer, each of its turns is answered once, by
// one of them, and the agent worker takes the reviewer's turns and leaves
// the planner's alone. Both servers stop cleanly.
func TestServedAndScriptedAgentsMix(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	rt := testsuite.Start(t, ns, testsuite.Config(t, url), runtime.WithClient("test"))
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}

	var asked atomic.Int32
	planner := agentserver.Func(func(ctx context.Context, turn agentserver.Turn) (agentserver.Answer, error) {
		asked.Add(1)
		if len(turn.State.Tools) == 0 {
			return agentserver.Answer{Text: "Noting the work.", ToolCalls: []agentserver.ToolCall{{Tool: "todo",
				Arguments: json.RawMessage(`{"action":"add","id":"w","description":"the work"}`)}}}, nil
		}
		return agentserver.Answer{Text: "Plan done."}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the runtime stops, if the test ends early
	done := make(chan error, 2)
	for range 2 {
		nc := natstest.ConnectAs(t, url, auth.RoleAgentWorker)
		go func() { done <- agentserver.Serve(ctx, nc, "planner", planner) }()
	}

	wf, err := workflow.Load("testdata/plan-review.yaml")
	if err != nil {
		t.Fatal(err)
	}
	startWorkflow(t, c, wf, "mix")
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	var log []events.Stored
	closed := errors.New("closed")
	if err := c.Watch(wctx, "mix", func(ev events.Stored) error {
		log = append(log, ev)
		if ev.Type == events.TypeSessionClosed {
			return closed
		}
		return nil
	}); !errors.Is(err, closed) {
		t.Fatalf("the session did not close: %v", err)
	}

	ended := map[string]int{}
	for _, ev := range log {
		d, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch d := d.(type) {
		case *events.TurnCompleted:
			ended[d.TurnID]++
			if want := map[string]string{"planner": agentserver.Source("planner"), "reviewer": "rath/agent-worker"}[d.Agent]; ev.Source != want {
				t.Errorf("turn %s of %s ended by %s, want %s", d.TurnID, d.Agent, ev.Source, want)
			}
		case *events.TurnFailed:
			t.Errorf("turn %s of %s failed: %s", d.TurnID, d.Agent, d.Error)
		case *events.ModelCalled:
			if d.Agent == "planner" && (d.Provider != agentserver.DefaultProvider || d.Model != "planner") {
				t.Errorf("planner's usage recorded as %s/%s", d.Provider, d.Model)
			}
		}
	}
	for id, n := range ended {
		if n != 1 {
			t.Errorf("turn %s ended %d times", id, n)
		}
	}
	st, err := c.State(ctx, "mix")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" || st.Counts.TurnsByAgent["planner"] != 2 || st.Counts.TurnsByAgent["reviewer"] != 1 || asked.Load() != 2 {
		t.Fatalf("outcome %s, turns %v, the planner asked %d times", st.Outcome, st.Counts.TurnsByAgent, asked.Load())
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

// startWorkflow stores wf's bundle and starts session id running it, with
// the task "plan".
func startWorkflow(t *testing.T, c *client.Client, wf *workflow.Workflow, id string) {
	t.Helper()
	ctx := context.Background()
	ref, err := workflow.Store(ctx, wf, c.PutBlob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, id, events.SessionStarted{Task: "plan", Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}); err != nil {
		t.Fatal(err)
	}
}

// Serving an agent or a router with an identity the server refuses (a
// user's, as the README's program uses) fails at once, saying which
// identity serves, rather than wait for ever for what it cannot see.
func TestServingWithAUsersIdentityFails(t *testing.T) {
	for name, serve := range map[string]func(context.Context, *nats.Conn) error{
		"agent": func(ctx context.Context, nc *nats.Conn) error {
			return agentserver.Serve(ctx, nc, "planner", agentserver.Func(func(context.Context, agentserver.Turn) (agentserver.Answer, error) {
				return agentserver.Answer{}, nil
			}))
		},
		"router": func(ctx context.Context, nc *nats.Conn) error {
			return agentserver.ServeRouter(ctx, nc, "handover", agentserver.RouterFunc(func(context.Context, agentserver.RouteRequest) (agentserver.RouteAnswer, error) {
				return agentserver.RouteAnswer{}, nil
			}))
		},
	} {
		t.Run(name, func(t *testing.T) {
			ns, _ := natstest.Start(t)
			// The violation is what the test expects: its own handler keeps
			// natstest from failing the test for it.
			nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := serve(ctx, nc); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "agent-worker") {
				t.Fatalf("serve as a user: %v (ctx %v), want an error naming the agent worker's identity", err, ctx.Err())
			}
		})
	}
}
