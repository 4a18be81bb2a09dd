// Package parse reads YAML strictly for Rath's files (workflows, eval task
// sets, price tables): a field a mapping does not know, a key given twice or
// a value of the wrong kind is a Problem at its line and field path, and
// every problem of a file is collected, so one check shows them all.
package parse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a file: where (Line, 1-based; 0 when the
// problem has no place, such as an empty file), which field (a path like
// "rules[2].route.agent") and what.
type Problem struct {
	Line    int
	Field   string
	Message string
}

// In renders the problem in the file at path as "path:line: field:
// message", the form editors and CI annotators recognise.
func (p Problem) In(path string) string {
	var b strings.Builder
	b.WriteString(path)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Decoder collects the problems of one file and the line of every field it
// saw, keyed by field path ("rules[2].route.agent"; "" is the document).
// Its methods decode nodes of yaml.v3's tree; each reports what is wrong
// and returns a zero value, so a caller decodes the whole file at once.
type Decoder struct {
	Problems []Problem
	lines    map[string]int
}

// New returns a Decoder with no problems.
func New() *Decoder { return &Decoder{lines: map[string]int{}} }

// Lines returns the line of every field seen, keyed by field path. The map
// is the Decoder's own.
func (d *Decoder) Lines() map[string]int { return d.lines }

// Add records a problem.
func (d *Decoder) Add(line int, field, format string, args ...any) {
	d.Problems = append(d.Problems, Problem{Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Sorted returns the problems ordered by line, in the order found within a
// line.
func (d *Decoder) Sorted() []Problem {
	sort.SliceStable(d.Problems, func(i, j int) bool { return d.Problems[i].Line < d.Problems[j].Line })
	return d.Problems
}

// Reported tells whether field already has a problem, so that a check does
// not add "required" to "expected a mapping".
func (d *Decoder) Reported(field string) bool {
	return slices.ContainsFunc(d.Problems, func(p Problem) bool { return p.Field == field })
}

// ReportedUnder tells whether field or any field inside it has a problem.
func (d *Decoder) ReportedUnder(field string) bool {
	return slices.ContainsFunc(d.Problems, func(p Problem) bool {
		return p.Field == field || strings.HasPrefix(p.Field, field+".")
	})
}

// Line returns the line of a field, or of its closest enclosing field when
// the field itself is absent (a missing required key is reported where its
// mapping starts).
func (d *Decoder) Line(field string) int {
	for {
		if l, ok := d.lines[field]; ok {
			return l
		}
		if field == "" {
			return 0
		}
		field = parent(field)
	}
}

// parent trims the last step of a field path: "a[1].b" → "a[1]" → "a".
func parent(field string) string {
	i := strings.LastIndexAny(field, ".[")
	if i < 0 {
		return ""
	}
	return field[:i]
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Document decodes data into a node tree and returns the document's root,
// or nil after recording why there is none: no document or a null one
// ("empty " + what), invalid YAML, or a second document.
func (d *Decoder) Document(data []byte, what string) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.Add(0, "", "empty %s", what)
		} else {
			d.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.Add(extra.Line, "", "more than one YAML document; a %s holds one", what)
	} else if !errors.Is(err, io.EOF) {
		d.yamlError(err)
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		d.Add(root.Line, "", "empty %s", what)
		return nil
	}
	d.lines[""] = root.Line
	return root
}

func (d *Decoder) yamlError(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		d.Add(n, "", "invalid YAML: %s", m[2])
		return
	}
	d.Add(0, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// ErrEmpty is returned by Strict for data without a document.
var ErrEmpty = errors.New("empty")

// Strict decodes the first document of data into v, refusing a field v's
// type does not have. Its error names the line and the field, without the
// "yaml: " prefix; data without a document is ErrEmpty.
func Strict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return ErrEmpty
		}
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return nil
}

// Mapping calls f with each key of the mapping n in file order and records
// each key's line. It reports a node that is not a mapping, a key not in
// known and a key given twice; f sees neither. A null node is an empty
// mapping.
func (d *Decoder) Mapping(n *yaml.Node, field string, known []string, f func(key string, v *yaml.Node, field string)) {
	n = Resolve(n)
	if IsNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.Add(n.Line, field, "expected a mapping, got %s", Describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), n.Content[i+1]
		key := k.Value
		kf := key
		if field != "" {
			kf = field + "." + key
		}
		if k.Kind != yaml.ScalarNode {
			d.Add(k.Line, field, "expected a field name, got %s", Describe(k))
			continue
		}
		if !slices.Contains(known, key) {
			d.Add(k.Line, kf, "unknown field (fields: %s)", strings.Join(known, ", "))
			continue
		}
		if first, dup := d.lines[kf]; dup {
			d.Add(k.Line, kf, "given twice (first at line %d)", first)
			continue
		}
		d.lines[kf] = k.Line
		f(key, v, kf)
	}
}

// List calls f with each item of the sequence n and records each item's
// line under "field[i]". A null node is an empty list.
func (d *Decoder) List(n *yaml.Node, field string, f func(v *yaml.Node, field string)) {
	n = Resolve(n)
	if IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.Add(n.Line, field, "expected a list, got %s", Describe(n))
		return
	}
	for i, v := range n.Content {
		itemField := fmt.Sprintf("%s[%d]", field, i)
		d.lines[itemField] = v.Line
		f(v, itemField)
	}
}

// Str decodes a scalar as text: `model: 4` is the string "4". Null is "".
func (d *Decoder) Str(n *yaml.Node, field string) string {
	n = Resolve(n)
	if IsNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		d.Add(n.Line, field, "expected a string, got %s", Describe(n))
		return ""
	}
	return n.Value
}

// Strs decodes a list of strings. Null is nil.
func (d *Decoder) Strs(n *yaml.Node, field string) []string {
	var out []string
	d.List(n, field, func(v *yaml.Node, f string) { out = append(out, d.Str(v, f)) })
	return out
}

// StrMap decodes a mapping of any keys to strings. Null is an empty map.
func (d *Decoder) StrMap(n *yaml.Node, field string) map[string]string {
	out := map[string]string{}
	n = Resolve(n)
	if IsNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.Add(n.Line, field, "expected a mapping, got %s", Describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := Resolve(n.Content[i])
		kf := field + "." + k.Value
		if _, dup := out[k.Value]; dup {
			d.Add(k.Line, kf, "given twice")
			continue
		}
		d.lines[kf] = k.Line
		out[k.Value] = d.Str(n.Content[i+1], kf)
	}
	return out
}

// Boolean decodes true or false. Null is false.
func (d *Decoder) Boolean(n *yaml.Node, field string) bool {
	n = Resolve(n)
	if IsNull(n) {
		return false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		d.Add(n.Line, field, "expected true or false, got %s", Describe(n))
		return false
	}
	return v
}

// Count decodes a non-negative whole number. Null is 0.
func (d *Decoder) Count(n *yaml.Node, field string) int64 {
	n = Resolve(n)
	if IsNull(n) {
		return 0
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.Add(n.Line, field, "expected a whole number, got %s", Describe(n))
		return 0
	}
	if v < 0 {
		d.Add(n.Line, field, "must not be negative, got %d", v)
		return 0
	}
	return v
}

// Duration decodes a Go duration string ("90m", "1h30m"). Null is 0.
func (d *Decoder) Duration(n *yaml.Node, field string) time.Duration {
	s := d.Str(n, field)
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Add(Resolve(n).Line, field, "%q is not a duration (such as 45s, 30m, 1h30m)", s)
		return 0
	}
	if v < 0 {
		d.Add(Resolve(n).Line, field, "must not be negative, got %s", s)
		return 0
	}
	return v
}

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// IsNull tells whether n is absent or null.
func IsNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Describe names a node for a problem message.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "a YAML node of another kind"
}
