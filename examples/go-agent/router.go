package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/routerapi"
)

// handover is a router written in Go: the workflow's rule handover asks it
// where the session goes after an agent's turn that called no tools. After
// the planner's, the reviewer reads the plan; after the reviewer's, the
// session closes. The selector records its answer as the rule's decision,
// naming the router.
type handover struct{}

func (handover) Route(_ context.Context, q agentserver.RouteRequest) (agentserver.RouteAnswer, error) {
	var done events.TurnCompleted
	if err := json.Unmarshal(q.Event.Data, &done); err != nil {
		return agentserver.RouteAnswer{}, fmt.Errorf("event %d is not a turn's end: %w", q.Event.Seq, err)
	}
	switch done.Agent {
	case "planner":
		return agentserver.RouteAnswer{Agent: "reviewer", Reason: "the plan is written; the reviewer reads it"}, nil
	case "reviewer":
		return agentserver.RouteAnswer{Close: &routerapi.Close{Outcome: "succeeded", Reason: "the reviewer approved the plan"}}, nil
	}
	return agentserver.RouteAnswer{}, fmt.Errorf("no hand-over after agent %q", done.Agent)
}
