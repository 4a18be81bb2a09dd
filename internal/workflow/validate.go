package workflow

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/internal/workflow/expr"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/routerapi"
)

// nameForm is the allowed form of a kind of name.
type nameForm struct {
	re   *regexp.Regexp
	desc string
}

var (
	// identifier is the form of agent names: CEL can select them as fields
	// (state.agent_turns.coder).
	identifier = nameForm{expr.Identifier, "letters, digits and _, not starting with a digit"}
	// plainName is the form of rule, stop condition and MCP server names. It
	// has no dot, because "server.tool" names an MCP server's tool.
	plainName = nameForm{regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`), "letters, digits, _ and -, starting with a letter or _"}
)

// validate checks what decoding cannot: required fields, references between
// fields and allowed values. Expressions are checked by compile.
func (p *parser) validate(w *Workflow) {
	if w.Name == "" {
		p.Add(p.Line("name"), "name", "required")
	}
	if w.Memory.Scope != "" {
		p.checkScope("memory.scope", w.Memory.Scope)
	}
	p.checkSandbox("sandbox", w.Sandbox)
	p.checkNetwork("network", w.Network)
	p.validateMCPServers(w)
	p.validateAgents(w)
	p.validateRules(w)
	p.validateGates(w)
	if c := w.Compaction; c.KeepLast > 0 && c.MaxContextTokens == 0 && !p.Reported("compaction.max_context_tokens") {
		p.Add(p.Line("compaction"), "compaction.max_context_tokens", "required with keep_last: the estimated context tokens above which the transcript is compacted")
	}
	names := map[string]int{}
	for i, s := range w.Stop {
		f := fmt.Sprintf("stop[%d]", i)
		p.checkName(f+".name", s.Name, plainName, "stop condition", names)
		if s.When == "" {
			p.Add(p.Line(f+".when"), f+".when", "required")
		}
	}
}

// checkSandbox admits a known sandbox backend (or none): a misspelt one
// would otherwise fail every tool call of the workflow's sessions.
func (p *parser) checkSandbox(field, backend string) {
	if backend != "" && !slices.Contains(events.Backends(), backend) {
		p.Add(p.Line(field), field, "%q is not a sandbox backend (backends: %s)", backend, strings.Join(events.Backends(), ", "))
	}
}

// checkNetwork admits host names, "*.domain" and IP addresses, either with
// ":port" (egress.ParseEntry), that name public destinations or what the
// operator's allowlist names (AllowNet): an entry naming this host, a
// private network or a cloud's metadata service, in any spelling, is a
// problem that says why and how the operator allows it. The tool runner
// checks them again (sandbox.ParseHosts), and the address it dials.
func (p *parser) checkNetwork(field string, hosts []string) {
	for i, h := range hosts {
		f := fmt.Sprintf("%s[%d]", field, i)
		e, err := egress.ParseEntry(h)
		if err == nil && !p.netUnchecked {
			err = e.Check(p.allowNet)
		}
		if err != nil {
			p.Add(p.Line(f), f, "%v", err)
		}
	}
}

func (p *parser) validateMCPServers(w *Workflow) {
	names := map[string]int{}
	for i, s := range w.MCPServers {
		f := fmt.Sprintf("mcp_servers[%d]", i)
		p.checkName(f+".name", s.Name, plainName, "MCP server", names)
		if len(s.Command) == 0 || s.Command[0] == "" {
			p.Add(p.Line(f+".command"), f+".command", "required: the program and its arguments")
		}
	}
}

func (p *parser) validateAgents(w *Workflow) {
	if len(w.Agents) == 0 && !p.Reported("agents") {
		p.Add(p.Line("agents"), "agents", "at least one agent is required")
	}
	names := map[string]int{}
	for i := range w.Agents {
		a := &w.Agents[i]
		f := fmt.Sprintf("agents[%d]", i)
		p.checkName(f+".name", a.Name, identifier, "agent", names)
		if a.Served {
			p.validateServed(w, f, a)
			continue
		}
		switch {
		case a.Provider == "":
			p.Add(p.Line(f+".provider"), f+".provider", "required (one of %s)", strings.Join(providers, ", "))
		case !slices.Contains(providers, a.Provider):
			p.Add(p.Line(f+".provider"), f+".provider", "%q is not one of %s", a.Provider, strings.Join(providers, ", "))
		}
		switch {
		case a.Provider == ProviderScripted && a.Script == "":
			p.Add(p.Line(f+".script"), f+".script", "required for provider scripted")
		case a.Provider != ProviderScripted && a.Script != "" && slices.Contains(providers, a.Provider):
			p.Add(p.Line(f+".script"), f+".script", "only provider scripted reads a script (provider is %s)", a.Provider)
		case a.Script != "":
			a.ScriptPath = a.Script
			if !filepath.IsAbs(a.Script) {
				a.ScriptPath = filepath.Join(filepath.Dir(w.path), a.Script)
			}
		}
		p.checkSandbox(f+".sandbox", a.Sandbox)
		p.checkNetwork(f+".network", a.Network)
		if a.BaseURL != "" {
			if u, err := url.Parse(a.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.Add(p.Line(f+".base_url"), f+".base_url", "%q is not an http or https URL", a.BaseURL)
			}
		}
		p.checkTools(w, f, a)
		if a.Recall != nil {
			p.validateRecall(f+".recall", a.Recall)
		}
	}
}

// validateServed checks an agent a program serves (pkg/agentserver): the
// program answers its turns, so nothing that configures a model may be
// set, and its name must make a durable consumer name (agent-<name>) that
// is not the agent worker's.
func (p *parser) validateServed(w *Workflow, f string, a *Agent) {
	for _, c := range []struct {
		field string
		set   bool
	}{{"provider", a.Provider != ""}, {"model", a.Model != ""}, {"base_url", a.BaseURL != ""},
		{"script", a.Script != ""}, {"max_tokens", a.MaxTokens != 0}, {"recall", a.Recall != nil}} {
		if c.set {
			p.Add(p.Line(f+"."+c.field), f+"."+c.field, "a served agent has no %s: the program serving it answers its turns", c.field)
		}
	}
	if a.Name == ReservedServedName {
		p.Add(p.Line(f+".name"), f+".name", "%q cannot be served: its durable consumer would be the agent worker's", a.Name)
	}
	p.checkSandbox(f+".sandbox", a.Sandbox)
	p.checkNetwork(f+".network", a.Network)
	p.checkTools(w, f, a)
}

// checkTools checks an agent's tool names: none empty or listed twice, and
// an MCP server's tool of a server the workflow defines.
func (p *parser) checkTools(w *Workflow, f string, a *Agent) {
	seen := map[string]bool{}
	for j, t := range a.Tools {
		tf := fmt.Sprintf("%s.tools[%d]", f, j)
		switch server, _, scoped := strings.Cut(t, "."); {
		case t == "":
			p.Add(p.Line(tf), tf, "empty tool name")
		case seen[t]:
			p.Add(p.Line(tf), tf, "tool %q is listed twice", t)
		case scoped:
			if _, ok := w.MCPServer(server); !ok {
				p.Add(p.Line(tf), tf, "%q names MCP server %q, which is not defined (mcp_servers: %s)", t, server, serverNames(w))
			}
		}
		seen[t] = true
	}
}

func (p *parser) validateRecall(f string, r *Recall) {
	if r.Query == "" && !p.Reported(f+".query") {
		p.Add(p.Line(f+".query"), f+".query", "required: a CEL expression yielding the query, such as state.task")
	}
	for j, s := range r.Scopes {
		p.checkScope(fmt.Sprintf("%s.scopes[%d]", f, j), s)
	}
	p.checkTags(f+".tags", r.Tags)
	if r.K > memoryapi.MaxK {
		p.Add(p.Line(f+".k"), f+".k", "at most %d, got %d", memoryapi.MaxK, r.K)
	}
}

// checkScope reports a memory scope that is not "<kind>:<name>".
func (p *parser) checkScope(field, scope string) {
	if p.Reported(field) {
		return
	}
	if _, _, err := memoryapi.ParseScope(scope); err != nil {
		p.Add(p.Line(field), field, "%v", err)
	}
}

func (p *parser) checkTags(field string, tags []string) {
	if p.Reported(field) || len(tags) == 0 {
		return
	}
	if err := memoryapi.ValidateTags(tags); err != nil {
		p.Add(p.Line(field), field, "%v", err)
	}
}

// validateMemoryWrite checks a memory route and fills in its default scope.
func (p *parser) validateMemoryWrite(w *Workflow, f string, m *MemoryWrite) {
	if m.Content == "" && !p.Reported(f+".content") {
		p.Add(p.Line(f+".content"), f+".content", "required: a CEL expression yielding the item's text")
	}
	p.checkTags(f+".tags", m.Tags)
	switch {
	case p.Reported(f + ".evidence"):
	case m.Evidence == "":
		p.Add(p.Line(f+".evidence"), f+".evidence", "required (one of %s)", strings.Join(memoryapi.Evidences, ", "))
	case !memoryapi.ValidEvidence(m.Evidence):
		p.Add(p.Line(f+".evidence"), f+".evidence", "%q is not one of %s", m.Evidence, strings.Join(memoryapi.Evidences, ", "))
	}
	if m.Scope != "" {
		p.checkScope(f+".scope", m.Scope)
		return
	}
	if w.Memory.Scope != "" {
		m.Scope = w.Memory.Scope // checked at memory.scope
		return
	}
	m.Scope = w.DefaultScope("")
	if _, _, err := memoryapi.ParseScope(m.Scope); err != nil && w.Name != "" {
		p.Add(p.Line(f+".scope"), f+".scope", "required: the workflow has no memory scope and its default, %q, is not a scope (%v)", m.Scope, err)
	}
}

func (p *parser) validateRules(w *Workflow) {
	if len(w.Rules) == 0 && !p.Reported("rules") {
		p.Add(p.Line("rules"), "rules", "at least one rule is required")
	}
	names := map[string]int{}
	for i, r := range w.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		p.checkName(f+".name", r.Name, plainName, "rule", names)
		if r.When == "" {
			p.Add(p.Line(f+".when"), f+".when", "required")
		}
		rf := f + ".route"
		var kinds []string
		for _, k := range routeKinds {
			if _, given := p.Lines()[rf+"."+k]; given {
				kinds = append(kinds, k)
			}
		}
		switch {
		case len(kinds) == 0:
			p.Add(p.Line(rf), rf, "required: one of %s", strings.Join(routeKinds, ", "))
			continue
		case len(kinds) > 1:
			p.Add(p.Line(rf), rf, "has %s; a route is exactly one of %s", andList(kinds), strings.Join(routeKinds, ", "))
			continue
		}
		rt := r.Route
		if p.Reported(rf + "." + kinds[0]) {
			continue
		}
		switch RouteKind(kinds[0]) {
		case RouteAgent:
			p.checkAgent(w, rf+".agent", rt.Agent, true)
		case RouteClose:
			if rt.Close.Outcome == "" {
				p.Add(p.Line(rf+".close.outcome"), rf+".close.outcome", "required")
			}
		case RouteFork:
			p.checkAgent(w, rf+".fork.agent", rt.Fork.Agent, false)
		case RouteApproval:
			if rt.Approval.Action == "" {
				p.Add(p.Line(rf+".approval.action"), rf+".approval.action", "required")
			}
			p.checkExpiry(rf+".approval", rt.Approval.Expiry)
		case RouteMemory:
			p.validateMemoryWrite(w, rf+".memory", rt.Memory)
		case RouteRouter:
			if err := routerapi.ValidateName(rt.Router); err != nil && !p.Reported(rf+".router") {
				p.Add(p.Line(rf+".router"), rf+".router", "%q is not a valid router name (letters, digits and _, not starting with a digit, at most 64)", rt.Router)
			}
		}
		p.validateFallback(w, f, r)
	}
}

// validateFallback checks a rule's fallback: only beside a router route
// (no other route can fail to answer), and an agent or close route.
func (p *parser) validateFallback(w *Workflow, f string, r Rule) {
	ff := f + ".fallback"
	if r.Fallback == nil || p.Reported(ff) {
		return
	}
	if r.Route.Kind() != RouteRouter {
		p.Add(p.Line(ff), ff, "only a rule whose route asks a router has a fallback")
		return
	}
	var kinds []string
	for _, k := range routeKinds {
		if _, given := p.Lines()[ff+"."+k]; given {
			kinds = append(kinds, k)
		}
	}
	switch {
	case len(kinds) != 1:
		p.Add(p.Line(ff), ff, "required: exactly one of %s", strings.Join(fallbackKinds, ", "))
		return
	case !slices.Contains(fallbackKinds, kinds[0]):
		p.Add(p.Line(ff+"."+kinds[0]), ff+"."+kinds[0], "a fallback is one of %s, not %s", strings.Join(fallbackKinds, ", "), kinds[0])
		return
	case p.Reported(ff + "." + kinds[0]):
		return
	}
	switch RouteKind(kinds[0]) {
	case RouteAgent:
		p.checkAgent(w, ff+".agent", r.Fallback.Agent, true)
	case RouteClose:
		if r.Fallback.Close.Outcome == "" {
			p.Add(p.Line(ff+".close.outcome"), ff+".close.outcome", "required")
		}
	}
}

// checkName reports an empty, malformed or repeated name; names maps the
// names seen so far to their lines.
func (p *parser) checkName(field, n string, form nameForm, what string, names map[string]int) {
	line := p.Line(field)
	switch first, dup := names[n]; {
	case n == "":
		p.Add(line, field, "required")
	case !form.re.MatchString(n):
		p.Add(line, field, "%q is not a valid %s name (%s)", n, what, form.desc)
	case dup:
		p.Add(line, field, "duplicate %s %q (first at line %d)", what, n, first)
	default:
		names[n] = line
	}
}

func (p *parser) checkAgent(w *Workflow, field, n string, required bool) {
	if n == "" {
		if required {
			p.Add(p.Line(field), field, "required")
		}
		return
	}
	if _, ok := w.Agent(n); !ok {
		p.Add(p.Line(field), field, "%q is not an agent (agents: %s)", n, agentNames(w))
	}
}

func agentNames(w *Workflow) string {
	var out []string
	for _, a := range w.Agents {
		if a.Name != "" && !slices.Contains(out, a.Name) {
			out = append(out, a.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func serverNames(w *Workflow) string {
	var out []string
	for _, s := range w.MCPServers {
		if s.Name != "" {
			out = append(out, s.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// andList joins ["a", "b", "c"] as "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// CheckScripts reports scripted agents whose script file cannot be read,
// as a *SpecError pointing at each script field. Parse does not open files;
// call CheckScripts where the scripts must exist (rath workflow check, the
// agent worker at start).
func (w *Workflow) CheckScripts() error {
	var problems []Problem
	for i, a := range w.Agents {
		if a.ScriptPath == "" {
			continue
		}
		f := fmt.Sprintf("agents[%d].script", i)
		if _, err := os.Stat(a.ScriptPath); err != nil {
			problems = append(problems, Problem{Line: w.lines[f], Field: f, Message: fmt.Sprintf("cannot read %q: %v", a.Script, err)})
		}
	}
	if len(problems) > 0 {
		return &SpecError{Path: w.path, Problems: problems}
	}
	return nil
}
