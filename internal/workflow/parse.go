package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/egress"
)

// Load reads and parses a workflow file.
func Load(path string, opts ...Option) (*Workflow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load workflow: %w", err)
	}
	return Parse(data, path, opts...)
}

// An Option changes what Parse admits.
type Option func(*parser)

// AllowNet admits network entries that name what allow names beyond public
// destinations: the tool runner's operator's allowlist (egress.AllowFlag),
// where the one checking a workflow knows it. Without it, an entry naming a
// loopback, private, link-local or metadata address, or a name such as
// localhost, is a problem.
func AllowNet(allow egress.Allowlist) Option {
	return func(p *parser) { p.allowNet = allow }
}

// netUnchecked admits network entries whatever destination they name, as
// long as they are well formed: for the services opening a stored bundle,
// where the tool runner is the authority on destinations (it checks every
// entry against its operator's allowlist before and as it connects).
func netUnchecked(p *parser) { p.netUnchecked = true }

// Parse decodes, validates and compiles a workflow file. path names the file
// in problems and anchors relative script paths; Parse does not open it. Any
// problem fails the whole file: the error is a *SpecError listing all of
// them, each with its line and field.
func Parse(data []byte, path string, opts ...Option) (*Workflow, error) {
	p := &parser{lines: map[string]int{}}
	for _, o := range opts {
		o(p)
	}
	w := &Workflow{path: path, source: bytes.Clone(data), lines: p.lines}
	if root := p.document(data); root != nil {
		p.workflow(root, w)
		p.validate(w)
		p.compile(w)
	}
	if len(p.problems) > 0 {
		sort.SliceStable(p.problems, func(i, j int) bool { return p.problems[i].Line < p.problems[j].Line })
		return nil, &SpecError{Path: path, Problems: p.problems}
	}
	return w, nil
}

// Fields each mapping of the file may have; anything else is a problem, so a
// misspelt key never silently means "unset".
var (
	workflowFields  = []string{"name", "description", "sandbox", "network", "agents", "mcp_servers", "rules", "gates", "budgets", "stop", "compaction", "memory"}
	agentFields     = []string{"name", "role", "provider", "model", "base_url", "system", "tools", "sandbox", "network", "script", "max_tokens", "recall", "served"}
	recallFields    = []string{"query", "scopes", "tags", "k"}
	memoryFields    = []string{"scope"}
	memWriteFields  = []string{"content", "tags", "scope", "evidence"}
	mcpServerFields = []string{"name", "command", "env"}
	ruleFields      = []string{"name", "when", "route", "reason", "fallback"}
	closeFields     = []string{"outcome", "reason"}
	forkFields      = []string{"at", "agent", "reason"}
	approvalFields  = append([]string{"action", "approver"}, expiryFields...)
	budgetFields    = []string{"max_turns", "max_tokens", "max_tool_calls", "wall_time"}
	stopFields      = []string{"name", "when", "reason"}
	compactFields   = []string{"max_context_tokens", "keep_last"}
)

// parser collects the problems of one file and the line of every field it
// saw, keyed by field path ("rules[2].route.agent"; "" is the document).
type parser struct {
	problems []Problem
	lines    map[string]int
	// allowNet and netUnchecked are Parse's options (AllowNet).
	allowNet     egress.Allowlist
	netUnchecked bool
}

// reported tells whether field already has a problem, so that validation
// does not add "required" to "expected a mapping".
func (p *parser) reported(field string) bool {
	for _, pr := range p.problems {
		if pr.Field == field {
			return true
		}
	}
	return false
}

func (p *parser) add(line int, field, format string, args ...any) {
	p.problems = append(p.problems, Problem{Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// line returns the line of a field, or of its closest enclosing field when
// the field itself is absent (a missing required key is reported where its
// mapping starts).
func (p *parser) line(field string) int {
	for {
		if l, ok := p.lines[field]; ok {
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

// document decodes data into a node tree and returns the document's root,
// or nil after recording why there is none.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(0, "", "empty workflow file")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.add(extra.Line, "", "more than one YAML document; a workflow file holds one")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		p.add(root.Line, "", "empty workflow file")
		return nil
	}
	p.lines[""] = root.Line
	return root
}

func (p *parser) yamlError(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		p.add(n, "", "invalid YAML: %s", m[2])
		return
	}
	p.add(0, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

func (p *parser) workflow(n *yaml.Node, w *Workflow) {
	p.mapping(n, "", workflowFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			w.Name = p.str(v, f)
		case "description":
			w.Description = p.str(v, f)
		case "sandbox":
			w.Sandbox = p.str(v, f)
		case "network":
			w.Network = p.hosts(v, f)
		case "agents":
			p.list(v, f, func(v *yaml.Node, f string) { w.Agents = append(w.Agents, p.agent(v, f)) })
		case "mcp_servers":
			p.list(v, f, func(v *yaml.Node, f string) { w.MCPServers = append(w.MCPServers, p.mcpServer(v, f)) })
		case "rules":
			p.list(v, f, func(v *yaml.Node, f string) { w.Rules = append(w.Rules, p.rule(v, f)) })
		case "gates":
			p.list(v, f, func(v *yaml.Node, f string) { w.Gates = append(w.Gates, p.gate(v, f)) })
		case "budgets":
			w.Budgets = p.budgets(v, f)
		case "stop":
			p.list(v, f, func(v *yaml.Node, f string) { w.Stop = append(w.Stop, p.stop(v, f)) })
		case "compaction":
			w.Compaction = p.compaction(v, f)
		case "memory":
			p.mapping(v, f, memoryFields, func(key string, v *yaml.Node, f string) {
				w.Memory.Scope = p.str(v, f) // the only field
			})
		}
	})
}

func (p *parser) agent(n *yaml.Node, field string) Agent {
	var a Agent
	p.mapping(n, field, agentFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			a.Name = p.str(v, f)
		case "role":
			a.Role = p.str(v, f)
		case "provider":
			a.Provider = p.str(v, f)
		case "model":
			a.Model = p.str(v, f)
		case "base_url":
			a.BaseURL = p.str(v, f)
		case "system":
			a.System = p.str(v, f)
		case "tools":
			a.Tools = p.strs(v, f)
		case "sandbox":
			a.Sandbox = p.str(v, f)
		case "network":
			a.Network = p.hosts(v, f)
		case "script":
			a.Script = p.str(v, f)
		case "max_tokens":
			a.MaxTokens = int(p.count(v, f))
		case "recall":
			a.Recall = p.recall(v, f)
		case "served":
			a.Served = p.boolean(v, f)
		}
	})
	return a
}

func (p *parser) recall(n *yaml.Node, field string) *Recall {
	r := &Recall{}
	p.mapping(n, field, recallFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "query":
			r.Query = p.str(v, f)
		case "scopes":
			r.Scopes = p.strs(v, f)
		case "tags":
			r.Tags = p.strs(v, f)
		case "k":
			r.K = int(p.count(v, f))
		}
	})
	return r
}

func (p *parser) mcpServer(n *yaml.Node, field string) MCPServer {
	var s MCPServer
	p.mapping(n, field, mcpServerFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			s.Name = p.str(v, f)
		case "command":
			s.Command = p.strs(v, f)
		case "env":
			s.Env = p.strMap(v, f)
		}
	})
	return s
}

func (p *parser) rule(n *yaml.Node, field string) Rule {
	var r Rule
	p.mapping(n, field, ruleFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			r.Name = p.str(v, f)
		case "when":
			r.When = p.str(v, f)
		case "route":
			r.Route = p.route(v, f)
		case "reason":
			r.Reason = p.str(v, f)
		case "fallback":
			fb := p.route(v, f)
			r.Fallback = &fb
		}
	})
	return r
}

// route decodes every kind it finds; validate then insists on exactly one.
func (p *parser) route(n *yaml.Node, field string) Route {
	var r Route
	p.mapping(n, field, routeKinds, func(key string, v *yaml.Node, f string) {
		switch key {
		case "agent":
			r.Agent = p.str(v, f)
		case "close":
			c := &Close{}
			p.mapping(v, f, closeFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "outcome":
					c.Outcome = p.str(v, f)
				case "reason":
					c.Reason = p.str(v, f)
				}
			})
			r.Close = c
		case "fork":
			k := &Fork{}
			p.mapping(v, f, forkFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "at":
					k.At = p.str(v, f)
				case "agent":
					k.Agent = p.str(v, f)
				case "reason":
					k.Reason = p.str(v, f)
				}
			})
			r.Fork = k
		case "approval":
			a := &Approval{}
			p.mapping(v, f, approvalFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "action":
					a.Action = p.str(v, f)
				case "approver":
					a.Approver = p.str(v, f)
				default:
					p.expiryField(&a.Expiry, key, v, f)
				}
			})
			r.Approval = a
		case "memory":
			m := &MemoryWrite{}
			p.mapping(v, f, memWriteFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "content":
					m.Content = p.str(v, f)
				case "tags":
					m.Tags = p.strs(v, f)
				case "scope":
					m.Scope = p.str(v, f)
				case "evidence":
					m.Evidence = p.str(v, f)
				}
			})
			r.Memory = m
		case "router":
			r.Router = p.str(v, f)
		}
	})
	return r
}

func (p *parser) budgets(n *yaml.Node, field string) Budgets {
	var b Budgets
	p.mapping(n, field, budgetFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "max_turns":
			b.MaxTurns = int(p.count(v, f))
		case "max_tokens":
			b.MaxTokens = p.count(v, f)
		case "max_tool_calls":
			b.MaxToolCalls = int(p.count(v, f))
		case "wall_time":
			b.WallTime = p.duration(v, f)
		}
	})
	return b
}

func (p *parser) compaction(n *yaml.Node, field string) Compaction {
	var c Compaction
	p.mapping(n, field, compactFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "max_context_tokens":
			c.MaxContextTokens = p.count(v, f)
		case "keep_last":
			c.KeepLast = int(p.count(v, f))
		}
	})
	return c
}

func (p *parser) stop(n *yaml.Node, field string) StopCondition {
	var s StopCondition
	p.mapping(n, field, stopFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			s.Name = p.str(v, f)
		case "when":
			s.When = p.str(v, f)
		case "reason":
			s.Reason = p.str(v, f)
		}
	})
	return s
}

// mapping calls f with each key of the mapping n in file order and records
// each key's line. It reports a node that is not a mapping, a key not in
// known and a key given twice; f sees neither. A null node is an empty
// mapping.
func (p *parser) mapping(n *yaml.Node, field string, known []string, f func(key string, v *yaml.Node, field string)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, field, "expected a mapping, got %s", describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		key := k.Value
		kf := key
		if field != "" {
			kf = field + "." + key
		}
		if k.Kind != yaml.ScalarNode {
			p.add(k.Line, field, "expected a field name, got %s", describe(k))
			continue
		}
		if !slices.Contains(known, key) {
			p.add(k.Line, kf, "unknown field (fields: %s)", strings.Join(known, ", "))
			continue
		}
		if first, dup := p.lines[kf]; dup {
			p.add(k.Line, kf, "given twice (first at line %d)", first)
			continue
		}
		p.lines[kf] = k.Line
		f(key, v, kf)
	}
}

// list calls f with each item of the sequence n and records each item's
// line under "field[i]". A null node is an empty list.
func (p *parser) list(n *yaml.Node, field string, f func(v *yaml.Node, field string)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n.Line, field, "expected a list, got %s", describe(n))
		return
	}
	for i, v := range n.Content {
		itemField := fmt.Sprintf("%s[%d]", field, i)
		p.lines[itemField] = v.Line
		f(v, itemField)
	}
}

// str decodes a scalar as text: `model: 4` is the string "4". Null is "".
func (p *parser) str(n *yaml.Node, field string) string {
	n = resolve(n)
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.add(n.Line, field, "expected a string, got %s", describe(n))
		return ""
	}
	return n.Value
}

// hosts reads a network list: a present but empty list is none, never nil.
func (p *parser) hosts(n *yaml.Node, field string) []string {
	hs := p.strs(n, field)
	if hs == nil {
		hs = []string{}
	}
	return hs
}

func (p *parser) strs(n *yaml.Node, field string) []string {
	var out []string
	p.list(n, field, func(v *yaml.Node, f string) { out = append(out, p.str(v, f)) })
	return out
}

func (p *parser) strMap(n *yaml.Node, field string) map[string]string {
	out := map[string]string{}
	n = resolve(n)
	if isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, field, "expected a mapping, got %s", describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		kf := field + "." + k.Value
		if _, dup := out[k.Value]; dup {
			p.add(k.Line, kf, "given twice")
			continue
		}
		p.lines[kf] = k.Line
		out[k.Value] = p.str(n.Content[i+1], kf)
	}
	return out
}

// boolean decodes true or false. Null is false.
func (p *parser) boolean(n *yaml.Node, field string) bool {
	n = resolve(n)
	if isNull(n) {
		return false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		p.add(n.Line, field, "expected true or false, got %s", describe(n))
		return false
	}
	return v
}

// count decodes a non-negative whole number. Null is 0.
func (p *parser) count(n *yaml.Node, field string) int64 {
	n = resolve(n)
	if isNull(n) {
		return 0
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.add(n.Line, field, "expected a whole number, got %s", describe(n))
		return 0
	}
	if v < 0 {
		p.add(n.Line, field, "must not be negative, got %d", v)
		return 0
	}
	return v
}

// duration decodes a Go duration string ("90m", "1h30m"). Null is 0.
func (p *parser) duration(n *yaml.Node, field string) time.Duration {
	s := p.str(n, field)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.add(resolve(n).Line, field, "%q is not a duration (such as 45s, 30m, 1h30m)", s)
		return 0
	}
	if d < 0 {
		p.add(resolve(n).Line, field, "must not be negative, got %s", s)
		return 0
	}
	return d
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a node for a problem message.
func describe(n *yaml.Node) string {
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
