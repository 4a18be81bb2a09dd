package agentserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Stop reasons recorded in rath.model.called, as the agent worker records
// a model's.
const (
	stopEndTurn = "end_turn"
	stopToolUse = "tool_use"
)

type server struct {
	name      string
	agent     Agent
	durable   string
	c         *client.Client
	store     *eventstore.Store
	states    *fold.Cache
	workflows *workflow.Library
	log       *slog.Logger
}

// handle takes one requested turn of the agent, once. Requests of other
// agents are acked without reading anything; a turn that ended already (a
// redelivery: the answer is stored whole or not at all) or was superseded
// is left alone, as is a session whose workflow does not serve the agent
// (the agent worker takes or fails those turns).
func (s *server) handle(ctx context.Context, ev events.Stored) error {
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
	if st.Status.Ended() || st.Turn == nil || st.Turn.ID != req.TurnID || st.WorkflowRef == "" {
		return nil
	}
	wf, err := s.workflows.Get(ctx, st.WorkflowRef)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
		return nil // the agent worker fails the turn, naming why
	}
	if err != nil {
		return err
	}
	a, ok := wf.Workflow.Agent(req.Agent)
	if !ok || !a.Served {
		return nil // the agent worker's turn
	}
	t := &turn{s: s, ev: ev, req: req}
	asked := Turn{Session: ev.Session, ID: req.TurnID, Agent: a.Name, Rule: req.Rule, System: a.System,
		Tools: s.tools(ctx, a.Tools), State: st}
	start := time.Now()
	ans, err := s.run(ctx, asked)
	latency := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return err // stopping: the turn is delivered again
	}
	if err != nil {
		return t.fail(ctx, err.Error())
	}
	return t.answered(ctx, st, wf.Workflow, ans, latency)
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

// gaveUp wraps the runner's failure record: a turn the runner gave up on is
// also ended (rath.agent.turn.failed), so its session is not left waiting
// for a turn that will never end.
func (s *server) gaveUp(record consume.Failure) consume.Failure {
	return func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error {
		if d, err := ev.Decode(); err == nil {
			if req, ok := d.(*events.TurnRequested); ok && req.Agent == s.name {
				t := &turn{s: s, ev: ev, req: req}
				if err := t.fail(ctx, "the agent server gave up: "+f.Error); err != nil && !api.Permanent(err) {
					return err
				}
			}
		}
		return record(ctx, ev, f)
	}
}

// turn records one turn's answer, with IDs derived from the request
// (internal/answer), as the agent worker does.
type turn struct {
	s   *server
	ev  events.Stored
	req *events.TurnRequested
}

func (t *turn) answer() answer.Answer { return answer.To(t.ev, t.s.durable, Source(t.s.name)) }

func (t *turn) fail(ctx context.Context, why string) error {
	_, err := t.answer().Emit(ctx, t.s.c, &events.TurnFailed{TurnID: t.req.TurnID, Agent: t.req.Agent, Error: why}, "failed")
	if errors.Is(err, api.ErrClosed) {
		return nil
	}
	return err
}

// answered records the answer and ends the turn, all or nothing in one
// atomic append, in the agent worker's order: the text as a chunk, each
// tool call (a gated one after its approval request, naming it: ADR 0025),
// the usage as rath.model.called, and rath.agent.turn.completed. A tool
// call keeps its ID unless it has none or the session has a call of that
// ID: then it is named after the turn.
func (t *turn) answered(ctx context.Context, st *session.State, wf *workflow.Workflow, ans Answer, latency time.Duration) error {
	var evs []event.Event
	add := func(what string, data any) error {
		ev, err := t.answer().Event(data, what)
		if err == nil {
			evs = append(evs, ev)
		}
		return err
	}
	if ans.Text != "" {
		if err := add("chunk", &events.ChunkAppended{Role: events.RoleAssistant, Agent: t.req.Agent, Content: ans.Text}); err != nil {
			return err
		}
	}
	calls := make([]workflow.Call, len(ans.ToolCalls))
	for i, c := range ans.ToolCalls {
		calls[i] = workflow.Call{ID: c.ID, Tool: c.Tool, Arguments: c.Arguments}
	}
	held := func(id string, m workflow.Match) {
		t.s.log.Warn("gate condition failed; the call waits for approval", "session", t.ev.Session, "call", id, "gate", m.Gate, "err", m.Err)
	}
	for _, r := range wf.CallEvents(st, t.ev.Session, t.req.TurnID, t.req.Agent, calls, time.Now(), held) {
		if err := add(r.What, r.Data); err != nil {
			return err
		}
	}
	stop := stopEndTurn
	if len(ans.ToolCalls) > 0 {
		stop = stopToolUse
	}
	called := &events.ModelCalled{Agent: t.req.Agent, Provider: ans.Usage.Provider, Model: ans.Usage.Model,
		TokensIn: ans.Usage.TokensIn, TokensOut: ans.Usage.TokensOut, LatencyMS: latency.Milliseconds(), Attempt: 1, StopReason: stop}
	if called.Provider == "" {
		called.Provider = DefaultProvider
	}
	if called.Model == "" {
		called.Model = t.req.Agent
	}
	if err := add("model", called); err != nil {
		return err
	}
	done := &events.TurnCompleted{TurnID: t.req.TurnID, Agent: t.req.Agent, StopReason: stop, ToolCalls: len(ans.ToolCalls)}
	if err := add("completed", done); err != nil {
		return err
	}
	_, err := t.s.c.AppendAtomic(ctx, evs)
	switch {
	case err == nil, errors.Is(err, api.ErrClosed):
		return nil
	case api.Permanent(err):
		// Nothing of the answer is stored: say why in the turn's end.
		return t.fail(ctx, "the ledger refused the agent's answer: "+err.Error())
	}
	return err
}
