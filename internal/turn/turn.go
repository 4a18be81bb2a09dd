// Package turn decides, records and recovers the answer to a requested
// agent turn: the one path by which the agent worker (a model's answer)
// and a served Go agent (pkg/agentserver) end a turn (ADR 0038).
//
// A Server takes a rath.agent.turn.requested (Take: is the turn still
// pending in the session's state, which workflow and agent run it), asks
// an Answerer, and records the answer in one conditional atomic append, in
// one order: the text as a chunk, each tool call (a gated one after its
// approval request, naming it: ADR 0025), rath.model.called with the usage
// and the wire bodies, and rath.agent.turn.completed. Every event's ID
// derives from the request (internal/answer), so a redelivered turn records
// its answer once; a redelivery that finds the answer recorded finishes the
// turn from the log instead of asking again (the answerer need not answer
// the same way twice).
package turn

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

// Stop reasons recorded in rath.model.called and rath.agent.turn.completed.
const (
	StopEndTurn = "end_turn"
	StopToolUse = "tool_use"
)

// ErrNotPending is Take's error for a turn the session's state shows ended
// (a redelivery: the answer is stored whole or not at all) or superseded
// by a later request: there is nothing to answer.
var ErrNotPending = errors.New("the turn is not pending")

// Unrunnable is Take's error for a turn the session cannot run: it runs no
// workflow, its workflow bundle is missing or does not open, or the
// workflow has no such agent. Reading again cannot help; the agent worker
// ends such a turn as failed, naming Why.
type Unrunnable struct{ Why string }

func (e *Unrunnable) Error() string { return e.Why }

// Failed is an Answerer's error that ends the turn as failed (the agent's
// error, every model attempt failed, a recall refused). Any other error of
// an Answerer is transient: the turn is delivered again.
type Failed struct {
	Why string
	// Attempts is how many model calls were made, each failed.
	Attempts int
}

func (e *Failed) Error() string { return e.Why }

// Via names who takes turns: what derives their events' IDs and signs them
// as their source, and how messages name them.
type Via struct {
	// Handler is the durable consumer's name, the first part of every
	// derived event ID: renaming it would record a redelivered turn twice.
	Handler string
	// Source is the CloudEvents source of the turn's events.
	Source string
	// Server names the taker in a failed turn's reason ("the agent worker").
	Server string
	// Answerer names what answers in a failed turn's reason ("model").
	Answerer string
}

// Ask is a pending turn, as an Answerer is asked it.
type Ask struct {
	// Stored is the turn's request as the ledger stored it.
	Stored  events.Stored
	Request *events.TurnRequested
	// State is the session folded up to the request at least.
	State *session.State
	// Workflow and Agent run the turn.
	Workflow *workflow.Loaded
	Agent    workflow.Agent
	via      Via
}

// Answer is the turn's answer to its request: every event of the turn
// (before its answer too: a recall, a compaction, a failed model attempt)
// is built through it, so that its ID, causation, correlation and source
// follow the one rule.
// Via returns who takes the turn.
func (a *Ask) Via() Via { return a.via }

func (a *Ask) Answer() answer.Answer { return answer.To(a.Stored, a.via.Handler, a.via.Source) }

// Reply is an answer to a turn.
type Reply struct {
	// Text is said as a conversation chunk of role assistant ("" says
	// nothing).
	Text string
	// Calls are the tools the answer asks to run. A call keeps its ID
	// unless it has none or the session has a call of that ID already:
	// then it is named after the turn (workflow.CallEvents).
	Calls []workflow.Call
	// Provider and Model name what answered, in rath.model.called.
	Provider, Model     string
	TokensIn, TokensOut int64
	// StopReason is StopEndTurn, StopToolUse or a provider's own.
	StopReason string
	Latency    time.Duration
	// Attempt is the model call's attempt that answered (1: the first).
	Attempt int
	// Choice is a scripted agent's choice among alternatives, if any.
	Choice *events.ScriptChoice
	// RequestBody and ResponseBody are the wire bodies of the model call,
	// stored as blobs and named by hash in rath.model.called.
	RequestBody, ResponseBody []byte
	// State is the state the answer was made from, when the answerer
	// recorded more before answering (a recall, a compaction): the calls'
	// gates read it. nil: the asked state.
	State *session.State
}

// Answerer answers a pending turn: a model provider with its layers
// (the agent worker), or a Go agent (pkg/agentserver). An error of type
// *Failed ends the turn as failed; any other is transient.
type Answerer interface {
	Answer(ctx context.Context, a *Ask) (Reply, error)
}

// AnswerFunc is an Answerer that is a function.
type AnswerFunc func(ctx context.Context, a *Ask) (Reply, error)

// Answer calls f.
func (f AnswerFunc) Answer(ctx context.Context, a *Ask) (Reply, error) { return f(ctx, a) }

// Server takes turns and records their answers.
type Server struct {
	c         *client.Client
	states    *fold.Cache
	workflows *workflow.Library
	putBlob   func(context.Context, []byte) (string, error)
	log       *slog.Logger
}

// New returns a server that appends through c, reads states from states
// and workflows from workflows, and stores wire bodies with putBlob.
func New(c *client.Client, states *fold.Cache, workflows *workflow.Library, putBlob func(context.Context, []byte) (string, error), log *slog.Logger) *Server {
	return &Server{c: c, states: states, workflows: workflows, putBlob: putBlob, log: log}
}

// Request decodes a stored event as a turn request; nil, nil for an event
// of another kind. An error is permanent: the event never decodes.
func Request(ev events.Stored) (*events.TurnRequested, error) {
	if ev.Type != events.TypeTurnRequested {
		return nil, nil
	}
	d, err := ev.Decode()
	if err != nil {
		return nil, fmt.Errorf("turn request %s: %w", ev.ID, err)
	}
	req, _ := d.(*events.TurnRequested)
	return req, nil
}

// Take reads what the turn request ev (decoded: req) needs to be answered.
// Its error is ErrNotPending, *Unrunnable (with the Ask, which Fail takes),
// or a read that failed, which a redelivery retries.
func (s *Server) Take(ctx context.Context, ev events.Stored, req *events.TurnRequested, via Via) (*Ask, error) {
	a := &Ask{Stored: ev, Request: req, via: via}
	st, err := s.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return nil, err
	}
	if !st.Awaits(req.TurnID) {
		return nil, ErrNotPending
	}
	a.State = st
	if st.WorkflowRef == "" {
		return a, &Unrunnable{Why: "session runs no workflow"}
	}
	wf, err := s.workflows.Get(ctx, st.WorkflowRef)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
		return a, &Unrunnable{Why: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	a.Workflow = wf
	agent, ok := wf.Workflow.Agent(req.Agent)
	if !ok {
		return a, &Unrunnable{Why: fmt.Sprintf("agent %q is not in workflow %s", req.Agent, wf.Workflow.Name)}
	}
	a.Agent = agent
	return a, nil
}

// Answer ends the pending turn a: from the log, when an earlier delivery
// recorded its answer, or with what ans answers.
//
// What a turn records comes after its request, so when the request is the
// state's head (the usual first delivery) there is nothing to read.
func (s *Server) Answer(ctx context.Context, a *Ask, ans Answerer) error {
	if a.State.Seq > a.Stored.Seq {
		rep, found, part, err := s.recorded(ctx, a)
		if err != nil {
			return err
		}
		if part && !found {
			// Only a worker from before answers were atomic leaves this.
			return s.Fail(ctx, a, "part of this turn's answer was recorded, without its model call: asking the "+a.via.Answerer+" again could record two answers", 0)
		}
		if found && rep.StopReason == StopToolUse && len(rep.Calls) == 0 {
			// Recorded before tool calls were written ahead of the model
			// call: the calls are lost, and asking again could act twice.
			return s.Fail(ctx, a, "the "+a.via.Answerer+" asked for tools, but its tool calls were not recorded", 0)
		}
		if found {
			// Recorded whole by an earlier attempt (atomic), or by a
			// worker before answers were atomic, which may not have ended
			// the turn yet.
			return s.emit(ctx, a, "completed", completed(a, rep))
		}
	}
	rep, err := ans.Answer(ctx, a)
	if err != nil {
		if ctx.Err() != nil {
			return err // stopping: the turn is delivered again
		}
		var f *Failed
		if errors.As(err, &f) {
			return s.Fail(ctx, a, f.Why, f.Attempts)
		}
		return err
	}
	return s.Record(ctx, a, rep)
}

// Record records the answer and ends the turn, all or nothing in one
// atomic append: a crash can never leave half an answer in the log, so a
// redelivered turn either finds the whole answer or asks again from the
// same state. A call that one of the workflow's gates holds is recorded
// with its approval request just before it and names it: no runner, and no
// fork of the session, can see the call without its gate (ADR 0025).
func (s *Server) Record(ctx context.Context, a *Ask, rep Reply) error {
	called := &events.ModelCalled{Agent: a.Request.Agent, Provider: rep.Provider, Model: rep.Model, TokensIn: rep.TokensIn,
		TokensOut: rep.TokensOut, LatencyMS: rep.Latency.Milliseconds(), Attempt: rep.Attempt, StopReason: rep.StopReason, Choice: rep.Choice}
	var err error
	if len(rep.RequestBody) > 0 {
		if called.RequestRef, err = s.putBlob(ctx, rep.RequestBody); err != nil {
			return fmt.Errorf("store the request body of turn %s: %w", a.Request.TurnID, err)
		}
	}
	if len(rep.ResponseBody) > 0 {
		if called.ResponseRef, err = s.putBlob(ctx, rep.ResponseBody); err != nil {
			return fmt.Errorf("store the response body of turn %s: %w", a.Request.TurnID, err)
		}
	}
	var evs []event.Event
	add := func(what string, data any) error {
		ev, err := a.Answer().Event(data, what)
		if err == nil {
			evs = append(evs, ev)
		}
		return err
	}
	if rep.Text != "" {
		if err := add("chunk", &events.ChunkAppended{Role: events.RoleAssistant, Agent: a.Request.Agent, Content: rep.Text}); err != nil {
			return err
		}
	}
	held := func(id string, m workflow.Match) {
		s.log.Warn("gate condition failed; the call waits for approval", "session", a.Stored.Session, "call", id, "gate", m.Gate, "err", m.Err)
	}
	st := a.State
	if rep.State != nil {
		st = rep.State
	}
	for _, r := range a.Workflow.Workflow.CallEvents(st, a.Stored.Session, a.Request.TurnID, a.Request.Agent, rep.Calls, time.Now(), held) {
		if err := add(r.What, r.Data); err != nil {
			return err
		}
	}
	if err := add("model", called); err != nil {
		return err
	}
	if err := add("completed", completed(a, rep)); err != nil {
		return err
	}
	_, err = s.c.AppendAtomic(ctx, evs)
	switch {
	case err == nil, errors.Is(err, api.ErrClosed):
		return nil
	case api.Permanent(err):
		// Nothing of the answer is stored: say why in the turn's end.
		return s.Fail(ctx, a, "the ledger refused the "+a.via.Answerer+"'s answer: "+err.Error(), rep.Attempt)
	}
	return err
}

// Fail ends the turn as failed, saying why; attempts counts the model
// calls made. A session that ended meanwhile takes no answer: that is not
// an error.
func (s *Server) Fail(ctx context.Context, a *Ask, why string, attempts int) error {
	return s.emit(ctx, a, "failed", &events.TurnFailed{TurnID: a.Request.TurnID, Agent: a.Request.Agent, Error: why, Attempts: attempts})
}

// Emit appends one event of the turn (a wait, a failed attempt) before
// its answer. A session that ended takes none: that is not an error.
func (s *Server) Emit(ctx context.Context, a *Ask, what string, data any) error {
	return s.emit(ctx, a, what, data)
}

func (s *Server) emit(ctx context.Context, a *Ask, what string, data any) error {
	ev, err := a.Answer().Event(data, what)
	if err != nil {
		return err
	}
	_, err = s.c.Append(ctx, ev)
	if errors.Is(err, api.ErrClosed) {
		return nil
	}
	return err
}

// GaveUp wraps the consumer's failure record: a turn the consumer gave up
// on is also ended (rath.agent.turn.failed), so its session is not left
// waiting for a turn that will never end. mine chooses the requests this
// taker ends; then, if not nil, runs after the turn's end is recorded.
func (s *Server) GaveUp(record consume.Failure, via Via, mine func(*events.TurnRequested) bool, then func(context.Context, *Ask, events.HandlerFailed)) consume.Failure {
	return func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error {
		if req, err := Request(ev); err == nil && req != nil && mine(req) {
			a := &Ask{Stored: ev, Request: req, via: via}
			if err := s.Fail(ctx, a, via.Server+" gave up: "+f.Error, 0); err != nil && !api.Permanent(err) {
				return err
			}
			if then != nil {
				then(ctx, a, f)
			}
		}
		return record(ctx, ev, f)
	}
}

func completed(a *Ask, rep Reply) *events.TurnCompleted {
	return &events.TurnCompleted{TurnID: a.Request.TurnID, Agent: a.Request.Agent, StopReason: rep.StopReason, ToolCalls: len(rep.Calls)}
}

// recorded rebuilds the answer an earlier delivery of the turn recorded,
// if it recorded one. An answer is stored all or nothing (Record), so
// finding the model call means finding it all; part reports events of an
// answer without its model call, which only a worker from before answers
// were atomic could leave.
func (s *Server) recorded(ctx context.Context, a *Ask) (rep Reply, found, part bool, err error) {
	l, err := s.scan(ctx, a.Stored, a.State.Turn.Seq, "")
	return l.rep, l.found, l.part, err
}

// Outcome is what the log holds of a turn's answer by one taker.
type Outcome struct {
	// Reply is the recorded answer (its text, calls, usage, stop reason).
	Reply Reply
	// Ended is "completed" or "failed", or "" while the turn has no end
	// by the taker.
	Ended string
	// Failure is the failed turn's reason.
	Failure string
}

// Ended reads what via recorded in answer to the turn request ev: a taker
// asked again (a retried request) compares it with what it was to record.
func (s *Server) Ended(ctx context.Context, ev events.Stored, via Via) (Outcome, error) {
	l, err := s.scan(ctx, ev, ev.Seq+1, via.Source)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Reply: l.rep, Ended: l.ended, Failure: l.failure}, nil
}

// trail is what a turn's events in the log say.
type trail struct {
	rep         Reply
	found, part bool
	ended       string
	failure     string
}

// scan reads the events answering the request ev from sequence from on,
// of source only if not "".
func (s *Server) scan(ctx context.Context, ev events.Stored, from uint64, source string) (trail, error) {
	var l trail
	for {
		page, err := s.c.Log(ctx, ev.Session, client.Range{From: from, Limit: api.MaxLogPage})
		if err != nil {
			return trail{}, fmt.Errorf("read the recorded answer to %s in session %s: %w", ev.ID, ev.Session, err)
		}
		for _, e := range page {
			if e.Causation != ev.ID || source != "" && e.Source != source {
				continue
			}
			d, err := e.Decode()
			if err != nil {
				continue
			}
			switch d := d.(type) {
			case *events.ChunkAppended:
				l.rep.Text, l.part = d.Content, true
			case *events.ModelCalled:
				l.found = true
				l.rep.StopReason, l.rep.TokensIn, l.rep.TokensOut = d.StopReason, d.TokensIn, d.TokensOut
				l.rep.Provider, l.rep.Model = d.Provider, d.Model
			case *events.ToolRequested:
				l.rep.Calls = append(l.rep.Calls, workflow.Call{ID: d.CallID, Tool: d.Tool, Arguments: d.Arguments})
				l.part = true
			case *events.TurnCompleted:
				l.ended = "completed"
			case *events.TurnFailed:
				l.ended, l.failure = "failed", d.Error
			}
		}
		if len(page) < api.MaxLogPage {
			return l, nil
		}
		from = page[len(page)-1].Seq + 1
	}
}
