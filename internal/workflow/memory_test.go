package workflow_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

// memoryWorkflow uses every memory setting: a workflow scope, an agent that
// recalls before its turns and may remember, and rules that write memory.
const memoryWorkflow = `name: mem
memory:
  scope: project:demo
agents:
  - name: coder
    provider: openai
    tools: [remember]
    recall:
      query: state.task + " " + event.data.agent
      scopes: [project:demo, agent:coder]
      tags: [failure-pattern]
      k: 3
  - name: researcher
    provider: openai
    recall: {query: state.task}
rules:
  - name: record-failure
    when: event.type == "rath.validation.failed"
    route:
      memory:
        content: '"Failure pattern: " + event.data.reason'
        tags: [failure-pattern]
        evidence: validation_signal
  - name: note
    when: event.type == "rath.approval.granted"
    route:
      memory: {content: '"approved by " + event.data.by', scope: "user:ana", evidence: human_correction}
  - name: retry
    when: event.type == "rath.validation.failed"
    route: {fork: {agent: coder}}
`

func TestParseMemorySettings(t *testing.T) {
	w := mustParse(t, memoryWorkflow)
	if w.Memory.Scope != "project:demo" {
		t.Fatalf("memory scope %q", w.Memory.Scope)
	}
	coder, _ := w.Agent("coder")
	rc := coder.Recall
	if rc == nil || rc.Query != `state.task + " " + event.data.agent` || !slices.Equal(rc.Scopes, []string{"project:demo", "agent:coder"}) ||
		!slices.Equal(rc.Tags, []string{"failure-pattern"}) || rc.K != 3 {
		t.Fatalf("coder recall %+v", rc)
	}
	if got := w.RecallScopes(coder); !slices.Equal(got, []string{"project:demo", "agent:coder"}) {
		t.Errorf("coder recall scopes %v", got)
	}
	researcher, _ := w.Agent("researcher")
	if got := w.RecallScopes(researcher); !slices.Equal(got, []string{"project:demo"}) {
		t.Errorf("researcher recall scopes %v, want the workflow's", got)
	}
	m := w.Rules[0].Route.Memory
	if w.Rules[0].Route.Kind() != workflow.RouteMemory || m.Scope != "project:demo" || m.Evidence != "validation_signal" ||
		!slices.Equal(m.Tags, []string{"failure-pattern"}) {
		t.Fatalf("record-failure route %+v", m)
	}
	if got := w.Rules[1].Route.String(); got != "memory:user:ana" {
		t.Errorf("note route %q", got)
	}

	// The query sees the turn request and the state, state.task included.
	act := activation(t,
		&events.SessionStarted{Task: "slugify titles"},
		&events.TurnRequested{TurnID: "turn-1", Agent: "coder"},
	)
	q, err := rc.RecallQuery(act)
	if err != nil || q != "slugify titles coder" {
		t.Fatalf("query %q, %v", q, err)
	}
}

func TestDefaultScope(t *testing.T) {
	w := mustParse(t, strings.Replace(memoryWorkflow, "memory:\n  scope: project:demo\n", "", 1))
	if got := w.DefaultScope("coder"); got != "project:demo" {
		t.Errorf("coder's default scope %q, want its first recall scope", got)
	}
	if got := w.DefaultScope("researcher"); got != "workflow:mem" {
		t.Errorf("researcher's default scope %q", got)
	}
	if got := w.Rules[0].Route.Memory.Scope; got != "workflow:mem" {
		t.Errorf("a memory route without a scope in a workflow without one: %q", got)
	}
	if got := w.RecallScopes(mustAgent(t, w, "researcher")); got != nil {
		t.Errorf("researcher recalls from %v, want every scope", got)
	}
}

func mustAgent(t *testing.T, w *workflow.Workflow, name string) workflow.Agent {
	t.Helper()
	a, ok := w.Agent(name)
	if !ok {
		t.Fatalf("no agent %s", name)
	}
	return a
}

// A memory rule is routed like any other (first match wins), is not held
// back by a turn in flight, and its decision carries the content it writes.
func TestDecideMemory(t *testing.T) {
	w := mustParse(t, memoryWorkflow)
	act := activation(t,
		&events.SessionStarted{Task: "slugify"},
		&events.TurnRequested{TurnID: "t1", Agent: "coder"},
		&events.ValidationFailed{Validator: "go test", Reason: "TestMake fails"},
	)
	d, ok, err := w.Decide(act)
	if err != nil || !ok {
		t.Fatalf("decide: %v %v", ok, err)
	}
	if d.Rule != "record-failure" || d.Content != "Failure pattern: TestMake fails" || !slices.Equal(d.Candidates, []string{"record-failure", "retry"}) {
		t.Fatalf("decision %+v", d)
	}
	ev, err := d.Event()
	if err != nil || ev.Route != "memory:project:demo" {
		t.Fatalf("decided %+v %v", ev, err)
	}
	if c, err := w.MemoryContent("record-failure", act); err != nil || c != d.Content {
		t.Fatalf("content again: %q %v", c, err)
	}
	m, ok, err := w.DecideMemory(act)
	if err != nil || !ok || m.Rule != "record-failure" || m.Content != d.Content {
		t.Fatalf("decide memory: %+v %v %v", m, ok, err)
	}

	// Only memory rules count for DecideMemory.
	granted := activation(t, &events.SessionStarted{}, &events.ApprovalGranted{ApprovalID: "a1", By: "ana"})
	if m, ok, err := w.DecideMemory(granted); err != nil || !ok || m.Rule != "note" || m.Content != "approved by ana" {
		t.Fatalf("decide memory on approval: %+v %v %v", m, ok, err)
	}
	started := activation(t, &events.SessionStarted{})
	if _, ok, err := w.DecideMemory(started); err != nil || ok {
		t.Fatalf("decide memory on start: %v %v", ok, err)
	}

	// An empty text is the workflow's defect, like a failing expression.
	empty := mustParse(t, strings.Replace(memoryWorkflow, `'"Failure pattern: " + event.data.reason'`, "event.data.reason", 1))
	_, _, err = empty.Decide(activation(t, &events.SessionStarted{}, &events.ValidationFailed{Validator: "v"}))
	var re *workflow.RuleError
	if !errors.As(err, &re) || re.Rule != "record-failure" || re.Field != "route.memory.content" {
		t.Fatalf("empty content: %v", err)
	}
}

func TestMemoryProblems(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     []workflow.Problem
	}{
		{"bad workflow scope", "scope: project:demo", "scope: demo",
			[]workflow.Problem{{3, "memory.scope", `scope "demo": want <kind>:<name>`}}},
		{"unknown memory field", "  scope: project:demo\n", "  scope: project:demo\n  ttl: 3\n",
			[]workflow.Problem{{4, "memory.ttl", "unknown field (fields: scope)"}}},
		{"recall without query", "    recall: {query: state.task}", "    recall: {k: 2}",
			[]workflow.Problem{{15, "agents[1].recall.query", "required: a CEL expression"}}},
		{"recall query not a string", "    recall: {query: state.task}", "    recall: {query: '1 + 2'}",
			[]workflow.Problem{{15, "agents[1].recall.query", "must yield string, not int"}}},
		{"recall query unknown field", "    recall: {query: state.task}", "    recall: {query: state.tsk}",
			[]workflow.Problem{{15, "agents[1].recall.query", `state has no field "tsk"`}}},
		{"bad recall scope", "scopes: [project:demo, agent:coder]", "scopes: [project:demo, team:x]",
			[]workflow.Problem{{10, "agents[0].recall.scopes[1]", `scope "team:x": unknown kind "team"`}}},
		{"bad recall tag", "      tags: [failure-pattern]\n      k: 3", "      tags: [failure pattern]\n      k: 3",
			[]workflow.Problem{{11, "agents[0].recall.tags", `tag "failure pattern"`}}},
		{"k too large", "k: 3", "k: 500",
			[]workflow.Problem{{12, "agents[0].recall.k", "at most 100, got 500"}}},
		{"unknown recall field", "k: 3", "k: 3\n      top: 2",
			[]workflow.Problem{{13, "agents[0].recall.top", "unknown field (fields: query, scopes, tags, k)"}}},
		{"memory route without content", `content: '"approved by " + event.data.by', `, "",
			[]workflow.Problem{{27, "rules[1].route.memory.content", "required"}}},
		{"memory content not a string", `'"approved by " + event.data.by'`, "'42'",
			[]workflow.Problem{{27, "rules[1].route.memory.content", "must yield string, not int"}}},
		{"memory route without evidence", "        evidence: validation_signal\n", "",
			[]workflow.Problem{{20, "rules[0].route.memory.evidence", "required (one of tool_result, human_correction, failed_attempt, validation_signal)"}}},
		{"unknown evidence", "evidence: human_correction", "evidence: hunch",
			[]workflow.Problem{{27, "rules[1].route.memory.evidence", `"hunch" is not one of tool_result`}}},
		{"bad memory route scope", `scope: "user:ana"`, `scope: "user:"`,
			[]workflow.Problem{{27, "rules[1].route.memory.scope", `scope "user:": name ""`}}},
		{"memory and agent", "{fork: {agent: coder}}", "{agent: coder, memory: {content: '\"x\"', evidence: tool_result}}",
			[]workflow.Problem{{30, "rules[2].route", "has agent and memory; a route is exactly one of agent, close, fork, approval, memory"}}},
		{"unknown memory route field", "evidence: human_correction", "evidence: human_correction, ttl: 3",
			[]workflow.Problem{{27, "rules[1].route.memory.ttl", "unknown field (fields: content, tags, scope, evidence)"}}},
		{"no scope to default to", "name: mem\nmemory:\n  scope: project:demo\n", "name: my workflow\n",
			[]workflow.Problem{{18, "rules[0].route.memory.scope", `required: the workflow has no memory scope and its default, "workflow:my workflow", is not a scope`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(memoryWorkflow, tc.old, tc.new, 1)
			if src == memoryWorkflow {
				t.Fatalf("%q is not in the workflow", tc.old)
			}
			w, err := workflow.Parse([]byte(src), "workflow.yaml")
			var se *workflow.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("got workflow %v, error %v; want a *SpecError", w, err)
			}
			if len(se.Problems) != len(tc.want) {
				t.Fatalf("problems:\n%v\nwant %d: %+v", err, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				got := se.Problems[i]
				if got.Line != want.Line || got.Field != want.Field || !strings.HasPrefix(got.Message, want.Message) {
					t.Errorf("problem %d: got %d %s %q\nwant %d %s %q...", i, got.Line, got.Field, got.Message, want.Line, want.Field, want.Message)
				}
			}
		})
	}
}

// A memory rule that matches a memory write would match its own write again
// without end: it never wins on rath.memory.written, though it still shows
// as a candidate.
func TestMemoryRuleDoesNotFeedItself(t *testing.T) {
	w := mustParse(t, `name: loop
agents: [{name: a, provider: openai}]
memory: {scope: "project:x"}
rules:
  - name: echo
    when: event.type == "rath.memory.written"
    route: {memory: {content: '"again: " + event.data.content', evidence: tool_result}}
`)
	act := activation(t, &events.SessionStarted{},
		&events.MemoryWritten{ItemID: "m1", Version: 1, Content: "x", Scope: "project:x",
			Provenance: events.Provenance{Session: "s", Evidence: "tool_result"}})
	for name, decide := range map[string]func(map[string]any) (workflow.Decision, bool, error){"Decide": w.Decide, "DecideMemory": w.DecideMemory} {
		d, ok, err := decide(act)
		if err != nil || ok {
			t.Fatalf("%s: %+v %v %v, want no decision", name, d, ok, err)
		}
	}
}
