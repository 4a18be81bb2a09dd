package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/openrath/rath/internal/workflow/expr"
	"github.com/openrath/rath/pkg/events"
)

// Decision is where the rules send a session after one event, and why.
type Decision struct {
	// Rule names the rule that won.
	Rule  string
	Route Route
	// Reason is the rule's reason, or its route's when the rule has none.
	Reason string
	// Candidates names every rule whose expression held, in rule order;
	// the winner is among them.
	Candidates []string
	// Inputs are the activation values the winning rule's expression reads,
	// keyed by path ("event.type", "state.turns", "state.agent_turns.coder").
	Inputs map[string]any
	// ForkAt is the sequence a fork route forks at: the value of the
	// route's at, or state.seq (the routed event's) when it has none.
	ForkAt uint64
	// Content is the text a memory route writes: the value of its content.
	Content string
}

// Event returns the rath.selector.decided data that records the decision.
// Its route is Route.String(), with "@" and ForkAt appended for a fork:
// "fork:coder@14".
func (d Decision) Event() (*events.SelectorDecided, error) {
	inputs, err := json.Marshal(d.Inputs)
	if err != nil {
		return nil, fmt.Errorf("decision of rule %q: marshal inputs: %w", d.Rule, err)
	}
	route := d.Route.String()
	if d.Route.Kind() == RouteFork {
		route += "@" + strconv.FormatUint(d.ForkAt, 10)
	}
	return &events.SelectorDecided{
		Rule:       d.Rule,
		Inputs:     inputs,
		Candidates: d.Candidates,
		Route:      route,
		Reason:     d.Reason,
	}, nil
}

// Decide evaluates every rule against an activation (see Activation) and
// returns the first, in file order, whose expression holds. Every rule is
// evaluated, so Candidates lists all that held.
//
// One turn is in flight at a time: while state.turn_in_flight is true a rule
// that routes to an agent, or asks a router (which mostly routes to one),
// may be a candidate but never wins, and the next rule that held with
// another kind of route wins instead. Decide returns
// false when no rule wins, and a *RuleError when an expression fails to
// evaluate or yields something other than a bool.
func (w *Workflow) Decide(act map[string]any) (Decision, bool, error) {
	return w.decide(act, false)
}

// DecideMemory is Decide restricted to the rules with a memory route: the
// first of them, in file order, whose expression holds. The selector uses it
// while tool calls are pending, when no other route may be taken: writing
// memory moves the session nowhere, so it need not wait. Candidates lists
// the memory rules that held.
func (w *Workflow) DecideMemory(act map[string]any) (Decision, bool, error) {
	return w.decide(act, true)
}

// decide is Decide, or DecideMemory when memoryOnly: the rules without a
// memory route are then neither evaluated nor candidates.
func (w *Workflow) decide(act map[string]any, memoryOnly bool) (Decision, bool, error) {
	busy := turnInFlight(act)
	var d Decision
	won := -1
	for i := range w.Rules {
		r := &w.Rules[i]
		if memoryOnly && r.Route.Memory == nil {
			continue
		}
		held, err := r.when.Bool(act)
		if err != nil {
			return Decision{}, false, &RuleError{Rule: r.Name, Field: "when", Err: err}
		}
		if !held {
			continue
		}
		d.Candidates = append(d.Candidates, r.Name)
		if won < 0 && !(busy && routesTurns(r.Route)) && !feedsItself(r, act) {
			won = i
		}
	}
	if won < 0 {
		return Decision{}, false, nil
	}
	r := &w.Rules[won]
	d.Rule, d.Route, d.Reason = r.Name, r.Route.clone(), r.Reason
	if d.Reason == "" {
		d.Reason = r.Route.reason()
	}
	d.Inputs = make(map[string]any, len(r.when.Inputs()))
	for _, in := range r.when.Inputs() {
		d.Inputs[in.String()] = in.Resolve(act)
	}
	if r.Route.Fork != nil {
		at, err := forkAt(r.at, act)
		if err != nil {
			return Decision{}, false, &RuleError{Rule: r.Name, Field: "route.fork.at", Err: err}
		}
		d.ForkAt = at
	}
	if r.Route.Memory != nil {
		content, err := memoryContent(r, act)
		if err != nil {
			return Decision{}, false, err
		}
		d.Content = content
	}
	return d, true, nil
}

// MemoryContent evaluates the content of the named rule's memory route over
// an activation: what a decision of that rule writes. A redelivered trigger
// whose decision is stored evaluates it again over the state the decision
// read.
func (w *Workflow) MemoryContent(rule string, act map[string]any) (string, error) {
	for i := range w.Rules {
		if r := &w.Rules[i]; r.Name == rule && r.Route.Memory != nil {
			return memoryContent(r, act)
		}
	}
	return "", fmt.Errorf("workflow %s has no rule %q with a memory route", w.Name, rule)
}

func memoryContent(r *Rule, act map[string]any) (string, error) {
	s, err := r.content.String(act)
	if err == nil && strings.TrimSpace(s) == "" {
		err = errors.New("yields an empty text")
	}
	if err != nil {
		return "", &RuleError{Rule: r.Name, Field: "route.memory.content", Err: err}
	}
	return s, nil
}

// Stopped reports the first stop condition, in file order, that holds for
// the activation, with its reason (or a reason naming it when it has none).
// The session is then closed with outcome OutcomeStopped.
func (w *Workflow) Stopped(act map[string]any) (name, reason string, stopped bool, err error) {
	for _, s := range w.Stop {
		held, err := s.when.Bool(act)
		if err != nil {
			return "", "", false, &RuleError{Rule: s.Name, Field: "when", Err: err}
		}
		if held {
			if s.Reason == "" {
				return s.Name, "stop condition " + s.Name + " holds", true, nil
			}
			return s.Name, s.Reason, true, nil
		}
	}
	return "", "", false, nil
}

// forkAt evaluates a fork route's at, or returns state.seq when it has none
// (prg nil), so the decision records the point the fork was decided at.
func forkAt(prg *expr.Program, act map[string]any) (uint64, error) {
	st, _ := act["state"].(map[string]any)
	head, known := st["seq"].(int64)
	if prg == nil {
		return uint64(max(head, 0)), nil
	}
	at, err := prg.Int(act)
	if err != nil {
		return 0, err
	}
	if known && at > head {
		return 0, fmt.Errorf("sequence %d is past the head %d", at, head)
	}
	if at < 1 {
		return 0, fmt.Errorf("sequence %d is not a position of the log", at)
	}
	return uint64(at), nil
}

// routesTurns reports a route that may start an agent turn: an agent route,
// or a router's, whose answer may be one.
func routesTurns(r Route) bool {
	return r.Kind() == RouteAgent || r.Kind() == RouteRouter
}

func turnInFlight(act map[string]any) bool {
	st, _ := act["state"].(map[string]any)
	busy, _ := st["turn_in_flight"].(bool)
	return busy
}

// feedsItself reports a memory rule matching a memory write: its own write
// would match it again, without end. Such a rule never wins on a
// rath.memory.written event; it still counts as a candidate, so the
// decision records that it held.
func feedsItself(r *Rule, act map[string]any) bool {
	ev, _ := act["event"].(map[string]any)
	return r.Route.Memory != nil && ev["type"] == events.TypeMemoryWritten
}
