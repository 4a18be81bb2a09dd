package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/session"
)

// planner is the Go agent. Its first turn writes a plan for the session's
// task to PLAN.md (a write_file call, which the tool runner runs in the
// session's sandbox and records with its diff); once the file is written it
// says so and ends, and the workflow hands the session to the reviewer.
// It decides from the session's state alone, so a turn asked again after a
// crash answers the same.
type planner struct{}

func (planner) Answer(_ context.Context, t agentserver.Turn) (agentserver.Answer, error) {
	if written(t.State) {
		return agentserver.Answer{Text: "The plan is in PLAN.md; over to the reviewer.",
			Usage: agentserver.Usage{TokensIn: int64(len(t.State.Chunks)), TokensOut: 9}}, nil
	}
	plan := fmt.Sprintf("# Plan: %s\n\n1. Read the code the task touches.\n2. Make the change, with a test.\n3. Run the tests.\n", t.State.Task)
	args, err := json.Marshal(map[string]string{"path": "PLAN.md", "content": plan})
	if err != nil {
		return agentserver.Answer{}, err
	}
	return agentserver.Answer{
		Text:      "I will write the plan down.",
		ToolCalls: []agentserver.ToolCall{{Tool: "write_file", Arguments: args}},
		Usage:     agentserver.Usage{TokensIn: int64(len(t.State.Task)), TokensOut: int64(len(strings.Fields(plan)))},
	}, nil
}

// written tells whether a write of PLAN.md completed in the session.
func written(st *session.State) bool {
	for _, call := range st.Tools {
		if call.Tool == "write_file" && call.Status == session.ToolCompleted && strings.Contains(string(call.Arguments), `"PLAN.md"`) {
			return true
		}
	}
	return false
}
