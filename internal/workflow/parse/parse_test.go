package parse_test

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/workflow/parse"
)

// Hostile documents are problems at their line and field, all of them at
// once, never a panic or a silently ignored key.
func TestDecoderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []parse.Problem
	}{
		{"empty", "", []parse.Problem{{Line: 0, Message: "empty thing file"}}},
		{"null", "~\n", []parse.Problem{{Line: 1, Message: "empty thing file"}}},
		{"not YAML", "a: [\n", []parse.Problem{{Line: 1, Message: "invalid YAML: did not find expected node content"}}},
		{"two documents", "a: x\n---\na: y\n", []parse.Problem{{Line: 2, Message: "more than one YAML document; a thing file holds one"}}},
		{"unknown field", "a: x\nbee: 1\n", []parse.Problem{{Line: 2, Field: "bee", Message: "unknown field (fields: a, n, l)"}}},
		{"given twice", "a: x\na: y\n", []parse.Problem{{Line: 2, Field: "a", Message: "given twice (first at line 1)"}}},
		{"wrong types", "a: [x]\nn: -3\nl: {k: v}\n", []parse.Problem{
			{Line: 1, Field: "a", Message: "expected a string, got a list"},
			{Line: 2, Field: "n", Message: "must not be negative, got -3"},
			{Line: 3, Field: "l", Message: "expected a list, got a mapping"}}},
		{"not a whole number", "n: 1.5\n", []parse.Problem{{Line: 1, Field: "n", Message: `expected a whole number, got "1.5"`}}},
		{"not a mapping", "- a\n", []parse.Problem{{Line: 1, Message: "expected a mapping, got a list"}}},
		{"a key that is not a name", "[a]: x\n", []parse.Problem{{Line: 1, Message: "expected a field name, got a list"}}},
		{"an item of the wrong kind", "l: [x, [y]]\n", []parse.Problem{{Line: 1, Field: "l[1]", Message: "expected a string, got a list"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parse.New()
			if root := d.Document([]byte(tc.src), "thing file"); root != nil {
				d.Mapping(root, "", []string{"a", "n", "l"}, func(key string, v *yaml.Node, f string) {
					switch key {
					case "a":
						d.Str(v, f)
					case "n":
						d.Count(v, f)
					case "l":
						d.Strs(v, f)
					}
				})
			}
			got := d.Sorted()
			if len(got) != len(tc.want) {
				t.Fatalf("problems %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("problem %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// Line falls back to the closest enclosing field a problem can point at.
func TestLineOfAnAbsentField(t *testing.T) {
	d := parse.New()
	root := d.Document([]byte("a: x\nl:\n  - y\n"), "thing file")
	d.Mapping(root, "", []string{"a", "l"}, func(key string, v *yaml.Node, f string) { d.Strs(v, f) })
	if got := d.Line("l[0].missing"); got != 3 {
		t.Errorf("Line = %d, want 3", got)
	}
}

// Strict refuses a field the target type does not have, naming it and its
// line; no document is ErrEmpty.
func TestStrict(t *testing.T) {
	var v struct {
		A string `yaml:"a"`
	}
	if err := parse.Strict([]byte("a: x\nb: y\n"), &v); err == nil || !strings.Contains(err.Error(), "line 2: field b not found") || strings.HasPrefix(err.Error(), "yaml:") {
		t.Errorf("unknown field: %v", err)
	}
	if err := parse.Strict([]byte("a: [x]\n"), &v); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("wrong type: %v", err)
	}
	if err := parse.Strict(nil, &v); !errors.Is(err, parse.ErrEmpty) {
		t.Errorf("empty: %v, want ErrEmpty", err)
	}
	if err := parse.Strict([]byte("a: x\n"), &v); err != nil || v.A != "x" {
		t.Errorf("valid: %v, %+v", err, v)
	}
}
