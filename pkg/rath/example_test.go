package rath_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// planner is a Go agent: its first turn notes the work as open (a call of
// the todo tool), and once the tool's result is in it states the plan.
var planner = agentserver.Func(func(ctx context.Context, t agentserver.Turn) (agentserver.Answer, error) {
	if len(t.State.Tools) == 0 {
		return agentserver.Answer{
			Text: "First I note the work.",
			ToolCalls: []agentserver.ToolCall{{Tool: "todo",
				Arguments: json.RawMessage(`{"action":"add","id":"tests","description":"make the tests pass"}`)}},
			Usage: agentserver.Usage{TokensIn: 40, TokensOut: 12},
		}, nil
	}
	return agentserver.Answer{Text: "Plan: fix Add, then run the tests.", Usage: agentserver.Usage{TokensIn: 60, TokensOut: 9}}, nil
})

// A Go program starts a session with a workflow that mixes a Go agent it
// serves (planner, served: true) with a scripted reviewer, and forwards it
// through the workflow: the selector's rules route planner → reviewer →
// close, and every step is an event in the session's log.
func Example() {
	r, err := startRig()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.stop()
	defer r.serve(func(ctx context.Context, nc *nats.Conn) error {
		return agentserver.Serve(ctx, nc, "planner", planner)
	})()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wf, err := workflowfile.Store(ctx, r.c, testdata("plan-review.yaml"))
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := rath.Start(ctx, r.c, rath.StartOptions{ID: "plan", Workflow: wf, Task: "fix the failing test"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if s, err = s.Forward(ctx, rath.Workflow{}); err != nil {
		fmt.Println(err)
		return
	}
	st, err := s.State(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("outcome:", st.Outcome)
	for _, c := range st.Chunks {
		fmt.Printf("%s %s: %s\n", c.Role, c.Agent, c.Content)
	}
	agents := make([]string, 0, len(st.Usage.ByAgent))
	for a := range st.Usage.ByAgent {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		u := st.Usage.ByAgent[a]
		fmt.Printf("usage %s: %d turns, %d in, %d out\n", a, st.Counts.TurnsByAgent[a], u.In, u.Out)
	}
	calls, _ := s.ToolCalls(ctx)
	for _, c := range calls {
		fmt.Printf("tool %s by %s: %s\n", c.Tool, c.Agent, c.Status)
	}
	// Output:
	// outcome: succeeded
	// assistant planner: First I note the work.
	// tool planner: added tests: make the tests pass (1 open)
	// assistant planner: Plan: fix Add, then run the tests.
	// assistant reviewer: The plan covers the task. Approved.
	// usage planner: 2 turns, 100 in, 21 out
	// usage reviewer: 1 turns, 120 in, 8 out
	// tool todo by planner: completed
}

// A program drives a session by hand: each step forwards it through one
// agent, the Go planner or the scripted reviewer, whoever takes the turn.
// A fork at the planner's step tries another review; the original session
// value still names the step it was taken at.
func ExampleAgent_Forward() {
	r, err := startRig()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.stop()
	defer r.serve(func(ctx context.Context, nc *nats.Conn) error {
		return agentserver.Serve(ctx, nc, "planner", agentserver.Func(
			func(ctx context.Context, t agentserver.Turn) (agentserver.Answer, error) {
				return agentserver.Answer{Text: "Plan for " + t.State.Task + ": fix Add."}, nil
			}))
	})()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wf, err := workflowfile.Store(ctx, r.c, testdata("by-hand.yaml"))
	if err != nil {
		fmt.Println(err)
		return
	}
	start, err := rath.Start(ctx, r.c, rath.StartOptions{ID: "by-hand", Workflow: wf, Task: "TestAdd"})
	if err != nil {
		fmt.Println(err)
		return
	}
	planned, err := rath.Agent("planner").Forward(ctx, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	reviewed, err := planned.Forward(ctx, rath.Agent("reviewer"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fork, err := planned.Fork(ctx, 0, "by-hand-b", "another review")
	if err != nil {
		fmt.Println(err)
		return
	}
	fork, err = fork.Forward(ctx, rath.Agent("reviewer"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []rath.Session{start, planned, reviewed, fork} {
		st, err := s.State(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		last := "(none)"
		if n := len(st.Chunks); n > 0 {
			last = st.Chunks[n-1].Agent + ": " + st.Chunks[n-1].Content
		}
		fmt.Printf("%s: %d turns, last %s\n", s, st.Counts.Turns, last)
	}
	// A turn of an agent the workflow does not declare fails, and says why.
	_, err = reviewed.Forward(ctx, rath.Agent("nobody"))
	fmt.Println(errors.Is(err, rath.ErrTurnFailed))
	// Output:
	// by-hand@1: 0 turns, last (none)
	// by-hand@5: 1 turns, last planner: Plan for TestAdd: fix Add.
	// by-hand@9: 2 turns, last reviewer: The plan covers the task. Approved.
	// by-hand-b@10: 2 turns, last reviewer: The plan covers the task. Approved.
	// true
}

// agentserverPlanner serves planner (the examples' Go agent) on nc.
func agentserverPlanner(ctx context.Context, nc *nats.Conn) error {
	return agentserver.Serve(ctx, nc, "planner", planner)
}
