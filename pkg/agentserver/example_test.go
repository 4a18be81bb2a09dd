package agentserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
)

// Serve a planner written in Go: its first turn asks the tool runner to
// write a plan, the next says it is done. A workflow declares it with
// served: true; `rath up` runs the rest (see examples/go-agent, whose test
// runs this against a whole Rath).
func ExampleServe() {
	ctx := context.Background()
	opts, _, err := client.Credentials(".rath/data/creds/agent-worker.creds")
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
