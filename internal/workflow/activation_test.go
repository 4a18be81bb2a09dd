package workflow_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

func TestActivation(t *testing.T) {
	evs := history(t,
		&events.SessionStarted{Workflow: "fix-issue", Task: "fix TestParse", Labels: map[string]string{"team": "core"}},
		&events.SessionForked{Parent: "p", AtSeq: 1, ParentHash: "h1", Reason: "retry"},
		&events.TurnRequested{TurnID: "t1", Agent: "researcher"},
		&events.ModelCalled{Agent: "researcher", Provider: "anthropic", Model: "m", TokensIn: 100, TokensOut: 20},
		&events.TurnCompleted{TurnID: "t1", Agent: "researcher"},
		&events.SelectorDecided{Rule: "code", Route: "agent:coder", Agent: "coder", TurnID: "t2"},
		&events.TurnRequested{TurnID: "t2", Agent: "coder"},
		&events.ModelCallFailed{Agent: "coder", Provider: "openai", Model: "m", Attempt: 1, Error: "429"},
		&events.TurnFailed{TurnID: "t2", Agent: "coder", Error: "429"},
		&events.TurnRequested{TurnID: "t3", Agent: "coder"},
		&events.ModelCalled{Agent: "coder", Provider: "openai", Model: "m", TokensIn: 300, TokensOut: 50},
		&events.WorkPending{WorkID: "w2", Kind: "todo", Description: "done soon", Assignee: "coder"},
		&events.WorkPending{WorkID: "w1", Kind: "todo", Description: "still open", Assignee: "coder"},
		&events.WorkDone{WorkID: "w2", Outcome: "done"},
		&events.ToolRequested{CallID: "c1", Tool: "shell", Agent: "coder"},
		&events.ValidationFailed{Validator: "go test", Reason: "fails"},
		&events.ValidationPassed{Validator: "go vet"},
		&events.ToolCompleted{CallID: "c1", Tool: "shell", ExitCode: 1, DurationMS: 1500, Result: "FAIL"},
	)
	st := fold(evs)
	last := evs[len(evs)-1]
	act, err := workflow.Activation(st, last)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"event": map[string]any{
			"type": events.TypeToolCompleted, "id": last.ID, "seq": int64(18), "session": "s",
			"data": map[string]any{"call_id": "c1", "tool": "shell", "exit_code": int64(1), "duration_ms": int64(1500), "result": "FAIL"},
		},
		"state": map[string]any{
			"status":             "active",
			"turns":              int64(1),
			"turns_failed":       int64(1),
			"tool_calls":         int64(1),
			"model_calls":        int64(2),
			"events":             int64(18),
			"last_agent":         "coder",
			"turn_in_flight":     true,
			"tokens_in":          int64(400),
			"tokens_out":         int64(70),
			"tokens":             int64(470),
			"validations_failed": int64(1),
			"validations_passed": int64(1),
			"parent":             "p",
			"fork_seq":           int64(1),
			"fork_depth":         int64(1),
			"seq":                int64(18),
			"labels":             map[string]any{"team": "core"},
			"agent_turns":        map[string]any{"researcher": int64(1)}, // coder: one turn failed, one in flight
			"decisions":          []any{map[string]any{"seq": int64(6), "rule": "code", "route": "agent:coder"}},
			"task":               "fix TestParse",
			"open_work":          []any{map[string]any{"id": "w1", "kind": "todo", "description": "still open", "assignee": "coder", "seq": int64(13)}},
			"experiments":        []any{},
		},
	}
	if !reflect.DeepEqual(act, want) {
		gotJSON, _ := json.MarshalIndent(act, "", "  ")
		wantJSON, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("activation\n%s\nwant\n%s", gotJSON, wantJSON)
	}
}

func TestActivationData(t *testing.T) {
	st := &session.State{}
	tests := []struct {
		name string
		data string
		want map[string]any
		ok   bool
	}{
		{"none", "", map[string]any{}, true},
		{"null", "null", map[string]any{}, true},
		{"numbers", `{"n": 3, "x": 0.5, "big": 1e3, "list": [1, {"k": 2}]}`,
			map[string]any{"n": int64(3), "x": 0.5, "big": 1000.0, "list": []any{int64(1), map[string]any{"k": int64(2)}}}, true},
		{"not an object", `[1, 2]`, nil, false},
		{"not JSON", `{`, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			act, err := workflow.Activation(st, events.Stored{ID: "e", Type: "rath.work.done", Data: json.RawMessage(tc.data)})
			if (err == nil) != tc.ok {
				t.Fatalf("error %v", err)
			}
			if tc.ok && !reflect.DeepEqual(act["event"].(map[string]any)["data"], tc.want) {
				t.Fatalf("data %#v, want %#v", act["event"].(map[string]any)["data"], tc.want)
			}
		})
	}
}

// TestNumbersCompareAcrossTypes: JSON numbers with a fraction are doubles,
// and rules compare them with int literals.
func TestNumbersCompareAcrossTypes(t *testing.T) {
	w := mustParse(t, `name: n
agents: [{name: a, provider: openai}]
rules:
  - {name: low, when: "event.data.score < 1 && event.data.n == 3", route: {agent: a}}
`)
	act, err := workflow.Activation(&session.State{}, events.Stored{Type: "rath.work.done", Data: json.RawMessage(`{"score": 0.5, "n": 3}`)})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok, err := w.Decide(act); err != nil || !ok || d.Rule != "low" {
		t.Fatalf("got %+v %v %v", d, ok, err)
	}
}

// state.experiments lists the experiments folded, each with its metrics as
// doubles (a whole number in the report too), so a rule compares them
// without caring how the JSON wrote them; a failed one is not ok.
func TestActivationExperiments(t *testing.T) {
	evs := history(t,
		&events.SessionStarted{Workflow: "research", Task: "fit the curve"},
		&events.ExperimentRecorded{Name: "line", CallID: "c1", Agent: "experimenter", Command: []string{"go", "run", "."},
			Config: json.RawMessage(`{"degree":1}`), Metrics: map[string]float64{"val_r2": 1}, Commit: "abc"},
		&events.ExperimentRecorded{Name: "wild", CallID: "c2", Metrics: map[string]float64{"diverged": 1}, ExitCode: 1},
		&events.ExperimentRecorded{Name: "odd", CallID: "c3", Config: json.RawMessage(`[1]`), Problem: "the report has no metrics"},
	)
	st := fold(evs)
	act, err := workflow.Activation(st, evs[len(evs)-1])
	if err != nil {
		t.Fatal(err)
	}
	xs := act["state"].(map[string]any)["experiments"].([]any)
	if len(xs) != 3 {
		t.Fatalf("experiments = %v, want 3", xs)
	}
	first := xs[0].(map[string]any)
	want := map[string]any{"seq": int64(2), "name": "line", "agent": "experimenter", "ok": true, "exit_code": int64(0),
		"metrics": map[string]any{"val_r2": float64(1)}, "config": map[string]any{"degree": int64(1)}, "commit": "abc", "problem": ""}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("experiments[0] = %v, want %v", first, want)
	}
	if xs[1].(map[string]any)["ok"] != false || len(xs[2].(map[string]any)["config"].(map[string]any)) != 0 {
		t.Errorf("a failed experiment or a config that is not an object: %v, %v", xs[1], xs[2])
	}
	for src, want := range map[string]bool{
		`state.experiments.exists(x, x.ok && x.metrics.val_r2 >= 0.9)`:             true,
		`state.experiments.filter(x, x.ok).size() == 1`:                            true,
		`state.experiments.exists(x, x.ok && x.config.degree > 1)`:                 false,
		`state.experiments.exists(x, has(x.metrics.diverged) && x.exit_code == 1)`: true,
	} {
		c, err := workflow.CompileCondition(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := c.Holds(act); err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", src, got, err, want)
		}
	}
}
