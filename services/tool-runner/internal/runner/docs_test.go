package runner

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

var update = flag.Bool("update", false, "rewrite the generated section of docs/tools.md")

const (
	toolsDoc   = "../../../../docs/tools.md"
	docBegin   = "<!-- BEGIN built-in tools: generated from tools.Specs() by `go test ./services/tool-runner/internal/runner -run TestToolsDoc -update`; do not edit -->"
	docEnd     = "<!-- END built-in tools -->"
	fenceGuard = "```"
)

// The built-in tools in docs/tools.md are what tools.Specs offers models.
func TestToolsDocMatchesSpecs(t *testing.T) {
	doc, err := os.ReadFile(toolsDoc)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(docBegin)), bytes.Index(doc, []byte(docEnd))
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", toolsDoc, docBegin, docEnd)
	}
	want := builtinsDoc(t)
	got := string(doc[i+len(docBegin) : j])
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("%s is out of date with tools.Specs(); run go test ./services/tool-runner/internal/runner -run TestToolsDoc -update", toolsDoc)
	}
	out := slices.Concat(doc[:i+len(docBegin)], []byte(want), doc[j:])
	if err := os.WriteFile(toolsDoc, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// builtinsDoc renders each built-in tool: its name, description and
// arguments, in the order of Specs.
func builtinsDoc(t *testing.T) string {
	var b strings.Builder
	b.WriteString("\n\n")
	for _, s := range tools.Specs() {
		fmt.Fprintf(&b, "### `%s`\n\n%s\n\n", s.Name, s.Description)
		var schema struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(s.Parameters, &schema); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, name := range propertyOrder(t, s.Parameters) {
			var p struct {
				Type        any    `json:"type"`
				Description string `json:"description"`
				MinLength   int    `json:"minLength"`
				MinItems    int    `json:"minItems"`
				Minimum     *int   `json:"minimum"`
				Maximum     *int   `json:"maximum"`
				Items       *struct {
					Type string `json:"type"`
				} `json:"items"`
			}
			if err := json.Unmarshal(schema.Properties[name], &p); err != nil {
				t.Fatalf("%s.%s: %v", s.Name, name, err)
			}
			typ := typeOf(p.Type)
			if p.Items != nil {
				typ = strings.Replace(typ, "array", "array of "+p.Items.Type+"s", 1)
			}
			switch {
			case p.Minimum != nil && p.Maximum != nil:
				typ += fmt.Sprintf(", %d–%d", *p.Minimum, *p.Maximum)
			case p.Minimum != nil:
				typ += fmt.Sprintf(", ≥ %d", *p.Minimum)
			}
			if p.MinLength > 0 || p.MinItems > 0 {
				typ += ", non-empty"
			}
			if slices.Contains(schema.Required, name) {
				typ += ", required"
			}
			first, rest, multiline := strings.Cut(p.Description, "\n")
			fmt.Fprintf(&b, "- `%s` (%s): %s\n", name, typ, first)
			if multiline {
				fmt.Fprintf(&b, "\n  %s\n", fenceGuard)
				for _, line := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
					fmt.Fprintf(&b, "  %s\n", line)
				}
				fmt.Fprintf(&b, "  %s\n", fenceGuard)
			}
		}
		if len(schema.Properties) == 0 {
			b.WriteString("No arguments.\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// typeOf renders a JSON Schema type: "integer", or "integer or null".
func typeOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, " or ")
	}
	return "any"
}

// propertyOrder returns the names of a schema's properties in the order the
// schema lists them.
func propertyOrder(t *testing.T, schema json.RawMessage) []string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil {
		t.Fatal(err)
	}
	props, ok := top["properties"]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(props))
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return names
}
