// Package selector routes sessions: after each event it evaluates the
// session's workflow rules over the event and the state folded up to it and
// appends the decision (rath.selector.decided: rule, inputs, candidates,
// route, reason) and then the routed request. Control flow is data: a
// session's path can be explained, and re-derived, from its log alone.
package selector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/selector/internal/timer"
)

// Durable is the selector's consumer name. Never derive it from code: a new
// name is a new consumer that starts from the beginning.
const Durable = "selector"

// Source is the CloudEvents source of everything the selector emits; the
// selector does not route on its own events.
const Source = "rath/selector"

// Built-in rule names recorded in decisions the workflow's rules did not make.
const (
	RuleBudget   = "budget"
	RuleContinue = "continue"
	// RuleCorrection resumes the loop after a person's correction (a user
	// chunk marked correction, client.Correct): the agent of the last turn
	// takes the next, and reads it.
	RuleCorrection = "correction"
	// RuleTimeout closes a session whose approval expired with on_timeout
	// close.
	RuleTimeout = "timeout"
	// RuleTurnFailed closes a session whose agent's turn failed (the agent
	// worker gave up: a tool nobody offers, a model that keeps failing)
	// when no rule of its workflow routes the failure: nothing would ever
	// move the session again.
	RuleTurnFailed = "turn-failed"
	rulePrefixStop = "stop:"
)

// Selector routes the sessions that run a workflow.
type Selector struct {
	c         *client.Client
	states    *fold.Cache
	workflows *workflow.Library
	timers    *timer.Timers
	log       *slog.Logger
	// routeTimeout bounds the wait for a served router's answer.
	routeTimeout time.Duration
	// hand, if set, takes each turn request appended (WithHandOff).
	hand HandOff
}

// New returns a selector that reads sessions' states from states (ADR 0016)
// and sets the timers their events ask for (nil: none). It asks served
// routers over c's connection.
func New(c *client.Client, states *fold.Cache, workflows *workflow.Library, timers *timer.Timers, log *slog.Logger, opts ...Option) *Selector {
	s := &Selector{c: c, states: states, workflows: workflows, timers: timers, log: log, routeTimeout: DefaultRouteTimeout}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Handler is the selector's consume handler: every kind of session event can
// be a routing point.
func (s *Selector) Handler() consume.Handler {
	return consume.Handler{
		Name:    Durable,
		Tokens:  events.Tokens(),
		Handle:  s.Handle,
		Observe: s.states.Observe,
		Workers: 16,
	}
}

// plan is what a decision asks for, as recorded in its route string.
type plan struct {
	kind   workflow.RouteKind
	agent  string
	at     uint64 // fork point
	detail string // close outcome, approval action, memory scope
	// content is what a memory route writes. The route string does not
	// hold it: a redelivered trigger evaluates it again (memoryContent).
	content string
}

func (p plan) route() string {
	switch p.kind {
	case workflow.RouteAgent:
		return "agent:" + p.agent
	case workflow.RouteClose:
		return "close:" + p.detail
	case workflow.RouteFork:
		return "fork:" + p.agent + "@" + strconv.FormatUint(p.at, 10)
	case workflow.RouteApproval:
		return "approval:" + p.detail
	case workflow.RouteMemory:
		return "memory:" + p.detail
	}
	return ""
}

func parsePlan(route string) (plan, error) {
	kind, rest, _ := strings.Cut(route, ":")
	p := plan{kind: workflow.RouteKind(kind)}
	switch p.kind {
	case workflow.RouteAgent:
		p.agent = rest
	case workflow.RouteClose, workflow.RouteApproval, workflow.RouteMemory:
		p.detail = rest
	case workflow.RouteFork:
		agent, at, _ := strings.Cut(rest, "@")
		n, err := strconv.ParseUint(at, 10, 64)
		if err != nil {
			return plan{}, fmt.Errorf("route %q: bad fork point", route)
		}
		p.agent, p.at = agent, n
	default:
		return plan{}, fmt.Errorf("route %q: unknown kind", route)
	}
	return p, nil
}

// maxStale bounds how often one trigger is re-decided because the session
// moved on while it was being decided.
const maxStale = 8

// Handle sets the timers an event asks for, then routes the session after
// it (not after the selector's own events).
func (s *Selector) Handle(ctx context.Context, ev events.Stored) error {
	if err := s.arm(ctx, ev); err != nil {
		// Retried with the event; on its last delivery the session is
		// routed all the same (a deadline lost, said loudly), rather than
		// the event given up and the session never routed.
		if consume.Attempt(ctx) < armAttempts {
			return err
		}
		s.log.Error("timer not set; routing without it", "session", ev.Session, "seq", ev.Seq, "type", ev.Type, "err", err)
	}
	if ev.Source == Source {
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := s.route(ctx, ev)
		if api.CodeOf(err) != api.CodeStale || attempt >= maxStale {
			return classify(err)
		}
	}
}

// armAttempts is how many deliveries of an event try to set its timer
// before routing it without (the handler's fifth is its last).
const armAttempts = 4

// arm sets the durable timers of an event that records a deadline (ADR
// 0026), before the event is acked: a selector that stops in between sets
// them when the event is delivered again, and setting a timer twice
// replaces it.
func (s *Selector) arm(ctx context.Context, ev events.Stored) error {
	if s.timers == nil {
		return nil
	}
	switch ev.Type {
	case events.TypeApprovalRequested, events.TypeApprovalExpired, events.TypeSessionStarted, events.TypeSessionForked:
	default:
		return nil
	}
	head, err := s.states.StateSince(ctx, ev.Session, ev.Seq)
	if api.CodeOf(err) == api.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	var wf *workflow.Workflow
	if ev.Type == events.TypeSessionStarted || ev.Type == events.TypeSessionForked {
		if head.WorkflowRef == "" {
			return nil
		}
		b, err := s.workflows.Get(ctx, head.WorkflowRef)
		if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
			return nil // routing reports it
		}
		if err != nil {
			return err
		}
		wf = b.Workflow
	}
	return s.timers.Arm(ctx, ev, head, wf)
}

// classify turns ledger refusals into permanent errors (retrying the same
// trigger cannot help) and leaves the rest transient.
func classify(err error) error {
	if err == nil || !api.Permanent(err) {
		return err
	}
	switch api.CodeOf(err) {
	case api.CodeClosed, api.CodeNotFound:
		return nil // nothing to route any more
	}
	return consume.Permanent(err)
}

// route decides one trigger. The decision is a function of the trigger and
// the session folded up to and including it (at), never of events stored
// after it: a trigger delivered late, when other producers have appended
// meanwhile, is decided exactly as if it had been delivered at once, so the
// same log always gives the same decisions with the same inputs (a replay,
// an audit). The head (the state the decision is appended on, ADR 0008)
// only guards: a closed or paused session, a decision already stored for
// the trigger, a turn in flight, a continue already routed. decide chooses;
// route reads, asks a served router, records the decision and follows it.
func (s *Selector) route(ctx context.Context, ev events.Stored) error {
	// Both from the cache, which stays at the trigger: the next trigger of
	// the session costs the events in between (ADR 0016).
	at, head, err := s.states.StateAndHead(ctx, ev.Session, ev.Seq)
	if c := api.CodeOf(err); c == api.CodeNotFound || c == api.CodeOutOfRange {
		// The trigger was delivered from the stream, so it is stored: a
		// read that ends below it, or finds no session, was answered by a
		// replica that lags. Asked again, not given up (which left a
		// session never routed when a cluster's leader was stopped).
		return fmt.Errorf("session %s up to its trigger %d: %v: %w", ev.Session, ev.Seq, err, fold.ErrBehind)
	}
	if err != nil {
		return err
	}
	if head.Status != session.StatusActive || head.WorkflowRef == "" {
		return nil
	}
	wf, err := s.workflows.Get(ctx, head.WorkflowRef)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
		return consume.Permanent(err)
	}
	if err != nil {
		// A read that failed (a NATS node lost mid-read) is asked again:
		// given up, the session would never be routed.
		return err
	}
	// A redelivered trigger whose decision is already in the log: finish
	// what the decision asked for (idempotently), decide nothing new.
	if d, ok := ownDecision(head, ev); ok {
		return s.refollow(ctx, at, head, wf.Workflow, ev, d)
	}
	d, err := decide(at, head, wf.Workflow, ev)
	if err != nil {
		return err
	}
	if d.ask != nil {
		// A program chooses the route; the decision stays this one's,
		// appended on the head as any other (ADR 0008, ADR 0029).
		var reason, router string
		if d.p, reason, router, err = s.ask(ctx, wf.Workflow, at, ev, d.act, *d.ask); err != nil {
			return err
		}
		if d.event, err = d.ask.Event(); err != nil {
			return consume.Permanent(err)
		}
		d.event.Reason, d.event.Router = reason, router
		d = d.settle(head, ev)
	}
	if d.event == nil {
		return nil
	}
	decided, p := d.event, d.p
	// Conditional on the head the guards read: if the session moved on, the
	// ledger refuses it as stale and the trigger is decided again.
	ack, err := s.c.Emit(ctx, head.ID, decided, append(answerTo(ev).Options("decided"), events.WithExpectedSeq(head.Seq))...)
	if err != nil {
		return err
	}
	msg := "routed"
	if ack.Duplicate && ruleAsks(wf.Workflow, decided.Rule) {
		// Another delivery of the trigger stored its decision under the
		// same ID first, and a router may have answered it otherwise:
		// follow the decision stored, never this one.
		if decided, p, err = s.storedDecision(ctx, head.ID, ack.Seq); err != nil {
			return err
		}
		msg = "routed by another delivery"
	}
	s.log.Info(msg, "session", head.ID, "trigger", ev.Type, "seq", ev.Seq, "rule", decided.Rule, "route", decided.Route, "router", decided.Router)
	return s.follow(ctx, head, wf.Workflow, ev, decided.Rule, decided.Reason, p, decided.TurnID)
}

// ownDecision returns the selector's own decision of trigger ev, if the log
// has one. Another producer's decision with the same cause (rath replay
// --fork routes a fork's first turn itself, caused by the fork event) was
// followed by that producer, and following it here would request its turn a
// second time.
func ownDecision(head *session.State, ev events.Stored) (session.Decision, bool) {
	for _, d := range head.Decisions {
		// (A decision folded without its ID, in a state from before
		// decisions kept theirs, is taken for the selector's, as then.)
		if d.Cause == ev.ID && (d.ID == "" || d.ID == decisionID(ev)) {
			return d, true
		}
	}
	return session.Decision{}, false
}

// refollow finishes what the stored decision d of trigger ev asked for.
func (s *Selector) refollow(ctx context.Context, at, head *session.State, wf *workflow.Workflow, ev events.Stored, d session.Decision) error {
	if d.TurnID != "" && (head.Turn == nil || head.Turn.ID != d.TurnID) {
		return nil // the turn it routed has ended: nothing to re-send
	}
	p, err := parsePlan(d.Route)
	if err != nil {
		return consume.Permanent(err)
	}
	if p.kind == workflow.RouteMemory {
		if p.content, err = memoryContent(at, wf, ev, d); err != nil {
			return err
		}
	}
	return s.follow(ctx, head, wf, ev, d.Rule, d.Reason, p, d.TurnID)
}

// decision is what decide chose for a trigger: a plan and the event that
// records it (nil: nothing to route), or the question to a served router
// (ask, with the activation act) whose answer is the plan.
type decision struct {
	p     plan
	event *events.SelectorDecided
	ask   *workflow.Decision
	act   map[string]any
}

// decide chooses what trigger ev routes to, from the session folded up to
// the trigger (at), the head's guards (head: a turn in flight, a decision
// stored since) and the workflow; no I/O. In order: an expired approval
// that closes, a budget, a stop condition, the workflow's rules (only
// memory rules while tools are pending), then the built-in continue,
// correction and failed-turn rules.
func decide(at, head *session.State, wf *workflow.Workflow, ev events.Stored) (decision, error) {
	act, err := workflow.Activation(at, ev)
	if err != nil {
		return decision{}, consume.Permanent(err)
	}
	builtin := func(rule, reason string, p plan) (decision, error) {
		inputs := mustJSON(map[string]any{"event.type": ev.Type, "event.seq": ev.Seq})
		return decision{p: p, event: &events.SelectorDecided{Rule: rule, Reason: reason, Inputs: inputs}}.settle(head, ev), nil
	}
	// Wall time runs to the trigger's own time, not to the moment of its
	// delivery: the budget is read from the log like everything else.
	if why, closes := expiryCloses(at, ev); closes {
		return builtin(RuleTimeout, why, plan{kind: workflow.RouteClose, detail: OutcomeApprovalExpired})
	}
	if why, over := wf.Exceeded(at, at.Created, ev.Time); over {
		return builtin(RuleBudget, why, plan{kind: workflow.RouteClose, detail: workflow.OutcomeBudget})
	}
	name, why, stop, err := wf.Stopped(act)
	if err != nil {
		return decision{}, consume.Permanent(err)
	}
	if stop {
		return builtin(rulePrefixStop+name, why, plan{kind: workflow.RouteClose, detail: workflow.OutcomeStopped})
	}
	rules := wf.Decide
	if pendingTools(at) {
		// The results will trigger the next decision; meanwhile only
		// memory is written, which moves the session nowhere.
		rules = wf.DecideMemory
	}
	d, ok, err := rules(act)
	if err != nil {
		return decision{}, consume.Permanent(err)
	}
	switch {
	case ok && d.Route.Kind() == workflow.RouteRouter:
		return decision{ask: &d, act: act}, nil
	case ok:
		event, err := d.Event()
		if err != nil {
			return decision{}, consume.Permanent(err)
		}
		return decision{p: rulePlan(d, at), event: event}.settle(head, ev), nil
	case !pendingTools(at) && continues(at, ev) && !decidedSince(head, ev.Seq):
		// A turn's tool results are in: the same agent goes on.
		return builtin(RuleContinue, "tool results of the last turn are in", plan{kind: workflow.RouteAgent, agent: at.LastAgent})
	case !pendingTools(at) && corrects(at, ev) && !decidedSince(head, ev.Seq):
		return builtin(RuleCorrection, "a person corrected the session", plan{kind: workflow.RouteAgent, agent: at.LastAgent})
	case ev.Type == events.TypeTurnFailed && head.Turn == nil && !pendingTools(head) && !decidedSince(head, ev.Seq):
		return builtin(RuleTurnFailed, turnFailedReason(ev), plan{kind: workflow.RouteClose, detail: OutcomeTurnFailed})
	}
	return decision{}, nil
}

// rulePlan is the plan of a rule's decision d over the state at.
func rulePlan(d workflow.Decision, at *session.State) plan {
	p := plan{kind: d.Route.Kind(), agent: d.Route.Agent}
	switch p.kind {
	case workflow.RouteClose:
		p.detail = d.Route.Close.Outcome
	case workflow.RouteFork:
		p.agent, p.at = d.Route.Fork.Agent, d.ForkAt
		if p.at == 0 {
			p.at = at.Seq
		}
	case workflow.RouteApproval:
		p.detail = d.Route.Approval.Action
	case workflow.RouteMemory:
		p.detail, p.content = d.Route.Memory.Scope, d.Content
	}
	return p
}

// settle records d's plan in its event, or drops d (nothing to route) when
// it routes an agent while a turn is in flight: one turn at a time.
func (d decision) settle(head *session.State, ev events.Stored) decision {
	if d.p.kind == workflow.RouteAgent && head.Turn != nil {
		return decision{}
	}
	d.event.Route = d.p.route()
	if d.p.kind == workflow.RouteAgent {
		d.event.Agent, d.event.TurnID = d.p.agent, "turn-"+events.DerivedID(ev.ID, "turn")[:8]
	}
	return d
}

// follow appends the request a decision routed to. Every event it emits has
// an ID derived from the trigger, so following twice stores it once.
func (s *Selector) follow(ctx context.Context, st *session.State, wf *workflow.Workflow, ev events.Stored, rule, reason string, p plan, turnID string) error {
	var err error
	switch p.kind {
	case workflow.RouteAgent:
		err = s.request(ctx, st.ID, &events.TurnRequested{TurnID: turnID, Agent: p.agent, Rule: rule}, answerTo(ev).Options("request"))
	case workflow.RouteClose:
		_, err = s.c.Emit(ctx, st.ID, &events.SessionClosed{Outcome: p.detail, Reason: reason}, answerTo(ev).Options("close")...)
	case workflow.RouteApproval:
		a := &workflow.Approval{Action: p.detail}
		if r := ruleNamed(wf, rule); r != nil && r.Route.Approval != nil {
			a = r.Route.Approval
		}
		// Asked at the trigger's time: a redelivered trigger asks for the
		// same request, deadline included.
		req := a.Request("approval-"+events.DerivedID(ev.ID)[:8], ev.Time)
		req.Action = p.detail
		_, err = s.c.Emit(ctx, st.ID, req, answerTo(ev).Options("approval")...)
	case workflow.RouteFork:
		err = s.fork(ctx, st, ev, rule, reason, p)
	case workflow.RouteMemory:
		err = s.remember(ctx, st, wf, ev, rule, p)
	}
	if err != nil && api.CodeOf(err) == api.CodeClosed {
		return nil
	}
	return err
}

// fork branches the session at the decided point, starts the fork's first
// turn if the route names an agent, and closes this session as superseded,
// so that the branch that produced the final answer is explicit.
func (s *Selector) fork(ctx context.Context, st *session.State, ev events.Stored, rule, reason string, p plan) error {
	childID := st.ID + "-" + events.DerivedID(ev.ID, "fork")[:8]
	// A redelivered trigger's fork gets the original ack (same event ID); a
	// child ID some other session holds is refused (exists), and nothing is
	// emitted into it: the selector acts for every tenant, and the ID derives
	// from what the trigger's proposer chose.
	if _, err := s.c.Fork(ctx, api.ForkRequest{Parent: st.ID, At: p.at, ID: childID, Reason: reason,
		EventID: events.DerivedID(ev.ID, "fork-event"), EventSource: Source}); err != nil {
		return fmt.Errorf("fork %s at %d onto %s: %w", st.ID, p.at, childID, err)
	}
	if p.agent != "" {
		turnID := "turn-" + events.DerivedID(ev.ID, "fork-turn")[:8]
		d := &events.SelectorDecided{Rule: rule, Route: "agent:" + p.agent, Agent: p.agent, TurnID: turnID,
			Reason: fmt.Sprintf("first turn of the fork of %s at %d", st.ID, p.at)}
		if _, err := s.c.Emit(ctx, childID, d, answerTo(ev).Options("fork-decided")...); err != nil {
			return err
		}
		if err := s.request(ctx, childID, &events.TurnRequested{TurnID: turnID, Agent: p.agent, Rule: rule}, answerTo(ev).Options("fork-request")); err != nil {
			return err
		}
	}
	_, err := s.c.Emit(ctx, st.ID, &events.SessionClosed{Outcome: "superseded", Reason: fmt.Sprintf("forked to %s at %d", childID, p.at)}, answerTo(ev).Options("fork-close")...)
	return err
}

// remember writes what a memory route decided, with the trigger as the
// provenance. The request ID derives from the trigger, so a redelivered
// trigger writes the item once; the memory service records the write in the
// session (rath.memory.written).
func (s *Selector) remember(ctx context.Context, st *session.State, wf *workflow.Workflow, ev events.Stored, rule string, p plan) error {
	r := ruleNamed(wf, rule)
	if r == nil || r.Route.Memory == nil {
		return consume.Permanent(fmt.Errorf("decision of rule %q routes to memory, but the workflow has no such memory rule", rule))
	}
	_, err := s.c.Memory().Add(ctx, memoryapi.AddRequest{
		RequestID: answerTo(ev).ID("memory"),
		Session:   st.ID, Content: p.content, Tags: r.Route.Memory.Tags, Scope: p.detail,
		Evidence: r.Route.Memory.Evidence, EventIDs: []string{ev.ID},
	})
	if err != nil {
		return fmt.Errorf("memory rule %q on event %s: %w", rule, ev.ID, err)
	}
	s.log.Info("memory written", "session", st.ID, "trigger", ev.Type, "seq", ev.Seq, "rule", rule, "scope", p.detail)
	return nil
}

// memoryContent evaluates a stored memory decision's content again, over the
// state that decision read (the session up to its trigger, at): the same
// text the first delivery wrote, or would have written.
func memoryContent(at *session.State, wf *workflow.Workflow, ev events.Stored, d session.Decision) (string, error) {
	act, err := workflow.Activation(at, ev)
	if err != nil {
		return "", consume.Permanent(err)
	}
	content, err := wf.MemoryContent(d.Rule, act)
	if err != nil {
		return "", consume.Permanent(err)
	}
	return content, nil
}

// answerTo is the selector's answer to trigger ev: every event it emits for
// ev (in ev's session or in a fork of it) has an ID derived from ev, ev as
// its causation and ev's correlation (internal/answer).
func answerTo(ev events.Stored) answer.Answer { return answer.To(ev, Durable, Source) }

// decisionID is the ID of the selector's decision of trigger ev.
func decisionID(ev events.Stored) string { return answerTo(ev).ID("decided") }

// OutcomeApprovalExpired closes a session whose approval expired undecided
// with on_timeout close.
const OutcomeApprovalExpired = "approval_expired"

// OutcomeTurnFailed closes a session whose last turn failed, unrouted
// (RuleTurnFailed).
const OutcomeTurnFailed = "failed"

// turnFailedReason says why a failed turn closes its session: which turn,
// and the agent worker's error.
func turnFailedReason(ev events.Stored) string {
	d, err := ev.Decode()
	f, ok := d.(*events.TurnFailed)
	if err != nil || !ok {
		return "a turn failed and no rule routes a failed turn"
	}
	return fmt.Sprintf("turn %s of %s failed and no rule routes a failed turn: %s", f.TurnID, f.Agent, events.Clip(f.Error, 300))
}

// expiryCloses reports whether ev is the expiry of an approval whose
// on_timeout closes the session, and why.
func expiryCloses(at *session.State, ev events.Stored) (string, bool) {
	if ev.Type != events.TypeApprovalExpired {
		return "", false
	}
	d, err := ev.Decode()
	if err != nil {
		return "", false
	}
	x := d.(*events.ApprovalExpired)
	if x.OnTimeout != events.TimeoutClose {
		return "", false
	}
	a := at.Approvals[x.ApprovalID]
	what := a.Action
	if a.Gate != "" {
		what += " (gate " + a.Gate + ")"
	}
	return fmt.Sprintf("approval %s expired at %s undecided by %s: %s", x.ApprovalID, x.Deadline, orRole(x.Approver), what), true
}

func orRole(r string) string {
	if r == "" {
		return "anyone"
	}
	return r
}

// pendingTools reports tool calls requested and not yet finished.
func pendingTools(st *session.State) bool {
	for _, t := range st.Tools {
		if t.Status == session.ToolRequested || t.Status == session.ToolRunning {
			return true
		}
	}
	return false
}

// continues reports whether the last turn's tool results are all in, and
// ev is the event that completed them: the last result, or the turn's end if
// that came after the results. (The caller has checked no tool is pending.)
func continues(st *session.State, ev events.Stored) bool {
	if st.Turn != nil || st.LastAgent == "" {
		return false
	}
	switch ev.Type {
	case events.TypeToolCompleted, events.TypeToolFailed:
		return true
	case events.TypeSessionResumed:
		// A paused session is routed nothing: results that came in while
		// it was paused are routed when it resumes.
		return resultsSinceDecision(st)
	case events.TypeTurnCompleted:
		// The tool results may be in before the turn's end (a worker that
		// took the turn over late): then its end is the routing point.
		d, err := ev.Decode()
		if err != nil {
			return false
		}
		return d.(*events.TurnCompleted).ToolCalls > 0
	}
	return false
}

// corrects reports whether ev is a person's correction the loop resumes on:
// a user message marked correction while no turn is in flight, after some
// agent's turn. (A corrected tool result is a tool call's completion, which
// continues routes.)
func corrects(st *session.State, ev events.Stored) bool {
	if ev.Type != events.TypeChunkAppended || st.Turn != nil || st.LastAgent == "" {
		return false
	}
	d, err := ev.Decode()
	if err != nil {
		return false
	}
	c, ok := d.(*events.ChunkAppended)
	return ok && c.Correction && c.Role == events.RoleUser
}

// resultsSinceDecision reports whether a tool call ended after the last
// routing decision.
func resultsSinceDecision(st *session.State) bool {
	var last uint64
	if n := len(st.Decisions); n > 0 {
		last = st.Decisions[n-1].Seq
	}
	for _, t := range st.Tools {
		if (t.Status == session.ToolCompleted || t.Status == session.ToolFailed) && len(t.Seqs) > 0 && t.Seqs[len(t.Seqs)-1] > last {
			return true
		}
	}
	return false
}

// decidedSince reports whether a decision was stored after sequence seq. The
// built-in continue rule fires on one of two events (the last tool result or
// the turn's end, whichever comes last); a selector that reaches the other
// one late, after a decision, must not route the agent a second time.
//
// Only decisions that route the session count: a memory route writes an
// item and leaves the routing as it was, so a continue still follows it.
func decidedSince(st *session.State, seq uint64) bool {
	for i := len(st.Decisions) - 1; i >= 0 && st.Decisions[i].Seq > seq; i-- {
		if !strings.HasPrefix(st.Decisions[i].Route, string(workflow.RouteMemory)+":") {
			return true
		}
	}
	return false
}

// ruleAsks reports whether the named rule asks a served router.
func ruleAsks(wf *workflow.Workflow, rule string) bool {
	r := ruleNamed(wf, rule)
	return r != nil && r.Route.Kind() == workflow.RouteRouter
}

// storedDecision reads the decision stored at seq of session id.
func (s *Selector) storedDecision(ctx context.Context, id string, seq uint64) (*events.SelectorDecided, plan, error) {
	page, err := s.c.Log(ctx, id, client.Range{From: seq, To: seq})
	if err != nil {
		return nil, plan{}, fmt.Errorf("read the decision at %d of %s: %w", seq, id, err)
	}
	if len(page) != 1 || page[0].Type != events.TypeSelectorDecided {
		return nil, plan{}, consume.Permanent(fmt.Errorf("session %s: no decision at %d", id, seq))
	}
	d, err := page[0].Decode()
	if err != nil {
		return nil, plan{}, consume.Permanent(err)
	}
	dec := d.(*events.SelectorDecided)
	p, err := parsePlan(dec.Route)
	if err != nil {
		return nil, plan{}, consume.Permanent(err)
	}
	return dec, p, nil
}

func ruleNamed(wf *workflow.Workflow, name string) *workflow.Rule {
	for i := range wf.Rules {
		if wf.Rules[i].Name == name {
			return &wf.Rules[i]
		}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
