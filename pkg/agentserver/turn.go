package agentserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/agentapi"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

type server struct {
	name    string
	agent   Agent
	durable string
	c       *client.Client
	store   *eventstore.Store
	states  *fold.Cache
	log     *slog.Logger
}

// handle takes one requested turn of the agent, once. Requests of other
// agents are acked without reading anything; a turn that ended already (a
// redelivery: the answer is stored whole or not at all) or was superseded
// is left alone, as is a session whose workflow does not serve the agent
// (the agent worker takes or fails those turns). The agent worker checks
// the turn and records the answer (rath.agent.<tenant>.<user>.record).
func (s *server) handle(ctx context.Context, ev events.Stored) error {
	if ev.Type != events.TypeTurnRequested {
		return nil
	}
	d, err := ev.Decode()
	if err != nil {
		return consume.Permanent(err)
	}
	req, ok := d.(*events.TurnRequested)
	if !ok || req.Agent != s.name {
		return nil
	}
	st, err := s.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return err
	}
	if !st.Awaits(req.TurnID) {
		return nil
	}
	named := agentapi.Turn{Session: ev.Session, Seq: ev.Seq, TurnID: req.TurnID, Agent: req.Agent}
	spec, err := s.c.Agents().Turn(ctx, named)
	if err != nil {
		return s.refused(err)
	}
	asked := Turn{Session: ev.Session, ID: req.TurnID, Agent: req.Agent, Rule: req.Rule, System: spec.System,
		Tools: s.tools(ctx, spec.Tools), State: st}
	start := time.Now()
	ans, err := s.run(ctx, asked)
	latency := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return err // stopping: the turn is delivered again
	}
	rec := agentapi.RecordRequest{Turn: named}
	if err != nil {
		rec.Failure = err.Error()
	} else {
		rec.Answer = wire(ans, latency)
	}
	_, err = s.c.Agents().Record(ctx, rec)
	return s.refused(err)
}

// refused is what a refusal of the agent worker means for the delivery:
// a turn no longer pending, or not this server's, is left alone; a
// forbidden identity is a permanent error (the runner gives up and records
// why); anything else is delivered again.
func (s *server) refused(err error) error {
	switch {
	case err == nil, errors.Is(err, agentapi.ErrNotPending), errors.Is(err, agentapi.ErrNotServed), errors.Is(err, api.ErrNotFound):
		return nil
	case api.Permanent(err):
		return consume.Permanent(err)
	}
	return err
}

// wire is an answer as the agent worker takes it.
func wire(ans Answer, latency time.Duration) *agentapi.Answer {
	out := &agentapi.Answer{Text: ans.Text, Provider: ans.Usage.Provider, Model: ans.Usage.Model,
		TokensIn: ans.Usage.TokensIn, TokensOut: ans.Usage.TokensOut, LatencyMS: latency.Milliseconds()}
	for _, c := range ans.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, agentapi.ToolCall{ID: c.ID, Tool: c.Tool, Arguments: c.Arguments})
	}
	return out
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
	return func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error {
		if d, err := ev.Decode(); err == nil {
			if req, ok := d.(*events.TurnRequested); ok && req.Agent == s.name {
				_, err := s.c.Agents().Record(ctx, agentapi.RecordRequest{
					Turn:    agentapi.Turn{Session: ev.Session, Seq: ev.Seq, TurnID: req.TurnID, Agent: req.Agent},
					Failure: "the agent server gave up: " + f.Error})
				if err != nil && !api.Permanent(err) {
					return err
				}
			}
		}
		return record(ctx, ev, f)
	}
}
