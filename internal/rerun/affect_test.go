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
