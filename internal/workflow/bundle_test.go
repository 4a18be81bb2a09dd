package workflow_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/workflow"
)

// A bundle names every agent's tools (pkg/toolserver reads them without
// parsing the spec); one without the table still opens, and one whose table
// disagrees with its spec does not.
func TestBundleToolsTable(t *testing.T) {
	w, err := workflow.Parse([]byte(`name: w
agents:
  - {name: a, provider: openai, model: m, tools: [read_file, word_count]}
  - {name: b, provider: openai, model: m}
rules:
  - {name: r, when: "false", route: {agent: a}}
`), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := workflow.NewBundle(w)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"tools":{"a":["read_file","word_count"],"b":[]}`) {
		t.Fatalf("bundle %s: want every agent's tools, [] for none", raw)
	}
	if _, got, err := workflow.OpenBundle(raw); err != nil || !reflect.DeepEqual(got.Tools, b.Tools) {
		t.Fatalf("reopened: %v %v", got.Tools, err)
	}

	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "tools")
	older, _ := json.Marshal(m)
	if _, _, err := workflow.OpenBundle(older); err != nil {
		t.Fatalf("a bundle without the table: %v", err)
	}
	m["tools"] = map[string][]string{"a": {"read_file", "word_count", "write_file"}, "b": {}}
	forged, _ := json.Marshal(m)
	if _, _, err := workflow.OpenBundle(forged); err == nil || !strings.Contains(err.Error(), "differs from the agents' tools") {
		t.Fatalf("a table that grants more than the spec: %v", err)
	}
}
