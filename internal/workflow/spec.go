package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/openrath/rath/internal/workflow/expr"
	"github.com/openrath/rath/pkg/agentapi"
	"github.com/openrath/rath/pkg/events"
)

// Providers an agent may use.
const (
	ProviderScripted  = "scripted"
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

var providers = []string{ProviderScripted, ProviderOpenAI, ProviderAnthropic}

// ReservedServedName is the one agent name that cannot be served: a served
// agent's durable consumer is agent-<name>, and agent-worker is the agent
// worker's (agentapi.ReservedName).
const ReservedServedName = agentapi.ReservedName

// Outcomes the selector records when it closes a session on its own account
// rather than because a close rule matched.
const (
	// OutcomeStopped closes a session whose stop condition held.
	OutcomeStopped = "stopped"
	// OutcomeBudget closes a session that reached one of its budgets.
	OutcomeBudget = "budget_exceeded"
)

// Workflow is a parsed, validated and compiled workflow file. It comes from
// Parse or Load (which compile its expressions), never changes afterwards and
// is safe for concurrent use.
type Workflow struct {
	Name        string
	Description string
	Agents      []Agent
	MCPServers  []MCPServer
	// Rules are evaluated in order; the first whose When holds wins.
	Rules []Rule
	// Gates hold tool calls until an approver allows them; the first gate
	// that matches a call holds it.
	Gates   []Gate
	Budgets Budgets
	// Stop conditions close the session with outcome OutcomeStopped.
	Stop []StopCondition
	// Compaction bounds the context the agents see; zero: never compacted
	// automatically.
	Compaction Compaction
	// Memory holds the workflow's memory settings (the default scope).
	Memory Memory
	// Sandbox is the sandbox backend (events.Backends) a session of the
	// workflow is first placed on when the agent of its first tool call
	// names none; empty: the tool runner's default.
	Sandbox string
	// Network are the hosts the commands of an agent without a network of
	// its own may reach from an isolating sandbox ("host", "host:port",
	// "*.domain"); empty: none.
	Network []string

	path   string
	source []byte
	// lines maps a field path ("agents[0].script") to its line in source.
	lines map[string]int
}

// Agent is one model-backed participant of the workflow.
type Agent struct {
	// Name is unique in the workflow and a CEL identifier, so rules can write
	// state.agent_turns.coder.
	Name     string
	Role     string
	Provider string
	Model    string
	// BaseURL overrides the provider's API endpoint (a proxy, a local server).
	BaseURL string
	// System is the agent's system prompt.
	System string
	// Tools are the tool names the agent may call; "server.tool" names a tool
	// of the MCP server "server".
	Tools []string
	// Sandbox is the sandbox backend (events.Backends) a session is first
	// placed on when the agent's tool call is its first; empty: the
	// workflow's. It does not move a session placed already.
	Sandbox string
	// Network are the hosts the agent's commands may reach from an
	// isolating sandbox; nil: the workflow's. An empty list ([]) is none.
	Network []string
	// Script is the scripted provider's script as written in the file;
	// ScriptPath is the same path resolved against the workflow file's
	// directory. Both are empty unless Provider is ProviderScripted.
	Script     string
	ScriptPath string
	MaxTokens  int
	// Recall, if set, is what the agent worker recalls from memory before
	// the first model call of each of the agent's turns.
	Recall *Recall
	// Served marks an agent that a program serves from the bus
	// (pkg/agentserver, durable agent-<name>) instead of the agent worker:
	// the worker leaves its turns alone. A served agent has no provider,
	// model, base URL, script or recall: the program answers its turns.
	Served bool
}

// SandboxFor is the sandbox backend the workflow asks for a session whose
// first tool call is agent's, and who asks for it ("agent coder",
// "workflow fix"); "" when neither the agent nor the workflow names one.
func (w *Workflow) SandboxFor(agent string) (backend, by string) {
	if a, ok := w.Agent(agent); ok && a.Sandbox != "" {
		return a.Sandbox, "agent " + a.Name
	}
	if w.Sandbox != "" {
		return w.Sandbox, "workflow " + w.Name
	}
	return "", ""
}

// NetworkFor is the hosts agent's commands may reach: the agent's own list
// if it has one, else the workflow's.
func (w *Workflow) NetworkFor(agent string) []string {
	if a, ok := w.Agent(agent); ok && a.Network != nil {
		return a.Network
	}
	return w.Network
}

// Memory is the workflow's memory settings.
type Memory struct {
	// Scope is the default scope of the workflow's memory writes (memory
	// routes, the remember tool) and recalls: "<kind>:<name>", such as
	// "project:rath". Empty: DefaultScope.
	Scope string
}

// Recall says what an agent recalls before a turn.
type Recall struct {
	// Query is a CEL expression yielding the query string, over event (the
	// rath.agent.turn.requested event of the turn) and state (the session
	// folded up to it): "state.task".
	Query string
	// Scopes restrict the recall to items of any of them; empty: the
	// workflow's memory scope if it has one, else every scope.
	Scopes []string
	// Tags restrict the recall to items that carry every one of them.
	Tags []string
	// K is how many items to recall; 0 is the memory service's default.
	K int

	query *expr.Program
}

// RecallQuery evaluates the recall's query over an activation (see
// Activation) built from the turn request and the state.
func (r *Recall) RecallQuery(act map[string]any) (string, error) {
	return r.query.String(act)
}

// RecallScopes returns the scopes the agent's recall searches: its own, or
// the workflow's memory scope, or none (every scope).
func (w *Workflow) RecallScopes(a Agent) []string {
	switch {
	case a.Recall != nil && len(a.Recall.Scopes) > 0:
		return a.Recall.Scopes
	case w.Memory.Scope != "":
		return []string{w.Memory.Scope}
	}
	return nil
}

// DefaultScope is the scope of a memory write that names none, for the
// agent writing it ("" when no agent does): the workflow's memory scope,
// else the agent's first recall scope, else "workflow:" and the workflow's
// name.
func (w *Workflow) DefaultScope(agent string) string {
	if w.Memory.Scope != "" {
		return w.Memory.Scope
	}
	if a, ok := w.Agent(agent); ok && a.Recall != nil && len(a.Recall.Scopes) > 0 {
		return a.Recall.Scopes[0]
	}
	return "workflow:" + w.Name
}

// MCPServer is a Model Context Protocol server the workers start over stdio.
// The tools it serves are named "<Name>.<tool>".
type MCPServer struct {
	Name    string
	Command []string
	Env     map[string]string
}

// Rule routes a session when its When expression holds.
type Rule struct {
	Name string
	// When is a CEL expression over event and state yielding a bool.
	When  string
	Route Route
	// Reason explains the rule in the recorded decision; when empty the
	// route's own reason is used.
	Reason string
	// Fallback is the route taken when Route asks a served router and no
	// valid answer comes (none serving, a timeout, an error, an answer the
	// workflow refuses); nil: the selector waits for a router, or records
	// the refusal. Only an agent or close route.
	Fallback *Route

	// when's inputs are the activation paths recorded with a decision.
	when *expr.Program
	// at evaluates Route.Fork.At; nil when the fork is at the head.
	at *expr.Program
	// content evaluates Route.Memory.Content.
	content *expr.Program
}

// RouteKind says what a route does.
type RouteKind string

// Route kinds; exactly one is set in a Route.
const (
	RouteAgent    RouteKind = "agent"
	RouteClose    RouteKind = "close"
	RouteFork     RouteKind = "fork"
	RouteApproval RouteKind = "approval"
	RouteMemory   RouteKind = "memory"
	// RouteRouter asks a served router (a program, pkg/agentserver
	// ServeRouter) for the route; the selector records its answer, an
	// agent, close or fork route, as the decision.
	RouteRouter RouteKind = "router"
)

var routeKinds = []string{string(RouteAgent), string(RouteClose), string(RouteFork), string(RouteApproval), string(RouteMemory), string(RouteRouter)}

// fallbackKinds are the route kinds a rule's fallback may take: those that
// need no expression of their own.
var fallbackKinds = []string{string(RouteAgent), string(RouteClose)}

// Route is where a matching rule sends the session. Exactly one field is set.
type Route struct {
	// Agent requests the next turn of the named agent.
	Agent    string
	Close    *Close
	Fork     *Fork
	Approval *Approval
	Memory   *MemoryWrite
	// Router names the served router asked for the route.
	Router string
}

// Close ends the session.
type Close struct {
	Outcome string
	Reason  string
}

// Fork starts a new session from this one's log.
type Fork struct {
	// At is a CEL expression yielding the sequence to fork at; empty forks
	// at the head. Decide evaluates it (or takes the head) into
	// Decision.ForkAt.
	At string
	// Agent takes the fork's first turn; empty leaves it to the rules.
	Agent  string
	Reason string
}

// Approval asks an approver to allow an action before the session goes on.
type Approval struct {
	Action   string
	Approver string
	// Expiry is as a gate's: how long the approval may wait undecided, and
	// what follows.
	Expiry
}

// Request is the approval request a rule's approval route asks for, with
// ID id, asked at now (the triggering event's time, so that a redelivered
// trigger asks for the same request).
func (a *Approval) Request(id string, now time.Time) *events.ApprovalRequested {
	r := &events.ApprovalRequested{ApprovalID: id, Action: a.Action, Approver: a.Approver}
	a.Expiry.apply(r, now)
	return r
}

// MemoryWrite writes a memory item through the memory service, with the
// triggering event as its provenance. It neither starts a turn nor waits for
// one.
type MemoryWrite struct {
	// Content is a CEL expression over event and state yielding the item's
	// text: '"Failure pattern: " + event.data.reason'. Decide evaluates it
	// into Decision.Content.
	Content string
	Tags    []string
	// Scope is the item's scope; Parse fills in the workflow's default
	// (Workflow.DefaultScope) when the file gives none.
	Scope string
	// Evidence is the kind of evidence the trigger is: tool_result,
	// human_correction, failed_attempt or validation_signal.
	Evidence string
}

// Kind returns the kind of the route's set field ("" for a zero Route).
func (r Route) Kind() RouteKind {
	switch {
	case r.Agent != "":
		return RouteAgent
	case r.Close != nil:
		return RouteClose
	case r.Fork != nil:
		return RouteFork
	case r.Approval != nil:
		return RouteApproval
	case r.Memory != nil:
		return RouteMemory
	case r.Router != "":
		return RouteRouter
	}
	return ""
}

// String renders the route as "KIND:DETAIL": "agent:NAME",
// "close:OUTCOME", "fork:AGENT" (AGENT may be empty), "approval:ACTION",
// "memory:SCOPE", "router:NAME". A decision records a fork with its point
// appended (Decision.Event), and a router's route as the route it answered,
// never "router:".
func (r Route) String() string {
	switch r.Kind() {
	case RouteAgent:
		return "agent:" + r.Agent
	case RouteClose:
		return "close:" + r.Close.Outcome
	case RouteFork:
		return "fork:" + r.Fork.Agent
	case RouteApproval:
		return "approval:" + r.Approval.Action
	case RouteMemory:
		return "memory:" + r.Memory.Scope
	case RouteRouter:
		return "router:" + r.Router
	}
	return ""
}

// clone copies the route, so a Decision never shares the workflow's values.
func (r Route) clone() Route {
	if r.Close != nil {
		c := *r.Close
		r.Close = &c
	}
	if r.Fork != nil {
		f := *r.Fork
		r.Fork = &f
	}
	if r.Approval != nil {
		a := *r.Approval
		r.Approval = &a
	}
	if r.Memory != nil {
		m := *r.Memory
		m.Tags = slices.Clone(m.Tags)
		r.Memory = &m
	}
	return r
}

// reason is the route's own reason, used when the rule gives none.
func (r Route) reason() string {
	switch {
	case r.Close != nil:
		return r.Close.Reason
	case r.Fork != nil:
		return r.Fork.Reason
	}
	return ""
}

// Budgets bound a session; a zero field is unlimited.
type Budgets struct {
	// MaxTurns bounds agent turns that ended, completed or failed.
	MaxTurns int
	// MaxTokens bounds model tokens, input plus output.
	MaxTokens int64
	// MaxToolCalls bounds requested tool calls.
	MaxToolCalls int
	// WallTime bounds the time since the session started.
	WallTime time.Duration
}

// DefaultKeepLast is how many of the newest chunks a compaction keeps when
// the workflow does not say.
const DefaultKeepLast = 4

// Compaction says when the agent worker compacts a session's transcript:
// before a turn whose context is estimated above MaxContextTokens
// (session.ContextTokens), everything but the last KeepLast chunks is
// replaced by an extractive summary (a rath.transcript.compacted event).
type Compaction struct {
	MaxContextTokens int64
	// KeepLast is how many of the newest chunks stay verbatim (0:
	// DefaultKeepLast).
	KeepLast int
}

// Keep returns KeepLast, or DefaultKeepLast when it is 0.
func (c Compaction) Keep() int {
	if c.KeepLast > 0 {
		return c.KeepLast
	}
	return DefaultKeepLast
}

// StopCondition closes the session with outcome OutcomeStopped when When
// holds.
type StopCondition struct {
	Name   string
	When   string
	Reason string

	when *expr.Program
}

// Path returns the file name the workflow was parsed with.
func (w *Workflow) Path() string { return w.path }

// Hash identifies the exact bytes of the workflow file: "sha256:" and the hex
// digest. Sessions record it (rath.session.started workflow_hash) so a replay
// can tell which version of a workflow routed them.
func (w *Workflow) Hash() string {
	sum := sha256.Sum256(w.source)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Agent returns the agent with the given name.
func (w *Workflow) Agent(name string) (Agent, bool) {
	for _, a := range w.Agents {
		if a.Name == name {
			return a, true
		}
	}
	return Agent{}, false
}

// Allows reports whether the agent may call the tool, and if not, why.
func (w *Workflow) Allows(agent, tool string) (bool, string) {
	a, ok := w.Agent(agent)
	if !ok {
		return false, fmt.Sprintf("agent %q is not in workflow %s", agent, w.Name)
	}
	if !slices.Contains(a.Tools, tool) {
		return false, fmt.Sprintf("tool %s is not allowed for agent %s (allowed: %v)", tool, a.Name, a.Tools)
	}
	return true, ""
}

// MCPServer returns the MCP server with the given name.
func (w *Workflow) MCPServer(name string) (MCPServer, bool) {
	for _, s := range w.MCPServers {
		if s.Name == name {
			return s, true
		}
	}
	return MCPServer{}, false
}
