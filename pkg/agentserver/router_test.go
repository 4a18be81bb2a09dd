package agentserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/testsuite"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/routerapi"
)

// dispatch is the Go router of testdata/routed-mix.yaml: the planner
// starts, the reviewer reads the plan, and the review closes the session.
func dispatch(_ context.Context, q agentserver.RouteRequest) (agentserver.RouteAnswer, error) {
	if q.Event.Type == events.TypeSessionStarted {
		return agentserver.RouteAnswer{Agent: "planner", Reason: "a plan comes first"}, nil
	}
	var done events.TurnCompleted
	if err := json.Unmarshal(q.Event.Data, &done); err != nil {
		return agentserver.RouteAnswer{}, err
	}
	switch done.Agent {
	case "planner":
		return agentserver.RouteAnswer{Agent: "reviewer", Reason: "the plan needs a review"}, nil
	case "reviewer":
		return agentserver.RouteAnswer{Close: &routerapi.Close{Outcome: "succeeded"}, Reason: "reviewed"}, nil
	}
	return agentserver.RouteAnswer{}, errors.New("no route after " + done.Agent)
}

// A workflow whose one rule asks a Go router mixes a served Go planner and
// a scripted reviewer and runs to its close through the built-in selector:
// each routing decision is the selector's, names the router and its reason,
// and the agents' turns are taken by the planner's server and the agent
// worker as with YAML routes. Two processes serve the router; both stop
// cleanly.
func TestServedRouterRoutesAMixedWorkflow(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	rt := testsuite.Start(t, ns, testsuite.Config(t, url), runtime.WithClient("test"))
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	planner := agentserver.Func(func(ctx context.Context, turn agentserver.Turn) (agentserver.Answer, error) {
		if len(turn.State.Tools) == 0 {
			return agentserver.Answer{Text: "Noting the work.", ToolCalls: []agentserver.ToolCall{{Tool: "todo",
				Arguments: json.RawMessage(`{"action":"add","id":"w","description":"the work"}`)}}}, nil
		}
		return agentserver.Answer{Text: "Plan done."}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 3)
	go func() {
		done <- agentserver.Serve(ctx, natstest.ConnectAs(t, url, auth.RoleAgentWorker), "planner", planner)
	}()
	for range 2 {
		nc := natstest.ConnectAs(t, url, auth.RoleAgentWorker)
		go func() { done <- agentserver.ServeRouter(ctx, nc, "dispatch", agentserver.RouterFunc(dispatch)) }()
	}

	wf, err := workflow.Load("testdata/routed-mix.yaml")
	if err != nil {
		t.Fatal(err)
	}
	startWorkflow(t, c, wf, "routed")
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	var routes []string
	closed := errors.New("closed")
	if err := c.Watch(wctx, "routed", func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		switch d := d.(type) {
		case *events.SelectorDecided:
			if d.Rule == "dispatch" && (d.Router != "dispatch" || d.Reason == "") {
				t.Errorf("decision %+v does not name the router and its reason", d)
			}
			routes = append(routes, d.Rule+"="+d.Route+"/"+d.Router)
		case *events.TurnFailed:
			t.Errorf("turn %s of %s failed: %s", d.TurnID, d.Agent, d.Error)
		case *events.HandlerFailed:
			t.Errorf("%s gave up: %s", d.Handler, d.Error)
		case *events.SessionClosed:
			return closed
		}
		return nil
	}); !errors.Is(err, closed) {
		t.Fatalf("the session did not close: %v (routes %v)", err, routes)
	}
	want := []string{"dispatch=agent:planner/dispatch", "continue=agent:planner/", "dispatch=agent:reviewer/dispatch", "dispatch=close:succeeded/dispatch"}
	if len(routes) != len(want) {
		t.Fatalf("routes %v, want %v", routes, want)
	}
	for i := range want {
		if routes[i] != want[i] {
			t.Fatalf("routes %v, want %v", routes, want)
		}
	}
	st, err := c.State(ctx, "routed")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" || st.Counts.TurnsByAgent["planner"] != 2 || st.Counts.TurnsByAgent["reviewer"] != 1 {
		t.Fatalf("outcome %s, turns %v", st.Outcome, st.Counts.TurnsByAgent)
	}
	cancel()
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}

// A router's error and panic are answered as errors, as is a question
// that does not decode: the selector never waits for an answer that will
// not come.
func TestServeRouterAnswersErrors(t *testing.T) {
	ns, admin := natstest.Start(t)
	router := agentserver.RouterFunc(func(_ context.Context, q agentserver.RouteRequest) (agentserver.RouteAnswer, error) {
		switch q.Rule {
		case "fails":
			return agentserver.RouteAnswer{}, errors.New("the oracle is out")
		case "panics":
			panic("boom")
		}
		return agentserver.RouteAnswer{Agent: "coder"}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker)
	go func() { done <- agentserver.ServeRouter(ctx, nc, "oracle", router) }()
	subject := routerapi.Subject(events.DefaultTenant, "oracle")
	ask := func(body string) (string, error) {
		m, err := admin.Request(subject, []byte(body), 10*time.Second)
		if err != nil {
			return "", err
		}
		return string(m.Data), nil
	}
	testrig.Eventually(t, 10*time.Second, "the router serves", func() (bool, string) {
		_, err := ask(`{"rule":"ok"}`)
		return err == nil, fmt.Sprint(err)
	})
	for body, want := range map[string]string{
		`{"rule":"ok"}`:     `{"agent":"coder"}`,
		`{"rule":"fails"}`:  `{"error":"the oracle is out"}`,
		`{"rule":"panics"}`: `{"error":"router oracle panicked: boom"}`,
		`not json`:          `{"error":"router oracle: not a question: invalid character 'o' in literal null (expecting 'u')"}`,
	} {
		if got, err := ask(body); err != nil || got != want {
			t.Errorf("asked %s: %s, %v; want %s", body, got, err, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ServeRouter refuses a name no rule can ask, and a nil router.
func TestServeRouterRefusesBadArguments(t *testing.T) {
	err := agentserver.ServeRouter(context.Background(), nil, "tri.age", nil)
	if !errors.Is(err, routerapi.ErrBadName) {
		t.Fatalf("ServeRouter: %v, want ErrBadName", err)
	}
}
