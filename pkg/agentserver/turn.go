package agentserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/turn"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

type server struct {
	name    string
	agent   Agent
	durable string
	c       *client.Client
	store   *eventstore.Store
	turns   *turn.Server
	via     turn.Via
	log     *slog.Logger
}

// handle takes one requested turn of the agent, once. Requests of other
// agents are acked without reading anything; a turn that ended already (a
// redelivery: the answer is stored whole or not at all) or was superseded
// is left alone, as is a session whose workflow does not serve the agent
// (the agent worker takes or fails those turns).
func (s *server) handle(ctx context.Context, ev events.Stored) error {
	req, err := turn.Request(ev)
	if err != nil {
		return consume.Permanent(err)
	}
	if req == nil || req.Agent != s.name {
		return nil
	}
	a, err := s.turns.Take(ctx, ev, req, s.via)
	var unrunnable *turn.Unrunnable
	switch {
	case errors.Is(err, turn.ErrNotPending), errors.As(err, &unrunnable):
		return nil // the agent worker fails an unrunnable turn, naming why
	case err != nil:
		return err
	}
	if !a.Agent.Served {
		return nil // the agent worker's turn
	}
	return s.turns.Answer(ctx, a, turn.AnswerFunc(s.answer))
}

// answer asks the agent. Its error fails the turn.
func (s *server) answer(ctx context.Context, a *turn.Ask) (turn.Reply, error) {
	asked := Turn{Session: a.Stored.Session, ID: a.Request.TurnID, Agent: a.Agent.Name, Rule: a.Request.Rule, System: a.Agent.System,
		Tools: s.tools(ctx, a.Agent.Tools), State: a.State}
	start := time.Now()
	ans, err := s.run(ctx, asked)
	if err != nil {
		return turn.Reply{}, &turn.Failed{Why: err.Error()}
	}
	return reply(a.Request.Agent, ans, time.Since(start)), nil
}

// reply is the answer as the agent worker records a model's: the usage
// names DefaultProvider and the agent when the agent names none, and it
// stops for its tool calls if it has any.
func reply(agent string, ans Answer, latency time.Duration) turn.Reply {
	rep := turn.Reply{Text: ans.Text, Provider: cmp.Or(ans.Usage.Provider, DefaultProvider), Model: cmp.Or(ans.Usage.Model, agent),
		TokensIn: ans.Usage.TokensIn, TokensOut: ans.Usage.TokensOut, StopReason: turn.StopEndTurn, Latency: latency, Attempt: 1}
	for _, c := range ans.ToolCalls {
		rep.Calls = append(rep.Calls, workflow.Call{ID: c.ID, Tool: c.Tool, Arguments: c.Arguments})
	}
	if len(rep.Calls) > 0 {
		rep.StopReason = turn.StopToolUse
	}
	return rep
}

// run calls the agent, turning a panic into an error.
func (s *server) run(ctx context.Context, t Turn) (ans Answer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent %s panicked: %v", s.name, p)
		}
	}()
	return s.agent.Answer(ctx, t)
}

// tools describes the agent's tools from the registry. A tool not
// registered (yet) is named only: unlike a model, a Go agent is not offered
// the tools, so there is nothing to wait for.
func (s *server) tools(ctx context.Context, names []string) []Tool {
	out := make([]Tool, 0, len(names))
	for _, name := range names {
		t := Tool{Name: name}
		if spec, err := s.store.Tool(ctx, name); err == nil {
			t.Description, t.Parameters = spec.Description, spec.Parameters
		}
		out = append(out, t)
	}
	return out
}

// gaveUp wraps the runner's failure record: a turn of the agent the
// runner gave up on is also ended (rath.agent.turn.failed), so its session
// is not left waiting for a turn that will never end.
func (s *server) gaveUp(record consume.Failure) consume.Failure {
	return s.turns.GaveUp(record, s.via, func(req *events.TurnRequested) bool { return req.Agent == s.name }, nil)
}
