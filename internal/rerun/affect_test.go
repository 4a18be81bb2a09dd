package rerun

import (
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/workflow"
)

func TestDiff(t *testing.T) {
	base := `name: w
description: d
agents:
  - {name: a, provider: scripted, script: a.yaml}
  - {name: b, provider: scripted, script: b.yaml, system: hi}
rules:
  - {name: r, when: "true", route: {agent: a}}
`
	files := map[string][]byte{"a.yaml": []byte("- content: A"), "b.yaml": []byte("- content: B")}
	bundle := func(spec string, files map[string][]byte) workflow.Bundle {
		return workflow.Bundle{Path: "w.yaml", Spec: []byte(spec), Files: files}
	}
	for _, c := range []struct {
		name  string
		spec  string
		files map[string][]byte
		want  Change
	}{
		{"same", base, files, Change{}},
		{"name, description, comments and layout", "# a comment\nname: w2\ndescription: other\nagents:\n  - name: a\n    provider: scripted\n    script: a.yaml\n  - {name: b, provider: scripted, script: b.yaml, system: hi}\nrules:\n  - {name: r, when: \"true\", route: {agent: a}}\n", files, Change{}},
		{"agent order", "agents:\n  - {name: b, provider: scripted, script: b.yaml, system: hi}\n  - {name: a, provider: scripted, script: a.yaml}\nrules:\n  - {name: r, when: \"true\", route: {agent: a}}\n", files, Change{}},
		{"script moved, same content", replace(base, "script: a.yaml", "script: scripts/a.yaml"), map[string][]byte{"scripts/a.yaml": []byte("- content: A"), "b.yaml": []byte("- content: B")}, Change{}},
		{"script content", base, map[string][]byte{"a.yaml": []byte("- content: A2"), "b.yaml": []byte("- content: B")}, Change{Agents: []string{"a"}}},
		{"system prompt", replace(base, "system: hi", "system: hello"), files, Change{Agents: []string{"b"}}},
		{"agent added", replace(base, "rules:", "  - {name: c, provider: scripted, script: a.yaml}\nrules:"), files, Change{Agents: []string{"c"}}},
		{"rules", replace(base, `when: "true"`, `when: "false"`), files, Change{Routing: true}},
		{"budgets", base + "budgets: {max_turns: 3}\n", files, Change{Routing: true}},
		{"gates and memory", base + "memory: {scope: \"project:x\"}\ngates: []\n", files, Change{Global: []string{"gates", "memory"}}},
	} {
		got, err := Diff(bundle(base, files), bundle(c.spec, c.files))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v (%s), want %+v", c.name, got, got, c.want)
		}
	}
	if _, err := Diff(bundle(base, files), bundle("agents: [", nil)); err == nil {
		t.Error("a spec that is not YAML: no error")
	}
}

func replace(s, old, new string) string { return strings.Replace(s, old, new, 1) }

func TestLocate(t *testing.T) {
	log := twoTurns(t)
	for _, c := range []struct {
		name   string
		change Change
		at     uint64
		agent  string
		why    string
	}{
		{"agent b", Change{Agents: []string{"b"}}, 4, "b", "first turn of changed agent b (decided at 5)"},
		{"agent a, first turn", Change{Agents: []string{"a", "b"}}, 1, "a", "first turn of changed agent a (decided at 2)"},
		{"an agent that never ran", Change{Agents: []string{"c"}}, 7, "", "affects no turn or decision"},
		{"workflow-wide", Change{Global: []string{"gates"}}, 0, "", "the workflow's gates changed, which every turn can see: run from the start"},
	} {
		p := Locate(log, c.change, nil, nil)
		if p.At != c.at || p.Agent != c.agent || !strings.Contains(p.Why, c.why) {
			t.Errorf("%s: %+v, want at %d, agent %q, why %q", c.name, p, c.at, c.agent, c.why)
		}
		if c.agent != "" && (p.Decision == nil || p.Decision.Agent != c.agent || p.Decision.TurnID != "") {
			t.Errorf("%s: decision %+v, want the recorded one without its turn ID", c.name, p.Decision)
		}
	}
	if p := Locate(nil, Change{Agents: []string{"a"}}, nil, nil); p.At != 0 || p.Why != "the session has no events" {
		t.Errorf("no events: %+v", p)
	}
}

// A rule that decides a trigger differently is the point, with the
// changed workflow's decision; one that decides it the same is not.
func TestLocateRouting(t *testing.T) {
	spec := func(next string) *workflow.Workflow {
		w, err := workflow.Parse([]byte(`name: w
agents:
  - {name: a, provider: scripted, script: a.yaml}
  - {name: b, provider: scripted, script: b.yaml}
  - {name: c, provider: scripted, script: c.yaml}
rules:
  - {name: start, when: 'event.type == "rath.session.started"', route: {agent: a}}
  - {name: next, when: 'event.type == "rath.agent.turn.completed" && event.data.agent == "a"', route: {agent: `+next+`}}
`), "w.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	log := twoTurns(t)
	p := Locate(log, Change{Routing: true}, spec("b"), spec("c"))
	if p.At != 4 || p.Agent != "c" || p.Decision == nil || p.Decision.Rule != "next" || p.Decision.Route != "agent:c" || p.Trigger != log[3].ID ||
		!strings.Contains(p.Why, "decide the rath.agent.turn.completed at 4 differently") {
		t.Errorf("changed rule: %+v (decision %+v)", p, p.Decision)
	}
	if p := Locate(log, Change{Routing: true}, spec("b"), spec("b")); p.At != 7 || p.Agent != "" {
		t.Errorf("same rules: %+v", p)
	}
}
