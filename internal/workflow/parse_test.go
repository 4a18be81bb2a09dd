package workflow_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/workflow"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestLoadExample(t *testing.T) {
	const path = "testdata/fix-issue.yaml"
	w, err := workflow.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "fix-issue" || w.Path() != path || !strings.HasPrefix(w.Description, "Research an issue") {
		t.Fatalf("name %q path %q description %q", w.Name, w.Path(), w.Description)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if got, want := w.Hash(), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("hash %s, want %s", got, want)
	}

	var names []string
	for _, a := range w.Agents {
		names = append(names, a.Name+"/"+a.Provider)
	}
	if got := strings.Join(names, " "); got != "researcher/anthropic coder/openai validator/scripted" {
		t.Fatalf("agents %s", got)
	}
	coder, _ := w.Agent("coder")
	if coder.Model != "gpt-4.1" || coder.BaseURL != "https://api.openai.com/v1" || coder.MaxTokens != 8192 ||
		coder.Sandbox != "" || w.Sandbox != "bwrap" || !reflect.DeepEqual(coder.Tools, []string{"read_file", "write_file", "apply_patch", "run"}) ||
		!strings.HasPrefix(coder.System, "Implement the plan") {
		t.Fatalf("coder %+v", coder)
	}
	validator, _ := w.Agent("validator")
	if validator.Script != "scripts/validator.yaml" || validator.ScriptPath != filepath.Join("testdata", "scripts", "validator.yaml") {
		t.Fatalf("validator script %q path %q", validator.Script, validator.ScriptPath)
	}
	if err := w.CheckScripts(); err != nil {
		t.Fatal(err)
	}
	if len(w.Gates) != 1 || w.Gates[0].Name != "push-needs-approval" || w.Gates[0].Approver != "maintainers" ||
		!reflect.DeepEqual(w.Gates[0].Tools, []string{"run"}) {
		t.Fatalf("gates %+v", w.Gates)
	}

	var routes []string
	for _, r := range w.Rules {
		routes = append(routes, r.Name+"="+r.Route.String())
	}
	want := "start=agent:researcher plan-ready=agent:coder " +
		"fix-ready=agent:validator passed=close:success retry=fork:coder give-up=close:failed"
	if got := strings.Join(routes, " "); got != want {
		t.Fatalf("routes\n got %s\nwant %s", got, want)
	}
	if f := w.Rules[4].Route.Fork; f.At != "event.seq" || f.Reason != "validation failed; retry the fix" {
		t.Fatalf("fork %+v", f)
	}
	if b := w.Budgets; b != (workflow.Budgets{MaxTurns: 12, MaxTokens: 400000, MaxToolCalls: 60, WallTime: 45 * time.Minute}) {
		t.Fatalf("budgets %+v", b)
	}
	if len(w.Stop) != 2 || w.Stop[1].Name != "cancelled" || w.Stop[1].When != `"cancel" in state.labels` {
		t.Fatalf("stop %+v", w.Stop)
	}
}

// TestDocsExample keeps the example in docs/workflows.md the file tested here.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("testdata/fix-issue.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(example)+"```\n") {
		t.Fatal("docs/workflows.md does not contain testdata/fix-issue.yaml as a yaml block")
	}
}

func TestHashIsOfTheExactBytes(t *testing.T) {
	const src = "name: w\nagents: [{name: a, provider: openai}]\nrules: [{name: r, when: 'true', route: {agent: a}}]\n"
	a := mustParse(t, src)
	b := mustParse(t, src+"# a comment changes the file, so the hash\n")
	if a.Hash() == b.Hash() || !strings.HasPrefix(a.Hash(), "sha256:") || len(a.Hash()) != len("sha256:")+64 {
		t.Fatalf("hashes %s %s", a.Hash(), b.Hash())
	}
}

// The backend of a session's first placement: the agent's sandbox, else
// the workflow's, else none (the tool runner's default).
func TestSandboxFor(t *testing.T) {
	src := strings.Replace(base, "rules:", "  - name: tester\n    provider: openai\n    sandbox: local\nrules:", 1)
	w, err := workflow.Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b, by := w.SandboxFor("tester"); b != "local" || by != "agent tester" {
		t.Errorf("tester: %q by %q", b, by)
	}
	if b, by := w.SandboxFor("coder"); b != "" || by != "" {
		t.Errorf("coder without a workflow sandbox: %q by %q", b, by)
	}
	w, err = workflow.Parse([]byte("sandbox: bwrap\n"+src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for agent, want := range map[string][2]string{"coder": {"bwrap", "workflow w"}, "tester": {"local", "agent tester"}, "nobody": {"bwrap", "workflow w"}} {
		if b, by := w.SandboxFor(agent); b != want[0] || by != want[1] {
			t.Errorf("%s: %q by %q, want %v", agent, b, by, want)
		}
	}
}

// base is a valid workflow; each problem case edits one part of it. Its
// lines are numbered so the expected line numbers can be read off.
const base = `name: w
agents:
  - name: coder
    provider: openai
rules:
  - name: go
    when: "true"
    route: {agent: coder}
`

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []workflow.Problem // Message is matched as a prefix
	}{
		{"duplicate agent", strings.Replace(base, "rules:", "  - name: coder\n    provider: anthropic\nrules:", 1),
			[]workflow.Problem{{5, "agents[1].name", `duplicate agent "coder" (first at line 3)`}}},
		{"unknown agent in route", strings.Replace(base, "{agent: coder}", "{agent: coder2}", 1),
			[]workflow.Problem{{8, "rules[0].route.agent", `"coder2" is not an agent (agents: coder)`}}},
		{"bad provider", strings.Replace(base, "openai", "gpt", 1),
			[]workflow.Problem{{4, "agents[0].provider", `"gpt" is not one of scripted, openai, anthropic`}}},
		{"missing provider", strings.Replace(base, "    provider: openai\n", "", 1),
			[]workflow.Problem{{3, "agents[0].provider", "required (one of scripted, openai, anthropic)"}}},
		{"scripted without script", strings.Replace(base, "openai", "scripted", 1),
			[]workflow.Problem{{3, "agents[0].script", "required for provider scripted"}}},
		{"script without scripted", strings.Replace(base, "openai", "openai\n    script: s.yaml", 1),
			[]workflow.Problem{{5, "agents[0].script", "only provider scripted reads a script (provider is openai)"}}},
		{"bad agent name", strings.Replace(base, "name: coder", "name: my-coder", 1),
			[]workflow.Problem{
				{3, "agents[0].name", `"my-coder" is not a valid agent name (letters, digits and _, not starting with a digit)`},
				{8, "rules[0].route.agent", `"coder" is not an agent (agents: my-coder)`},
			}},
		{"served with a provider", strings.Replace(base, "openai", "openai\n    served: true", 1),
			[]workflow.Problem{{4, "agents[0].provider", "a served agent has no provider: the program serving it answers its turns"}}},
		{"served not a bool", strings.Replace(base, "    provider: openai", "    provider: openai\n    served: yes please", 1),
			[]workflow.Problem{{5, "agents[0].served", `expected true or false, got "yes please"`}}},
		{"served worker", strings.Replace(strings.Replace(base, "    provider: openai", "    served: true", 1), "coder", "worker", 2),
			[]workflow.Problem{{3, "agents[0].name", `"worker" cannot be served: its durable consumer would be the agent worker's`}}},
		{"unknown sandbox of an agent", strings.Replace(base, "openai", "openai\n    sandbox: docker", 1),
			[]workflow.Problem{{5, "agents[0].sandbox", `"docker" is not a sandbox backend (backends: bwrap, gvisor, remote, local)`}}},
		{"unknown sandbox of the workflow", strings.Replace(base, "name: w\n", "name: w\nsandbox: Bwrap\n", 1),
			[]workflow.Problem{{2, "sandbox", `"Bwrap" is not a sandbox backend (backends: bwrap, gvisor, remote, local)`}}},
		{"bad base_url", strings.Replace(base, "openai", "openai\n    base_url: localhost:8080", 1),
			[]workflow.Problem{{5, "agents[0].base_url", `"localhost:8080" is not an http or https URL`}}},
		{"two route kinds", strings.Replace(base, "{agent: coder}", "{agent: coder, close: {outcome: done}}", 1),
			[]workflow.Problem{{8, "rules[0].route", "has agent and close; a route is exactly one of agent, close, fork, approval"}}},
		{"no route", strings.Replace(base, "    route: {agent: coder}\n", "", 1),
			[]workflow.Problem{{6, "rules[0].route", "required: one of agent, close, fork, approval"}}},
		{"close without outcome", strings.Replace(base, "{agent: coder}", "{close: {reason: done}}", 1),
			[]workflow.Problem{{8, "rules[0].route.close.outcome", "required"}}},
		{"fork to unknown agent", strings.Replace(base, "{agent: coder}", "{fork: {agent: tester}}", 1),
			[]workflow.Problem{{8, "rules[0].route.fork.agent", `"tester" is not an agent (agents: coder)`}}},
		{"route kind not a mapping", strings.Replace(base, "{agent: coder}", "{close: done}", 1),
			[]workflow.Problem{{8, "rules[0].route.close", `expected a mapping, got "done"`}}},
		{"approval without action", strings.Replace(base, "{agent: coder}", "{approval: {approver: ops}}", 1),
			[]workflow.Problem{{8, "rules[0].route.approval.action", "required"}}},
		{"bad router name", strings.Replace(base, "{agent: coder}", "{router: tri.age}", 1),
			[]workflow.Problem{{8, "rules[0].route.router", `"tri.age" is not a valid router name (letters, digits and _, not starting with a digit, at most 64)`}}},
		{"router name empty", strings.Replace(base, "{agent: coder}", `{router: ""}`, 1),
			[]workflow.Problem{{8, "rules[0].route.router", `"" is not a valid router name`}}},
		{"router and agent", strings.Replace(base, "{agent: coder}", "{agent: coder, router: triage}", 1),
			[]workflow.Problem{{8, "rules[0].route", "has agent and router; a route is exactly one of agent, close, fork, approval, memory, router"}}},
		{"fallback without a router", strings.Replace(base, "{agent: coder}", "{agent: coder}\n    fallback: {agent: coder}", 1),
			[]workflow.Problem{{9, "rules[0].fallback", "only a rule whose route asks a router has a fallback"}}},
		{"fallback to an unknown agent", strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {agent: tester}", 1),
			[]workflow.Problem{{9, "rules[0].fallback.agent", `"tester" is not an agent (agents: coder)`}}},
		{"fallback of a kind not offered", strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {fork: {agent: coder}}", 1),
			[]workflow.Problem{{9, "rules[0].fallback.fork", "a fallback is one of agent, close, not fork"}}},
		{"fallback to a router", strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {router: other}", 1),
			[]workflow.Problem{{9, "rules[0].fallback.router", "a fallback is one of agent, close, not router"}}},
		{"fallback of two kinds", strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {agent: coder, close: {outcome: x}}", 1),
			[]workflow.Problem{{9, "rules[0].fallback", "required: exactly one of agent, close"}}},
		{"fallback close without outcome", strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {close: {reason: r}}", 1),
			[]workflow.Problem{{9, "rules[0].fallback.close.outcome", "required"}}},
		{"bad CEL", strings.Replace(base, `"true"`, `"state.turns <"`, 1),
			[]workflow.Problem{{7, "rules[0].when", "invalid CEL: Syntax error: "}}},
		{"undeclared CEL variable", strings.Replace(base, `"true"`, `"stat.turns < 3"`, 1),
			[]workflow.Problem{{7, "rules[0].when", "invalid CEL: undeclared reference to 'stat' (did you mean 'state'?) (column 1)"}}},
		{"bad CEL in a block", strings.Replace(base, `"true"`, "|\n      state.turns < 3 &&\n        stat.x", 1),
			[]workflow.Problem{{7, "rules[0].when", "invalid CEL: undeclared reference to 'stat' (did you mean 'state'?) (expression line 2, column 3)"}}},
		{"unknown state field", strings.Replace(base, `"true"`, `"state.turn < 3"`, 1),
			[]workflow.Problem{{7, "rules[0].when", `state has no field "turn" (fields: status, turns, `}}},
		{"unknown event field", strings.Replace(base, `"true"`, `"event.kind == 'x'"`, 1),
			[]workflow.Problem{{7, "rules[0].when", `event has no field "kind" (fields: type, id, seq, session, data)`}}},
		{"when not bool", strings.Replace(base, `"true"`, `"1 + 2"`, 1),
			[]workflow.Problem{{7, "rules[0].when", "must yield bool, not int"}}},
		{"fork at not int", strings.Replace(base, "{agent: coder}", "{fork: {at: '\"head\"'}}", 1),
			[]workflow.Problem{{8, "rules[0].route.fork.at", "must yield int or uint, not string"}}},
		{"missing when", strings.Replace(base, "    when: \"true\"\n", "", 1),
			[]workflow.Problem{{6, "rules[0].when", "required"}}},
		{"duplicate rule", base + "  - name: go\n    when: \"false\"\n    route: {agent: coder}\n",
			[]workflow.Problem{{9, "rules[1].name", `duplicate rule "go" (first at line 6)`}}},
		{"unknown field", strings.Replace(base, "openai", "openai\n    temperature: 0.2", 1),
			[]workflow.Problem{{5, "agents[0].temperature", "unknown field (fields: name, role, provider, model, base_url, system, tools, sandbox, network, script, max_tokens, recall, served)"}}},
		{"unknown top-level field", base + "budget:\n  max_turns: 3\n",
			[]workflow.Problem{{9, "budget", "unknown field (fields: name, description, sandbox, network, agents, mcp_servers, rules, gates, budgets, stop, compaction, memory)"}}},
		{"field given twice", strings.Replace(base, "openai", "openai\n    provider: anthropic", 1),
			[]workflow.Problem{{5, "agents[0].provider", "given twice (first at line 4)"}}},
		{"bad duration", base + "budgets:\n  wall_time: 30 minutes\n",
			[]workflow.Problem{{10, "budgets.wall_time", `"30 minutes" is not a duration (such as 45s, 30m, 1h30m)`}}},
		{"negative budget", base + "budgets:\n  max_turns: -1\n",
			[]workflow.Problem{{10, "budgets.max_turns", "must not be negative, got -1"}}},
		{"negative compaction threshold", base + "compaction:\n  max_context_tokens: -5\n",
			[]workflow.Problem{{10, "compaction.max_context_tokens", "must not be negative, got -5"}}},
		{"keep_last without threshold", base + "compaction:\n  keep_last: 3\n",
			[]workflow.Problem{{9, "compaction.max_context_tokens", "required with keep_last: the estimated context tokens above which the transcript is compacted"}}},
		{"unknown compaction field", base + "compaction:\n  max_tokens: 10\n",
			[]workflow.Problem{{10, "compaction.max_tokens", "unknown field (fields: max_context_tokens, keep_last)"}}},
		{"budget not a number", base + "budgets:\n  max_tokens: lots\n",
			[]workflow.Problem{{10, "budgets.max_tokens", `expected a whole number, got "lots"`}}},
		{"wrong type", "name: w\nagents: coder\nrules: []\n",
			[]workflow.Problem{
				{2, "agents", `expected a list, got "coder"`},
				{3, "rules", "at least one rule is required"},
			}},
		{"tool of unknown MCP server", strings.Replace(base, "openai", "openai\n    tools: [shell, git.status]", 1),
			[]workflow.Problem{{5, "agents[0].tools[1]", `"git.status" names MCP server "git", which is not defined (mcp_servers: none)`}}},
		{"MCP server without command", base + "mcp_servers:\n  - name: git\n",
			[]workflow.Problem{{10, "mcp_servers[0].command", "required: the program and its arguments"}}},
		{"stop without when", base + "stop:\n  - name: s\n    reason: r\n",
			[]workflow.Problem{{10, "stop[0].when", "required"}}},
		{"bad stop CEL", base + "stop:\n  - name: s\n    when: state.turns >\n",
			[]workflow.Problem{{11, "stop[0].when", "invalid CEL: Syntax error: "}}},
		{"missing name", strings.Replace(base, "name: w\n", "", 1),
			[]workflow.Problem{{1, "name", "required"}}},
		{"YAML syntax", strings.Replace(base, "    provider: openai", "    provider: openai\n  bad", 1),
			[]workflow.Problem{{5, "", "invalid YAML: could not find expected ':'"}}},
		{"empty file", "", []workflow.Problem{{0, "", "empty workflow file"}}},
		{"two documents", base + "---\nname: other\n", []workflow.Problem{{9, "", "more than one YAML document"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := workflow.Parse([]byte(tc.src), "workflow.yaml")
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

// TestSpecErrorText pins the text of a file with many problems: all are
// reported, ordered by line, as path:line: field: message.
func TestSpecErrorText(t *testing.T) {
	src, err := os.ReadFile("testdata/invalid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = workflow.Parse(src, "invalid.yaml")
	if err == nil {
		t.Fatal("invalid.yaml parsed")
	}
	got := err.Error() + "\n"
	const golden = "testdata/invalid.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("error text\n%s\nwant (go test -update rewrites it)\n%s", got, want)
	}
}

func TestCheckScripts(t *testing.T) {
	dir := t.TempDir()
	src := "name: w\nagents:\n  - name: a\n    provider: scripted\n    script: a.yaml\n" +
		"rules: [{name: r, when: 'true', route: {agent: a}}]\n"
	path := filepath.Join(dir, "workflow.yaml")
	w, err := workflow.Parse([]byte(src), path)
	if err != nil {
		t.Fatal(err)
	}
	if w.Agents[0].ScriptPath != filepath.Join(dir, "a.yaml") {
		t.Fatalf("script path %s", w.Agents[0].ScriptPath)
	}
	var se *workflow.SpecError
	if err := w.CheckScripts(); !errors.As(err, &se) || se.Problems[0].Line != 5 || se.Problems[0].Field != "agents[0].script" {
		t.Fatalf("missing script: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckScripts(); err != nil {
		t.Fatalf("script exists: %v", err)
	}
}

func TestCompactionSettings(t *testing.T) {
	src := "name: w\nagents:\n  - name: coder\n    provider: openai\nrules:\n  - name: go\n    when: \"true\"\n    route: {agent: coder}\n" +
		"compaction:\n  max_context_tokens: 8000\n  keep_last: 6\n"
	w, err := workflow.Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w.Compaction != (workflow.Compaction{MaxContextTokens: 8000, KeepLast: 6}) || w.Compaction.Keep() != 6 {
		t.Fatalf("compaction %+v", w.Compaction)
	}
	w, err = workflow.Parse([]byte(strings.Replace(src, "  keep_last: 6\n", "", 1)), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w.Compaction.Keep() != workflow.DefaultKeepLast {
		t.Fatalf("default keep %d", w.Compaction.Keep())
	}
}

func TestNetworkFor(t *testing.T) {
	src := strings.Replace(base, "rules:", "  - name: tester\n    provider: openai\n    network: []\n  - name: fetcher\n    provider: openai\n    network: [api.github.com, \"*.golang.org:443\"]\nrules:", 1)
	w, err := workflow.Parse([]byte("network: [proxy.golang.org]\n"+src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for agent, want := range map[string][]string{
		"coder":   {"proxy.golang.org"},                   // the workflow's
		"tester":  {},                                     // none of its own
		"fetcher": {"api.github.com", "*.golang.org:443"}, // its own
	} {
		if got := w.NetworkFor(agent); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", agent, got, want)
		}
	}
	for _, bad := range []string{"http://x.com", "x.com:0", "user@x.com", "*"} {
		if _, err := workflow.Parse([]byte("network: ["+strconv.Quote(bad)+"]\n"+base), "w.yaml"); err == nil || !strings.Contains(err.Error(), "network[0]") {
			t.Errorf("network %q: %v, want refused naming network[0]", bad, err)
		}
	}
}

// A served agent needs no provider, and keeps its tools (the bundle's tools
// table lists them for the tool servers).
func TestParseServedAgent(t *testing.T) {
	src := strings.Replace(base, "    provider: openai", "    served: true\n    system: You plan.\n    tools: [run]", 1)
	w, err := workflow.Parse([]byte(src), "served.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := w.Agent("coder")
	if !ok || !a.Served || a.Provider != "" || a.System != "You plan." || len(a.Tools) != 1 {
		t.Fatalf("agent %+v", a)
	}
}

// A rule may ask a served router for its route, with a fallback for when no
// valid answer comes; both keep their values, and the route renders as
// router:NAME.
func TestParseRouterRoute(t *testing.T) {
	src := strings.Replace(base, "{agent: coder}", "{router: triage}\n    fallback: {close: {outcome: unrouted, reason: no router}}", 1) +
		"  - name: plain\n    when: \"false\"\n    route: {router: triage_2}\n"
	w, err := workflow.Parse([]byte(src), "router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := w.Rules[0]
	if r.Route.Kind() != workflow.RouteRouter || r.Route.Router != "triage" || r.Route.String() != "router:triage" {
		t.Fatalf("route %+v (%s)", r.Route, r.Route.String())
	}
	if r.Fallback == nil || r.Fallback.Kind() != workflow.RouteClose || r.Fallback.Close.Outcome != "unrouted" || r.Fallback.Close.Reason != "no router" {
		t.Fatalf("fallback %+v", r.Fallback)
	}
	if p := w.Rules[1]; p.Route.String() != "router:triage_2" || p.Fallback != nil {
		t.Fatalf("rule %+v", p)
	}
}
