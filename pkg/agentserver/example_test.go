package agentserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/routerapi"
)

// Serve a planner written in Go: its first turn asks the tool runner to
// write a plan, the next says it is done. A workflow declares it with
// served: true; `rath up` runs the rest. Not run (it has no Output): it
// needs a Rath runtime. examples/go-agent serves a planner of this shape,
// and its test runs it against a whole Rath.
func ExampleServe() {
	ctx := context.Background()
	opts, _, err := client.Credentials(".rath/data/creds/agent-worker.nk")
	if err != nil {
		return
	}
	nc, err := nats.Connect(nats.DefaultURL, opts...)
	if err != nil {
		return
	}
	defer nc.Drain()
	planner := agentserver.Func(func(ctx context.Context, t agentserver.Turn) (agentserver.Answer, error) {
		for _, call := range t.State.Tools {
			if call.Tool == "write_file" && call.Status == "completed" {
				return agentserver.Answer{Text: "The plan is in PLAN.md."}, nil
			}
		}
		args, _ := json.Marshal(map[string]string{"path": "PLAN.md", "content": "1. " + t.State.Task + "\n"})
		return agentserver.Answer{
			Text:      "I will write the plan down.",
			ToolCalls: []agentserver.ToolCall{{Tool: "write_file", Arguments: args}},
			Usage:     agentserver.Usage{TokensIn: 12, TokensOut: 7},
		}, nil
	})
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Until ctx ends; more processes serving "planner" share its turns.
	_ = agentserver.Serve(ctx, nc, "planner", planner, agentserver.WithLogger(log))
}

// Serve a router written in Go: a workflow rule with route: {router:
// triage} asks it where the session goes, and the selector records its
// answer as the rule's decision. Here the question is asked by hand, as the
// selector asks it (routerapi.Subject, a JSON routerapi.Request), on a
// server of its own.
func ExampleServeRouter() {
	ns, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		return
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return
	}
	defer nc.Close()

	triage := agentserver.RouterFunc(func(ctx context.Context, q agentserver.RouteRequest) (agentserver.RouteAnswer, error) {
		if strings.Contains(q.State.Task, "bug") {
			return agentserver.RouteAnswer{Agent: "fixer", Reason: "a bug report"}, nil
		}
		return agentserver.RouteAnswer{Close: &routerapi.Close{Outcome: "declined"}, Reason: "not a bug"}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	// Until ctx ends; more processes serving "triage" share its questions.
	go func() { served <- agentserver.ServeRouter(ctx, nc, "triage", triage) }()

	for _, task := range []string{"fix the bug in slug()", "write a poem"} {
		q, _ := json.Marshal(routerapi.Request{Router: "triage", Session: "s1", Tenant: "default", Rule: "triage",
			Agents: []string{"fixer"}, Event: routerapi.Event{Type: "rath.session.started", Seq: 1, Data: json.RawMessage(`{}`)},
			State: routerapi.State{Status: "active", Task: task, Seq: 1}})
		// The selector asks again while no program serves the router.
		for {
			m, err := nc.Request(routerapi.Subject("default", "triage"), q, 10*time.Second)
			if errors.Is(err, nats.ErrNoResponders) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err == nil {
				fmt.Println(string(m.Data))
			}
			break
		}
	}
	cancel()
	fmt.Println(<-served)
	// Output:
	// {"agent":"fixer","reason":"a bug report"}
	// {"close":{"outcome":"declined"},"reason":"not a bug"}
	// <nil>
}
