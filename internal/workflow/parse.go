package workflow

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/internal/workflow/parse"
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
	p := &parser{Decoder: parse.New()}
	for _, o := range opts {
		o(p)
	}
	w := &Workflow{path: path, source: bytes.Clone(data), lines: p.Lines()}
	if root := p.Document(data, "workflow file"); root != nil {
		p.workflow(root, w)
		p.validate(w)
		p.compile(w)
	}
	if len(p.Problems) > 0 {
		return nil, &SpecError{Path: path, Problems: problems(p.Sorted())}
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

// parser decodes one file with a parse.Decoder, adding Parse's options.
type parser struct {
	*parse.Decoder
	// allowNet and netUnchecked are Parse's options (AllowNet).
	allowNet     egress.Allowlist
	netUnchecked bool
}

func (p *parser) workflow(n *yaml.Node, w *Workflow) {
	p.Mapping(n, "", workflowFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			w.Name = p.Str(v, f)
		case "description":
			w.Description = p.Str(v, f)
		case "sandbox":
			w.Sandbox = p.Str(v, f)
		case "network":
			w.Network = p.hosts(v, f)
		case "agents":
			p.List(v, f, func(v *yaml.Node, f string) { w.Agents = append(w.Agents, p.agent(v, f)) })
		case "mcp_servers":
			p.List(v, f, func(v *yaml.Node, f string) { w.MCPServers = append(w.MCPServers, p.mcpServer(v, f)) })
		case "rules":
			p.List(v, f, func(v *yaml.Node, f string) { w.Rules = append(w.Rules, p.rule(v, f)) })
		case "gates":
			p.List(v, f, func(v *yaml.Node, f string) { w.Gates = append(w.Gates, p.gate(v, f)) })
		case "budgets":
			w.Budgets = p.budgets(v, f)
		case "stop":
			p.List(v, f, func(v *yaml.Node, f string) { w.Stop = append(w.Stop, p.stop(v, f)) })
		case "compaction":
			w.Compaction = p.compaction(v, f)
		case "memory":
			p.Mapping(v, f, memoryFields, func(key string, v *yaml.Node, f string) {
				w.Memory.Scope = p.Str(v, f) // the only field
			})
		}
	})
}

func (p *parser) agent(n *yaml.Node, field string) Agent {
	var a Agent
	p.Mapping(n, field, agentFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			a.Name = p.Str(v, f)
		case "role":
			a.Role = p.Str(v, f)
		case "provider":
			a.Provider = p.Str(v, f)
		case "model":
			a.Model = p.Str(v, f)
		case "base_url":
			a.BaseURL = p.Str(v, f)
		case "system":
			a.System = p.Str(v, f)
		case "tools":
			a.Tools = p.Strs(v, f)
		case "sandbox":
			a.Sandbox = p.Str(v, f)
		case "network":
			a.Network = p.hosts(v, f)
		case "script":
			a.Script = p.Str(v, f)
		case "max_tokens":
			a.MaxTokens = int(p.Count(v, f))
		case "recall":
			a.Recall = p.recall(v, f)
		case "served":
			a.Served = p.Boolean(v, f)
		}
	})
	return a
}

func (p *parser) recall(n *yaml.Node, field string) *Recall {
	r := &Recall{}
	p.Mapping(n, field, recallFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "query":
			r.Query = p.Str(v, f)
		case "scopes":
			r.Scopes = p.Strs(v, f)
		case "tags":
			r.Tags = p.Strs(v, f)
		case "k":
			r.K = int(p.Count(v, f))
		}
	})
	return r
}

func (p *parser) mcpServer(n *yaml.Node, field string) MCPServer {
	var s MCPServer
	p.Mapping(n, field, mcpServerFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			s.Name = p.Str(v, f)
		case "command":
			s.Command = p.Strs(v, f)
		case "env":
			s.Env = p.StrMap(v, f)
		}
	})
	return s
}

func (p *parser) rule(n *yaml.Node, field string) Rule {
	var r Rule
	p.Mapping(n, field, ruleFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			r.Name = p.Str(v, f)
		case "when":
			r.When = p.Str(v, f)
		case "route":
			r.Route = p.route(v, f)
		case "reason":
			r.Reason = p.Str(v, f)
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
	p.Mapping(n, field, routeKinds, func(key string, v *yaml.Node, f string) {
		switch key {
		case "agent":
			r.Agent = p.Str(v, f)
		case "close":
			c := &Close{}
			p.Mapping(v, f, closeFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "outcome":
					c.Outcome = p.Str(v, f)
				case "reason":
					c.Reason = p.Str(v, f)
				}
			})
			r.Close = c
		case "fork":
			k := &Fork{}
			p.Mapping(v, f, forkFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "at":
					k.At = p.Str(v, f)
				case "agent":
					k.Agent = p.Str(v, f)
				case "reason":
					k.Reason = p.Str(v, f)
				}
			})
			r.Fork = k
		case "approval":
			a := &Approval{}
			p.Mapping(v, f, approvalFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "action":
					a.Action = p.Str(v, f)
				case "approver":
					a.Approver = p.Str(v, f)
				default:
					p.expiryField(&a.Expiry, key, v, f)
				}
			})
			r.Approval = a
		case "memory":
			m := &MemoryWrite{}
			p.Mapping(v, f, memWriteFields, func(key string, v *yaml.Node, f string) {
				switch key {
				case "content":
					m.Content = p.Str(v, f)
				case "tags":
					m.Tags = p.Strs(v, f)
				case "scope":
					m.Scope = p.Str(v, f)
				case "evidence":
					m.Evidence = p.Str(v, f)
				}
			})
			r.Memory = m
		case "router":
			r.Router = p.Str(v, f)
		}
	})
	return r
}

func (p *parser) budgets(n *yaml.Node, field string) Budgets {
	var b Budgets
	p.Mapping(n, field, budgetFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "max_turns":
			b.MaxTurns = int(p.Count(v, f))
		case "max_tokens":
			b.MaxTokens = p.Count(v, f)
		case "max_tool_calls":
			b.MaxToolCalls = int(p.Count(v, f))
		case "wall_time":
			b.WallTime = p.Duration(v, f)
		}
	})
	return b
}

func (p *parser) compaction(n *yaml.Node, field string) Compaction {
	var c Compaction
	p.Mapping(n, field, compactFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "max_context_tokens":
			c.MaxContextTokens = p.Count(v, f)
		case "keep_last":
			c.KeepLast = int(p.Count(v, f))
		}
	})
	return c
}

func (p *parser) stop(n *yaml.Node, field string) StopCondition {
	var s StopCondition
	p.Mapping(n, field, stopFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			s.Name = p.Str(v, f)
		case "when":
			s.When = p.Str(v, f)
		case "reason":
			s.Reason = p.Str(v, f)
		}
	})
	return s
}

// hosts reads a network list: a present but empty list is none, never nil.
func (p *parser) hosts(n *yaml.Node, field string) []string {
	hs := p.Strs(n, field)
	if hs == nil {
		hs = []string{}
	}
	return hs
}
