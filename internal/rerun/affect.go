package rerun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Change is what differs between a recorded session's workflow and a
// changed one, in the parts that decide where the change can first show in
// a run: the agents, the routing, and the rest.
type Change struct {
	// Agents are the agents defined differently (added, removed, or any of
	// their fields: provider, model, base URL, system prompt, tools, sandbox,
	// network, script content, max tokens, recall, role), sorted. Only their
	// turns can differ.
	Agents []string
	// Routing says the rules, stop conditions or budgets differ: the
	// selector decides after every event with them.
	Routing bool
	// Global are the workflow-level keys that differ and that every turn can
	// see (gates, compaction, memory, sandbox, network, MCP servers, or a
	// key this analysis does not know), sorted: the run is affected from its
	// start.
	Global []string
}

// None reports that the two workflows run every turn and decision alike.
func (c Change) None() bool { return len(c.Agents) == 0 && !c.Routing && len(c.Global) == 0 }

// String names the change for people.
func (c Change) String() string {
	var parts []string
	if len(c.Agents) > 0 {
		parts = append(parts, "agents "+strings.Join(c.Agents, ", "))
	}
	if c.Routing {
		parts = append(parts, "routing (rules, stop, budgets)")
	}
	if len(c.Global) > 0 {
		parts = append(parts, "workflow "+strings.Join(c.Global, ", "))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, "; ")
}

// routingKeys are the workflow keys the selector decides with.
var routingKeys = map[string]bool{"rules": true, "stop": true, "budgets": true}

// Diff compares two workflow bundles, the recorded one and the changed
// one, by their specs as YAML values (so that formatting and comments do
// not count) with each script's path replaced by its content's hash (so
// that moving a script does not count, editing it does). The workflow's
// name and description do not change a run.
func Diff(old, changed workflow.Bundle) (Change, error) {
	a, err := specValue(old)
	if err != nil {
		return Change{}, fmt.Errorf("recorded workflow %s: %w", old.Path, err)
	}
	b, err := specValue(changed)
	if err != nil {
		return Change{}, fmt.Errorf("changed workflow %s: %w", changed.Path, err)
	}
	var c Change
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		switch {
		case k == "name" || k == "description":
		case k == "agents":
			c.Agents = agentDiff(a[k], b[k])
		case reflect.DeepEqual(a[k], b[k]):
		case routingKeys[k]:
			c.Routing = true
		default:
			c.Global = append(c.Global, k)
		}
	}
	return c, nil
}

// specValue is a bundle's spec as a YAML value, each agent's script path
// replaced by the hash of the script's content.
func specValue(b workflow.Bundle) (map[string]any, error) {
	var v map[string]any
	if err := yaml.Unmarshal(b.Spec, &v); err != nil {
		return nil, err
	}
	agents, _ := v["agents"].([]any)
	for _, a := range agents {
		m, ok := a.(map[string]any)
		if !ok {
			continue
		}
		if path, ok := m["script"].(string); ok {
			sum := sha256.Sum256(b.Files[path])
			m["script"] = "sha256:" + hex.EncodeToString(sum[:])
		}
	}
	return v, nil
}

// agentDiff names the agents defined differently in two agents lists, by
// name: added, removed or changed.
func agentDiff(a, b any) []string {
	byName := func(v any) map[string]any {
		out := map[string]any{}
		list, _ := v.([]any)
		for i, a := range list {
			name := fmt.Sprint(i)
			if m, ok := a.(map[string]any); ok {
				if n, ok := m["name"].(string); ok {
					name = n
				}
			}
			out[name] = a
		}
		return out
	}
	x, y := byName(a), byName(b)
	var out []string
	for n, v := range x {
		if w, ok := y[n]; !ok || !reflect.DeepEqual(v, w) {
			out = append(out, n)
		}
	}
	for n := range y {
		if _, ok := x[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Point is where a counterfactual of a recorded session starts.
type Point struct {
	// At is the last sequence of the recorded session's logical log the
	// counterfactual shares (reuses as recorded); 0 runs it from the start,
	// reusing nothing.
	At uint64 `json:"at"`
	// Agent takes the counterfactual's first turn; Decision is the routing
	// decision that asks for it (the recorded one when only agents changed,
	// the changed workflow's when a rule decides differently), with no
	// turn ID yet. Both are empty when At is 0.
	Agent    string                  `json:"agent,omitempty"`
	Decision *events.SelectorDecided `json:"-"`
	// Trigger is the ID of the event the decision answers.
	Trigger string `json:"-"`
	// Why says for people why the counterfactual starts there.
	Why string `json:"why"`
}

// Locate finds the first point of a recorded session's logical log that a
// change can affect: the first routing decision the changed workflow would
// decide differently (when the routing changed), or the first decision
// that asks one of the changed agents for a turn, whichever comes first.
// A change to the workflow as a whole, or a first difference that is not
// an agent's turn (the changed workflow closes, forks, asks a router or
// decides nothing there), starts the counterfactual from the beginning:
// this analysis cannot tell what it would do from the middle. A change
// that affects nothing in the log gives a point at its last event.
//
// Routing is compared by deciding every trigger (every event the selector
// did not produce) with both workflows over the recorded state at it, with
// the selector's checks in its order: the budgets, the stop conditions,
// the rules (and the memory rules alone, which it uses while tool calls
// are pending). Both workflows go through the same simulation, so a
// difference comes from the change alone.
func Locate(log []events.Stored, c Change, old, changed *workflow.Workflow) Point {
	if len(log) == 0 {
		return Point{Why: "the session has no events"}
	}
	if len(c.Global) > 0 {
		return Point{Why: fmt.Sprintf("the workflow's %s changed, which every turn can see: run from the start", strings.Join(c.Global, ", "))}
	}
	st := &session.State{}
	for i, e := range log {
		inTurn := st.Turn != nil // before e
		session.Apply(st, e)
		if e.Type == events.TypeSelectorDecided {
			var d events.SelectorDecided
			if json.Unmarshal(e.Data, &d) == nil && d.Agent != "" && slices.Contains(c.Agents, d.Agent) {
				if i == 0 || inTurn {
					return Point{Why: fmt.Sprintf("the first turn of changed agent %s (decision at %d) is not between turns: run from the start", d.Agent, e.Seq)}
				}
				d.TurnID = ""
				return Point{At: log[i-1].Seq, Agent: d.Agent, Decision: &d, Trigger: e.Causation,
					Why: fmt.Sprintf("first turn of changed agent %s (decided at %d)", d.Agent, e.Seq)}
			}
		}
		if !c.Routing || e.Source == replay.SourceSelector {
			continue
		}
		ko, _ := decide(old, st, e)
		kn, dn := decide(changed, st, e)
		if ko == kn {
			continue
		}
		if dn == nil || dn.Route.Kind() != workflow.RouteAgent {
			return Point{Why: fmt.Sprintf("the changed rules decide the %s at %d differently (%s, was %s), not by an agent's turn: run from the start", e.Type, e.Seq, kn, ko)}
		}
		ev, err := dn.Event()
		if err != nil {
			return Point{Why: fmt.Sprintf("the changed rules' decision at %d: %v: run from the start", e.Seq, err)}
		}
		ev.Agent = dn.Route.Agent
		return Point{At: e.Seq, Agent: ev.Agent, Decision: ev, Trigger: e.ID,
			Why: fmt.Sprintf("the changed rules decide the %s at %d differently (%s, was %s)", e.Type, e.Seq, kn, ko)}
	}
	last := log[len(log)-1].Seq
	return Point{At: last, Why: "the change affects no turn or decision of the recorded session"}
}

// decide is what a workflow decides after event e over the state st folded
// through it, as a key two decisions compare by, with the rules' decision
// (nil when the budgets, a stop condition or no rule decided).
func decide(w *workflow.Workflow, st *session.State, e events.Stored) (string, *workflow.Decision) {
	if why, over := w.Exceeded(st, st.Created, e.Time); over {
		return "budget: " + why, nil
	}
	act, err := workflow.Activation(st, e)
	if err != nil {
		return "error: " + err.Error(), nil
	}
	if name, _, stop, err := w.Stopped(act); err != nil {
		return "error: " + err.Error(), nil
	} else if stop {
		return "stop: " + name, nil
	}
	key := func(d workflow.Decision, ok bool, err error) string {
		switch {
		case err != nil:
			return "error: " + err.Error()
		case !ok:
			return "none"
		}
		return fmt.Sprintf("%s → %s@%d %q", d.Rule, d.Route, d.ForkAt, d.Content)
	}
	d, ok, err := w.Decide(act)
	m, mok, merr := w.DecideMemory(act)
	k := key(d, ok, err) + " | memory " + key(m, mok, merr)
	if !ok || err != nil {
		return k, nil
	}
	return k, &d
}
