package workflow_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

func loadExample(t *testing.T) *workflow.Workflow {
	t.Helper()
	w, err := workflow.Load("testdata/fix-issue.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// turn is the events of one completed agent turn.
func turn(id, agent string) []any {
	return []any{
		&events.TurnRequested{TurnID: id, Agent: agent, Rule: "r"},
		&events.ModelCalled{Agent: agent, Provider: "openai", Model: "m", TokensIn: 100, TokensOut: 10},
		&events.ChunkAppended{Role: events.RoleAssistant, Agent: agent, Content: "done"},
		&events.TurnCompleted{TurnID: id, Agent: agent, StopReason: "end_turn"},
	}
}

func concat(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var started = []any{&events.SessionStarted{Workflow: "fix-issue", Task: "fix #12", Labels: map[string]string{"team": "core"}}}

func TestDecideExample(t *testing.T) {
	w := loadExample(t)
	sixTurns := concat(started, turn("t1", "researcher"), turn("t2", "coder"), turn("t3", "validator"),
		turn("t4", "coder"), turn("t5", "validator"), turn("t6", "coder"))
	tests := []struct {
		name       string
		given      []any
		rule       string
		route      string
		candidates []string
		inputs     map[string]any
		forkAt     uint64
	}{
		{
			name: "session start routes to the researcher", given: started,
			rule: "start", route: "agent:researcher", candidates: []string{"start"},
			inputs: map[string]any{"event.type": events.TypeSessionStarted},
		},
		{
			name: "the researcher's completed turn routes to the coder", given: concat(started, turn("t1", "researcher")),
			rule: "plan-ready", route: "agent:coder", candidates: []string{"plan-ready"},
			inputs: map[string]any{"event.type": events.TypeTurnCompleted, "event.data.agent": "researcher"},
		},
		{
			name: "a failed validation with turns left forks at the failure",
			given: concat(started, turn("t1", "researcher"), turn("t2", "coder"), turn("t3", "validator"),
				[]any{&events.ValidationFailed{Validator: "go test", Reason: "2 tests fail"}}),
			rule: "retry", route: "fork:coder", candidates: []string{"retry", "give-up"},
			inputs: map[string]any{"event.type": events.TypeValidationFailed, "state.turns": int64(3)},
			forkAt: 14,
		},
		{
			name:  "a failed validation after six turns gives up",
			given: concat(sixTurns, []any{&events.ValidationFailed{Validator: "go test", Reason: "still failing"}}),
			rule:  "give-up", route: "close:failed", candidates: []string{"give-up"},
			inputs: map[string]any{"event.type": events.TypeValidationFailed},
		},
		{
			name: "a passed validation closes",
			given: concat(started, turn("t1", "coder"),
				[]any{&events.ValidationPassed{Validator: "go test"}}),
			rule: "passed", route: "close:success", candidates: []string{"passed"},
			inputs: map[string]any{"event.type": events.TypeValidationPassed},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok, err := w.Decide(activation(t, tc.given...))
			if err != nil || !ok {
				t.Fatalf("decide: %v %v", ok, err)
			}
			if d.Rule != tc.rule || d.Route.String() != tc.route || d.ForkAt != tc.forkAt {
				t.Errorf("rule %s route %s fork at %d, want %s %s %d", d.Rule, d.Route, d.ForkAt, tc.rule, tc.route, tc.forkAt)
			}
			if !reflect.DeepEqual(d.Candidates, tc.candidates) {
				t.Errorf("candidates %v, want %v", d.Candidates, tc.candidates)
			}
			if !reflect.DeepEqual(d.Inputs, tc.inputs) {
				t.Errorf("inputs %#v, want %#v", d.Inputs, tc.inputs)
			}
		})
	}
}

func TestDecideNoRuleHolds(t *testing.T) {
	w := loadExample(t)
	for name, given := range map[string][]any{
		"a chunk":                  concat(started, []any{&events.ChunkAppended{Role: events.RoleUser, Content: "hi"}}),
		"a git push":               concat(started, []any{&events.ToolRequested{CallID: "c", Tool: "run", Arguments: json.RawMessage(`{"command":["git","push"]}`)}}),
		"a tool without arguments": concat(started, []any{&events.ToolRequested{CallID: "c", Tool: "run"}}),
	} {
		t.Run(name, func(t *testing.T) {
			d, ok, err := w.Decide(activation(t, given...))
			if err != nil || ok {
				t.Fatalf("got %+v %v %v, want no decision", d, ok, err)
			}
		})
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	w := mustParse(t, `name: order
agents: [{name: coder, provider: openai}, {name: tester, provider: openai}]
rules:
  - {name: never, when: "false", route: {agent: tester}}
  - {name: first, when: "state.turns < 3", route: {agent: coder}, reason: keep coding}
  - {name: second, when: "true", route: {agent: tester}}
  - {name: third, when: "event.seq >= 1", route: {close: {outcome: done, reason: always}}}
`)
	d, ok, err := w.Decide(activation(t, started...))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d.Rule != "first" || d.Reason != "keep coding" || !reflect.DeepEqual(d.Candidates, []string{"first", "second", "third"}) {
		t.Fatalf("decision %+v", d)
	}
}

// TestDecideOneTurnInFlight: while a turn is in flight an agent route can be
// a candidate but never wins.
func TestDecideOneTurnInFlight(t *testing.T) {
	w := mustParse(t, `name: busy
agents: [{name: coder, provider: openai}]
rules:
  - {name: keep-coding, when: "state.turns < 3", route: {agent: coder}}
  - {name: watchdog, when: "state.events > 3", route: {close: {outcome: stalled, reason: too quiet}}}
`)
	tests := []struct {
		name       string
		given      []any
		rule       string
		candidates []string
	}{
		{"idle: the agent rule wins", started, "keep-coding", []string{"keep-coding"}},
		{"busy: the agent rule is held", concat(started, []any{&events.TurnRequested{TurnID: "t1", Agent: "coder"}}), "", nil},
		{"busy: the next rule wins", concat(started, []any{
			&events.TurnRequested{TurnID: "t1", Agent: "coder"},
			&events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "thinking"},
			&events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "still thinking"},
		}), "watchdog", []string{"keep-coding", "watchdog"}},
		{"idle again after the turn", concat(started, turn("t1", "coder")), "keep-coding", []string{"keep-coding", "watchdog"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok, err := w.Decide(activation(t, tc.given...))
			if err != nil || ok != (tc.rule != "") || d.Rule != tc.rule || !reflect.DeepEqual(d.Candidates, tc.candidates) {
				t.Fatalf("got %q %v %v %v, want %q %v", d.Rule, d.Candidates, ok, err, tc.rule, tc.candidates)
			}
			if d.Rule == "watchdog" && d.Reason != "too quiet" {
				t.Fatalf("reason %q: want the close route's", d.Reason)
			}
		})
	}
}

func TestDecideErrors(t *testing.T) {
	tests := []struct {
		name, when, rule, msg string
	}{
		{"not a bool", "event.data.?task.orValue('')", "bad", `workflow rule "bad": when: yields string, not bool`},
		{"missing key", "event.data.validator == 'go test'", "bad", "no such key: validator"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := mustParse(t, `name: e
agents: [{name: a, provider: openai}]
rules:
  - {name: ok, when: "true", route: {agent: a}}
  - {name: bad, when: "`+tc.when+`", route: {agent: a}}
`)
			_, ok, err := w.Decide(activation(t, started...))
			var re *workflow.RuleError
			if ok || !errors.As(err, &re) || re.Rule != tc.rule || re.Field != "when" || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v %v, want a RuleError for %q containing %q", ok, err, tc.rule, tc.msg)
			}
		})
	}
}

func TestDecideForkAt(t *testing.T) {
	src := func(at string) string {
		return `name: f
agents: [{name: a, provider: openai}]
rules: [{name: back, when: "true", route: {fork: {at: "` + at + `", reason: try again}}}]
`
	}
	decided := []any{&events.SelectorDecided{Rule: "r", Route: "agent:a", Agent: "a", TurnID: "t1"}}
	given := concat(started, decided, turn("t1", "a"))
	for at, want := range map[string]uint64{"": 6, "event.seq - 1": 5, "state.fork_seq + 1": 1,
		`state.decisions.filter(d, d.route == 'agent:a')[0].seq - 1`: 1} {
		d, ok, err := mustParse(t, src(at)).Decide(activation(t, given...))
		if err != nil || !ok || d.ForkAt != want || d.Reason != "try again" || d.Route.String() != "fork:" {
			t.Errorf("at %q: %+v %v %v, want fork at %d", at, d, ok, err, want)
		}
	}
	for _, at := range []string{"event.seq + 1", "0"} {
		_, _, err := mustParse(t, src(at)).Decide(activation(t, given...))
		var re *workflow.RuleError
		if !errors.As(err, &re) || re.Field != "route.fork.at" {
			t.Errorf("at %q: error %v, want a RuleError on route.fork.at", at, err)
		}
	}
}

func TestDecideInputsOfVariableIndex(t *testing.T) {
	w := mustParse(t, `name: i
agents: [{name: coder, provider: openai}]
rules:
  - name: enough
    when: state.agent_turns[state.last_agent] >= 1 && state.labels.team == "core"
    route: {close: {outcome: done}}
`)
	d, ok, err := w.Decide(activation(t, concat(started, turn("t1", "coder"))...))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := map[string]any{
		"state.agent_turns": map[string]any{"coder": int64(1)},
		"state.last_agent":  "coder",
		"state.labels.team": "core",
	}
	if !reflect.DeepEqual(d.Inputs, want) {
		t.Fatalf("inputs %#v, want %#v", d.Inputs, want)
	}
}

func TestDecisionEvent(t *testing.T) {
	w := loadExample(t)
	tests := []struct {
		name       string
		given      []any
		rule       string
		route      string
		candidates []string
		inputs     string
		reason     string
	}{
		{"agent", concat(started, turn("t1", "researcher")), "plan-ready", "agent:coder", []string{"plan-ready"},
			`{"event.data.agent":"researcher","event.type":"rath.agent.turn.completed"}`, ""},
		{"fork records its point", concat(started, turn("t1", "coder"), []any{&events.ValidationFailed{Validator: "v", Reason: "r"}}),
			"retry", "fork:coder@6", []string{"retry", "give-up"},
			`{"event.type":"rath.validation.failed","state.turns":1}`, "validation failed; retry the fix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _, err := w.Decide(activation(t, tc.given...))
			if err != nil {
				t.Fatal(err)
			}
			e, err := d.Event()
			if err != nil {
				t.Fatal(err)
			}
			if e.Rule != tc.rule || e.Route != tc.route || !reflect.DeepEqual(e.Candidates, tc.candidates) ||
				string(e.Inputs) != tc.inputs || e.Reason != tc.reason {
				t.Fatalf("event %+v inputs %s", e, e.Inputs)
			}
			if k, ok := events.KindOf(e); !ok || k.Type != events.TypeSelectorDecided {
				t.Fatalf("kind %v", k)
			}
		})
	}
}

func TestDecisionDoesNotShareTheWorkflow(t *testing.T) {
	w := loadExample(t)
	act := activation(t, concat(started, []any{&events.ValidationPassed{Validator: "v"}})...)
	d, _, _ := w.Decide(act)
	d.Route.Close.Outcome = "changed"
	if d, _, _ = w.Decide(act); d.Route.Close.Outcome != "success" {
		t.Fatalf("outcome %q: a decision changed the workflow", d.Route.Close.Outcome)
	}
}

func TestStopped(t *testing.T) {
	w := loadExample(t)
	failed := func(id string) []any {
		return []any{&events.TurnRequested{TurnID: id, Agent: "coder"}, &events.TurnFailed{TurnID: id, Agent: "coder", Error: "429"}}
	}
	tests := []struct {
		name         string
		given        []any
		stop, reason string
	}{
		{"running", concat(started, turn("t1", "coder")), "", ""},
		{"three failed turns", concat(started, failed("t1"), failed("t2"), failed("t3")), "turns-failing", "three agent turns failed"},
		{"labelled cancel", []any{&events.SessionStarted{Labels: map[string]string{"cancel": "yes"}}}, "cancelled", "the session was labelled cancel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, reason, stopped, err := w.Stopped(activation(t, tc.given...))
			if err != nil || stopped != (tc.stop != "") || name != tc.stop || reason != tc.reason {
				t.Fatalf("got %q %q %v %v, want %q %q", name, reason, stopped, err, tc.stop, tc.reason)
			}
		})
	}
}

func TestStoppedDefaultReasonAndError(t *testing.T) {
	w := mustParse(t, base+"stop:\n  - {name: quiet, when: 'state.events >= 1'}\n  - {name: broken, when: 'event.data.x'}\n")
	_, reason, stopped, err := w.Stopped(activation(t, started...))
	if err != nil || !stopped || reason != "stop condition quiet holds" {
		t.Fatalf("got %q %v %v", reason, stopped, err)
	}
	w = mustParse(t, base+"stop:\n  - {name: broken, when: 'event.data.x'}\n")
	var re *workflow.RuleError
	if _, _, _, err := w.Stopped(activation(t, started...)); !errors.As(err, &re) || re.Rule != "broken" {
		t.Fatalf("error %v", err)
	}
}

// TestDecideConcurrently runs under -race: a Workflow is shared by every
// handler goroutine of the selector.
func TestDecideConcurrently(t *testing.T) {
	w := loadExample(t)
	act := activation(t, concat(started, turn("t1", "researcher"))...)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if d, ok, err := w.Decide(act); err != nil || !ok || d.Rule != "plan-ready" {
					t.Errorf("decide: %+v %v %v", d, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestGuards checks the ways docs/workflows.md gives to read keys an event
// or state may not have.
func TestGuards(t *testing.T) {
	act := activation(t, started...)
	for _, when := range []string{
		`event.type == "rath.validation.failed" && event.data.reason == "x" || event.type == "rath.session.started"`,
		`!has(event.data.reason)`,
		`event.data.?reason.orValue("") == ""`,
		`state.agent_turns[?"coder"].orValue(0) == 0`,
		`"team" in state.labels`,
	} {
		w := mustParse(t, "name: g\nagents: [{name: a, provider: openai}]\nrules:\n  - name: g\n    when: '"+strings.ReplaceAll(when, "'", "''")+"'\n    route: {close: {outcome: ok}}\n")
		if _, ok, err := w.Decide(act); !ok || err != nil {
			t.Errorf("%s: %v %v", when, ok, err)
		}
	}
}

// A rule that asks a router may start a turn, so it is held while a turn is
// in flight, like an agent rule; idle, it wins and Decide returns its route
// for the selector to ask.
func TestDecideRouterRouteHeldWhileBusy(t *testing.T) {
	w := mustParse(t, `name: busy
agents: [{name: coder, provider: openai}]
rules:
  - {name: triage, when: "true", route: {router: triage}}
  - {name: watchdog, when: "state.turn_in_flight", route: {close: {outcome: stalled}}}
`)
	d, ok, err := w.Decide(activation(t, started...))
	if err != nil || !ok || d.Rule != "triage" || d.Route.Router != "triage" {
		t.Fatalf("idle: %+v %v %v", d, ok, err)
	}
	d, ok, err = w.Decide(activation(t, concat(started, []any{&events.TurnRequested{TurnID: "t1", Agent: "coder"}})...))
	if err != nil || !ok || d.Rule != "watchdog" || !reflect.DeepEqual(d.Candidates, []string{"triage", "watchdog"}) {
		t.Fatalf("busy: %+v %v %v", d, ok, err)
	}
}
