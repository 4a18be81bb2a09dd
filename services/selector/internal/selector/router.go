package selector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/routerapi"
	"github.com/openrath/rath/pkg/session"
)

// DefaultRouteTimeout is how long the selector waits for a served router's
// answer before it counts the question as unanswered.
const DefaultRouteTimeout = 10 * time.Second

// Option configures a Selector.
type Option func(*Selector)

// WithRouteTimeout sets how long the selector waits for a served router's
// answer (default DefaultRouteTimeout).
func WithRouteTimeout(d time.Duration) Option {
	return func(s *Selector) {
		if d > 0 {
			s.routeTimeout = d
		}
	}
}

// RefusedError is a served router's answer the selector refused: an error
// answer, or one that is not a route of the workflow. Without a fallback in
// the rule it is permanent: the trigger is given up, dead-lettered and
// recorded in the session as rath.handler.failed with this message, and no
// decision is stored.
type RefusedError struct {
	Rule, Router string
	// Why says what was wrong with the answer.
	Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("rule %q: the answer of router %s was refused: %s", e.Rule, e.Router, e.Why)
}

// unanswered is a question no router answered: none serves it, or none
// answered in time.
type unanswered struct {
	rule, router string
	why          string
	err          error
}

func (e *unanswered) Error() string {
	return fmt.Sprintf("rule %q: router %s: %s", e.rule, e.router, e.why)
}

func (e *unanswered) Unwrap() error { return e.err }

// ask asks the served router of the winning rule d for the route of trigger
// ev and returns the plan its answer is, the reason to record, and the
// router to name in the decision. The question is what the rule's own
// expression read (the activation act: the trigger and the session folded
// up to it), so the decision is still a function of the log up to the
// trigger and the router's answer, which the decision records.
//
// When no valid answer comes, the rule's fallback is the plan (the router
// then is not named: it did not choose). Without a fallback: no program
// serving the router is a wait (consume.Waiting: the trigger is retried
// without end, never lost); a timeout or a failure to ask is transient; an
// error answer or an answer the workflow refuses is a *RefusedError,
// permanent.
func (s *Selector) ask(ctx context.Context, wf *workflow.Workflow, at *session.State, ev events.Stored, act map[string]any, d workflow.Decision) (p plan, reason, router string, err error) {
	name := d.Route.Router
	ans, err := s.question(ctx, wf, at, ev, act, d)
	if err == nil {
		if p, err = answerPlan(wf, at, ans); err != nil {
			err = &RefusedError{Rule: d.Rule, Router: name, Why: err.Error()}
		}
	}
	var (
		refused *RefusedError
		missed  *unanswered
	)
	switch {
	case err == nil:
		// The answer's reason, else its close's, else the rule's: as a
		// rule's reason goes before its route's.
		reason = ans.Reason
		if reason == "" && ans.Close != nil {
			reason = ans.Close.Reason
		}
		if reason == "" {
			reason = d.Reason
		}
		if reason == "" {
			reason = "chosen by router " + name
		}
		return p, reason, name, nil
	case ctx.Err() != nil:
		return plan{}, "", "", err // stopping: the trigger is delivered again
	case !errors.As(err, &refused) && !errors.As(err, &missed):
		return plan{}, "", "", err // could not ask: transient
	}
	r := ruleNamed(wf, d.Rule)
	if r == nil || r.Fallback == nil {
		switch {
		case refused != nil:
			return plan{}, "", "", consume.Permanent(refused)
		case errors.Is(err, nats.ErrNoResponders):
			return plan{}, "", "", consume.Waiting(err)
		}
		return plan{}, "", "", err
	}
	return fallbackPlan(r, err)
}

// question sends the request and decodes the answer strictly: a field the
// contract does not know is refused, as a workflow file's would be.
func (s *Selector) question(ctx context.Context, wf *workflow.Workflow, at *session.State, ev events.Stored, act map[string]any, d workflow.Decision) (routerapi.Answer, error) {
	name := d.Route.Router
	req, err := request(wf, at, ev, act, d)
	if err != nil {
		return routerapi.Answer{}, consume.Permanent(err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return routerapi.Answer{}, consume.Permanent(fmt.Errorf("rule %q: encode the question to router %s: %w", d.Rule, name, err))
	}
	qctx, cancel := context.WithTimeout(ctx, s.routeTimeout)
	defer cancel()
	msg, err := s.c.Conn().RequestWithContext(qctx, routerapi.Subject(req.Tenant, name), body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return routerapi.Answer{}, &unanswered{rule: d.Rule, router: name, why: "no program serves it", err: err}
	case err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)):
		return routerapi.Answer{}, &unanswered{rule: d.Rule, router: name, why: fmt.Sprintf("no answer within %s", s.routeTimeout), err: err}
	case err != nil:
		return routerapi.Answer{}, fmt.Errorf("rule %q: ask router %s: %w", d.Rule, name, err)
	}
	var ans routerapi.Answer
	dec := json.NewDecoder(bytes.NewReader(msg.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		return routerapi.Answer{}, &RefusedError{Rule: d.Rule, Router: name, Why: fmt.Sprintf("not an answer (%v): %s", err, clip(msg.Data))}
	}
	return ans, nil
}

// request builds the question of rule d about trigger ev.
func request(wf *workflow.Workflow, at *session.State, ev events.Stored, act map[string]any, d workflow.Decision) (routerapi.Request, error) {
	req := routerapi.Request{Router: d.Route.Router, Session: ev.Session, Tenant: at.Tenant, Workflow: wf.Name, Rule: d.Rule,
		Agents: make([]string, 0, len(wf.Agents)),
		Event:  routerapi.Event{Type: ev.Type, ID: ev.ID, Session: ev.Session, Seq: ev.Seq, Data: ev.Data}}
	if req.Tenant == "" {
		req.Tenant = events.DefaultTenant // a session stored before tenants
	}
	if len(bytes.TrimSpace(req.Event.Data)) == 0 {
		req.Event.Data = json.RawMessage("{}")
	}
	for _, a := range wf.Agents {
		req.Agents = append(req.Agents, a.Name)
	}
	raw, err := json.Marshal(act["state"])
	if err == nil {
		err = json.Unmarshal(raw, &req.State)
	}
	if err != nil {
		return routerapi.Request{}, fmt.Errorf("rule %q: the state for router %s: %w", d.Rule, d.Route.Router, err)
	}
	return req, nil
}

// answerPlan checks a router's answer against the workflow as Parse checks
// a route in the file: one route, an agent the workflow defines, a fork
// point in the log up to the trigger.
func answerPlan(wf *workflow.Workflow, at *session.State, ans routerapi.Answer) (plan, error) {
	kind, err := ans.Kind()
	if err != nil {
		return plan{}, err
	}
	known := func(agent string) error {
		if _, ok := wf.Agent(agent); !ok {
			return fmt.Errorf("%q is not an agent of workflow %s (agents: %s)", agent, wf.Name, agentList(wf))
		}
		return nil
	}
	switch kind {
	case "agent":
		return plan{kind: workflow.RouteAgent, agent: ans.Agent}, known(ans.Agent)
	case "close":
		return plan{kind: workflow.RouteClose, detail: ans.Close.Outcome}, nil
	}
	f := ans.Fork
	p := plan{kind: workflow.RouteFork, agent: f.Agent, at: f.At}
	if p.at == 0 {
		p.at = at.Seq
	}
	if p.at > at.Seq {
		return plan{}, fmt.Errorf("fork at %d is past the trigger's sequence %d", p.at, at.Seq)
	}
	if f.Agent != "" {
		return p, known(f.Agent)
	}
	return p, nil
}

// fallbackPlan is the plan of rule r's fallback, taken because its router
// gave no valid answer (why).
func fallbackPlan(r *workflow.Rule, why error) (plan, string, string, error) {
	fb := r.Fallback
	reason := fmt.Sprintf("fallback of rule %s: %v", r.Name, why)
	switch fb.Kind() {
	case workflow.RouteAgent:
		return plan{kind: workflow.RouteAgent, agent: fb.Agent}, reason, "", nil
	case workflow.RouteClose:
		if fb.Close.Reason != "" {
			reason = fb.Close.Reason + " (" + reason + ")"
		}
		return plan{kind: workflow.RouteClose, detail: fb.Close.Outcome}, reason, "", nil
	}
	return plan{}, "", "", consume.Permanent(fmt.Errorf("rule %q: fallback %s is not an agent or close route", r.Name, fb.String()))
}

func agentList(wf *workflow.Workflow) string {
	names := make([]string, len(wf.Agents))
	for i, a := range wf.Agents {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}

// clip shortens a refused answer for the record.
func clip(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
