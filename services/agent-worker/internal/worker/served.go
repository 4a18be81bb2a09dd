package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/reqrep"
	"github.com/openrath/rath/internal/turn"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/agentapi"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// ServedBy is the one principal whose requests for served agents the
// worker answers: the agent worker's identity, which programs serving
// agents run with (docs/security.md, "Served agents' answers").
var ServedBy = events.Service("agent-worker")

// servedTimeout bounds the handling of one request of a served agent.
const servedTimeout = 30 * time.Second

// Served answers the requests of programs serving agents (pkg/agentapi)
// on nc until ctx ends, then drains and waits for the requests in hand.
// Every answer is checked against the session's state and workflow and
// recorded by the turn code that records a model's, under the served
// agent's source.
func (w *Worker) Served(ctx context.Context, nc *nats.Conn) error {
	srv, err := reqrep.Start(ctx, nc, reqrep.Config{
		Prefix: events.AgentPrefix, Queue: agentapi.Queue, Service: "agent-worker", Inflight: 16, Timeout: servedTimeout, Log: w.log,
	}, map[string]reqrep.Handler{
		agentapi.ReqTurn:   w.servedHandler(agentapi.ReqTurn),
		agentapi.ReqRecord: w.servedHandler(agentapi.ReqRecord),
	})
	if err != nil {
		return fmt.Errorf("agent worker: %w", err)
	}
	w.log.Info("answering served agents", "subjects", events.AgentPrefix+"<tenant>.<user>.<op>", "queue", agentapi.Queue)
	<-ctx.Done()
	srv.Stop()
	return nil
}

// servedHandler decodes and answers one request. A refusal is logged with
// the session, so an operator finds why a served agent's answer was not
// recorded; the asker gets it as a typed error.
func (w *Worker) servedHandler(op string) reqrep.Handler {
	return func(ctx context.Context, m *nats.Msg) (any, error) {
		res, session, err := w.served(ctx, op, m)
		if err != nil {
			code := reqrep.ErrorOf(err).Code
			if code != api.CodeUnavailable && code != agentapi.CodeNotPending {
				p, _ := events.PrincipalFrom(ctx)
				w.log.Warn("served agent's request refused", "op", op, "session", session, "principal", p.String(), "code", code, "err", err)
			}
		}
		return res, err
	}
}

func (w *Worker) served(ctx context.Context, op string, m *nats.Msg) (any, string, error) {
	if p, _ := events.PrincipalFrom(ctx); p != ServedBy {
		return nil, "", api.Errorf(agentapi.CodeForbidden, "%s may not answer turns: served agents run with the agent worker's identity (%s)", p, ServedBy)
	}
	if len(m.Data) > agentapi.MaxRequestBytes {
		return nil, "", api.Errorf(api.CodeTooLarge, "request of %d bytes, above the limit of %d", len(m.Data), agentapi.MaxRequestBytes)
	}
	switch op {
	case agentapi.ReqTurn:
		var req agentapi.Turn
		if err := reqrep.DecodeStrict(m, &req); err != nil {
			return nil, "", err
		}
		a, err := w.pending(ctx, req)
		if err != nil {
			return nil, req.Session, err
		}
		return agentapi.TurnReply{System: a.Agent.System, Tools: a.Agent.Tools}, req.Session, nil
	case agentapi.ReqRecord:
		var req agentapi.RecordRequest
		if err := reqrep.DecodeStrict(m, &req); err != nil {
			return nil, "", err
		}
		rep, err := w.record(ctx, req)
		return rep, req.Session, err
	}
	return nil, "", api.Errorf(api.CodeMalformed, "unknown operation %q", op)
}

// servedVia is how a served agent's turns are recorded: IDs and source of
// the agent's own server (pkg/agentserver's Durable and Source), so the
// log is what it was when the program recorded them itself.
func servedVia(agent string) turn.Via {
	return turn.Via{Handler: "agent-" + agent, Source: "rath/agent/" + agent, Server: "the agent server", Answerer: "agent"}
}

// check validates a request's turn.
func check(t agentapi.Turn) error {
	var errs []error
	if err := events.ValidateSessionID(t.Session); err != nil {
		errs = append(errs, err)
	}
	if t.Seq == 0 {
		errs = append(errs, errors.New("seq: want the turn request's sequence"))
	}
	if t.TurnID == "" || len(t.TurnID) > 256 {
		errs = append(errs, errors.New("turn_id: want 1 to 256 bytes"))
	}
	if !agentapi.ValidName(t.Agent) || t.Agent == agentapi.ReservedName {
		errs = append(errs, fmt.Errorf("agent %q: not a name an agent can be served under", t.Agent))
	}
	if err := errors.Join(errs...); err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	return nil
}

// pending returns the turn t names if it is pending for its agent, served
// by the session's workflow: the event at t.Seq is the request of turn
// t.TurnID of agent t.Agent, and the session's state holds it as its turn
// in flight.
func (w *Worker) pending(ctx context.Context, t agentapi.Turn) (*turn.Ask, error) {
	ev, req, err := w.request(ctx, t)
	if err != nil {
		return nil, err
	}
	a, err := w.turns.Take(ctx, ev, req, servedVia(t.Agent))
	return servable(a, t, err)
}

// request reads the turn request t names.
func (w *Worker) request(ctx context.Context, t agentapi.Turn) (events.Stored, *events.TurnRequested, error) {
	if err := check(t); err != nil {
		return events.Stored{}, nil, err
	}
	log, err := w.c.Log(ctx, t.Session, client.Range{From: t.Seq, To: t.Seq})
	switch {
	case errors.Is(err, api.ErrNotFound):
		return events.Stored{}, nil, api.Errorf(api.CodeNotFound, "session %s not found", t.Session)
	case errors.Is(err, api.ErrOutOfRange):
		return events.Stored{}, nil, api.Errorf(agentapi.CodeNotPending, "session %s has no event %d", t.Session, t.Seq)
	case err != nil:
		return events.Stored{}, nil, fmt.Errorf("read event %d of session %s: %w", t.Seq, t.Session, err)
	case len(log) != 1:
		return events.Stored{}, nil, api.Errorf(agentapi.CodeNotPending, "session %s has no event %d", t.Session, t.Seq)
	}
	req, err := turn.Request(log[0])
	switch {
	case err != nil || req == nil:
		return events.Stored{}, nil, api.Errorf(agentapi.CodeNotPending, "event %d of session %s is not a turn request", t.Seq, t.Session)
	case req.TurnID != t.TurnID:
		return events.Stored{}, nil, api.Errorf(agentapi.CodeNotPending, "event %d of session %s requests turn %s, not %s", t.Seq, t.Session, req.TurnID, t.TurnID)
	case req.Agent != t.Agent:
		return events.Stored{}, nil, api.Errorf(agentapi.CodeNotPending, "turn %s of session %s is agent %s's, not %s's", t.TurnID, t.Session, req.Agent, t.Agent)
	}
	return log[0], req, nil
}

// servable maps Take's outcome for a served agent's request.
func servable(a *turn.Ask, t agentapi.Turn, err error) (*turn.Ask, error) {
	var unrunnable *turn.Unrunnable
	switch {
	case errors.Is(err, turn.ErrNotPending):
		return nil, api.Errorf(agentapi.CodeNotPending, "turn %s of agent %s in session %s is not pending (ended or superseded)", t.TurnID, t.Agent, t.Session)
	case errors.As(err, &unrunnable):
		return nil, api.Errorf(agentapi.CodeNotServed, "turn %s in session %s cannot run: %s", t.TurnID, t.Session, unrunnable.Why)
	case err != nil:
		return nil, err
	case !a.Agent.Served:
		return nil, api.Errorf(agentapi.CodeNotServed, "workflow %s does not serve agent %s: its turns are the agent worker's", a.Workflow.Workflow.Name, t.Agent)
	}
	return a, nil
}

// record records a served agent's answer, once: asked again with the same
// answer after it was recorded (a retry), it replies as the first time.
func (w *Worker) record(ctx context.Context, req agentapi.RecordRequest) (agentapi.RecordReply, error) {
	if err := checkAnswer(req); err != nil {
		return agentapi.RecordReply{}, err
	}
	ev, treq, err := w.request(ctx, req.Turn)
	if err != nil {
		return agentapi.RecordReply{}, err
	}
	via := servedVia(req.Agent)
	a, err := w.turns.Take(ctx, ev, treq, via)
	if errors.Is(err, turn.ErrNotPending) {
		return w.recordedAlready(ctx, ev, req, via, nil)
	}
	if a, err = servable(a, req.Turn, err); err != nil {
		return agentapi.RecordReply{}, err
	}
	// The state may lag the log (the worker's cache is fed by its own
	// consumer): an end the log holds already is answered from the log,
	// not recorded again.
	return w.recordedAlready(ctx, ev, req, via, a)
}

// recordAnswer records the answer or failure of the pending turn a.
func (w *Worker) recordAnswer(ctx context.Context, a *turn.Ask, req agentapi.RecordRequest) (agentapi.RecordReply, error) {
	if req.Answer == nil {
		if err := w.turns.Fail(ctx, a, req.Failure, 0); err != nil {
			return agentapi.RecordReply{}, err
		}
		return agentapi.RecordReply{Outcome: agentapi.OutcomeFailed}, nil
	}
	if err := w.turns.Record(ctx, a, servedReply(req.Agent, req.Answer)); err != nil {
		return agentapi.RecordReply{}, err
	}
	// The ledger may have refused the answer, which ends the turn as failed.
	return w.recordedAlready(ctx, a.Stored, req, a.Via(), nil)
}

// recordedAlready replies to a record from what the log holds of the
// turn's end: as the first time if it ended with this answer (or this
// failure), refused if it ended otherwise. A turn without an end in the
// log is recorded, if pending (not nil).
func (w *Worker) recordedAlready(ctx context.Context, ev events.Stored, req agentapi.RecordRequest, via turn.Via, pending *turn.Ask) (agentapi.RecordReply, error) {
	o, err := w.turns.Ended(ctx, ev, via)
	if err != nil {
		return agentapi.RecordReply{}, err
	}
	switch {
	case o.Ended == "" && pending != nil:
		return w.recordAnswer(ctx, pending, req)
	case o.Ended == agentapi.OutcomeFailed && (req.Answer != nil || o.Failure == req.Failure):
		// A refused answer ends the turn failed: its retry is told so.
		return agentapi.RecordReply{Outcome: agentapi.OutcomeFailed}, nil
	case o.Ended == agentapi.OutcomeCompleted && req.Answer != nil && sameAnswer(o.Reply, servedReply(req.Agent, req.Answer)):
		return agentapi.RecordReply{Outcome: agentapi.OutcomeCompleted}, nil
	}
	return agentapi.RecordReply{}, api.Errorf(agentapi.CodeNotPending, "turn %s of agent %s in session %s is not pending: it ended otherwise", req.TurnID, req.Agent, req.Session)
}

// checkAnswer validates what a record request says of the answer.
func checkAnswer(req agentapi.RecordRequest) error {
	switch {
	case (req.Answer == nil) == (req.Failure == ""):
		return api.Errorf(api.CodeMalformed, "want exactly one of answer and failure")
	case req.Answer == nil:
		if !utf8.ValidString(req.Failure) {
			return api.Errorf(api.CodeMalformed, "failure: not UTF-8")
		}
		return nil
	}
	a := req.Answer
	if !utf8.ValidString(a.Text) || !utf8.ValidString(a.Provider) || !utf8.ValidString(a.Model) {
		return api.Errorf(api.CodeMalformed, "answer: text, provider and model must be UTF-8")
	}
	if a.TokensIn < 0 || a.TokensOut < 0 || a.LatencyMS < 0 {
		return api.Errorf(api.CodeMalformed, "answer: tokens and latency must not be negative")
	}
	for i, c := range a.ToolCalls {
		if c.Tool == "" {
			return api.Errorf(api.CodeMalformed, "answer: tool call %d names no tool", i)
		}
		if len(c.Arguments) > 0 && !jsonObject(c.Arguments) {
			return api.Errorf(api.CodeMalformed, "answer: tool call %d: arguments are not a JSON object", i)
		}
	}
	return nil
}

// servedReply is a served agent's answer as the turn code records it: the
// usage names "go" and the agent when the answer names none, and it stops
// for its tool calls if it has any.
func servedReply(agent string, ans *agentapi.Answer) turn.Reply {
	rep := turn.Reply{Text: ans.Text, Provider: cmp.Or(ans.Provider, "go"), Model: cmp.Or(ans.Model, agent),
		TokensIn: ans.TokensIn, TokensOut: ans.TokensOut, StopReason: turn.StopEndTurn,
		Latency: time.Duration(ans.LatencyMS) * time.Millisecond, Attempt: 1}
	for _, c := range ans.ToolCalls {
		rep.Calls = append(rep.Calls, workflow.Call{ID: c.ID, Tool: c.Tool, Arguments: c.Arguments})
	}
	if len(rep.Calls) > 0 {
		rep.StopReason = turn.StopToolUse
	}
	return rep
}

// sameAnswer reports whether a recorded answer is offered again: the same
// text, usage and calls (their tools and arguments; a call's ID may have
// been renamed after the turn).
func sameAnswer(got, offered turn.Reply) bool {
	if got.Text != offered.Text || got.Provider != offered.Provider || got.Model != offered.Model ||
		got.TokensIn != offered.TokensIn || got.TokensOut != offered.TokensOut || len(got.Calls) != len(offered.Calls) {
		return false
	}
	return slices.EqualFunc(got.Calls, offered.Calls, func(a, b workflow.Call) bool {
		return a.Tool == b.Tool && jsonEqual(a.Arguments, b.Arguments)
	})
}

// jsonObject reports whether raw is one JSON object.
func jsonObject(raw json.RawMessage) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(raw, &v) == nil && v != nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}
