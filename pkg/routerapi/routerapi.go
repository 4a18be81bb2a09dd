// Package routerapi is the request/reply contract between the selector and a
// served router: a program that chooses the route of a workflow rule whose
// route is {router: NAME} (docs/workflows.md, docs/protocol.md "Serving a
// router", ADR 0029). The selector asks; the program answers; the selector
// checks the answer against the workflow and records it as its own
// decision, so there is still one decider per trigger (ADR 0008).
//
// pkg/agentserver serves a router written in Go (ServeRouter); a program in
// another language subscribes to the subject with the queue group and
// answers the JSON below.
package routerapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/openrath/rath/pkg/events"
)

// Subject is where the selector asks the router name about a session of
// tenant: rath.route.<tenant>.<name> (events.RouteSubject).
func Subject(tenant, name string) string { return events.RouteSubject(tenant, name) }

// Filter is the subscription of a router serving every tenant's sessions:
// rath.route.*.<name>.
func Filter(name string) string { return events.RouteFilter(name) }

// Queue is the queue group every process serving the router name joins, so
// that each question is answered by one of them: "router-" and the name.
func Queue(name string) string { return "router-" + name }

var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ErrBadName is returned by ValidateName for a name no router can have.
var ErrBadName = errors.New("invalid router name")

// ValidateName reports whether name can name a router: 1 to 64 letters,
// digits and _, not starting with a digit (one subject token, no
// wildcards; the form of an agent's name).
func ValidateName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("router %q: %w: want 1-64 letters, digits and _, not starting with a digit", name, ErrBadName)
	}
	return nil
}

// Request is what the selector asks: route this session after this event,
// for this rule. Event and State are what the rule's own when expression
// read (the activation: the trigger, and the session folded up to and
// including it), so a router decides on the inputs a YAML rule decides on.
type Request struct {
	// Router is the router's name (the rule's route.router).
	Router string `json:"router"`
	// Session and Tenant name the session routed.
	Session string `json:"session"`
	Tenant  string `json:"tenant"`
	// Workflow is the session's workflow name; Rule the rule that asked.
	Workflow string `json:"workflow"`
	Rule     string `json:"rule"`
	// Agents are the workflow's agents, in file order: the names an answer
	// may route to.
	Agents []string `json:"agents"`
	Event  Event    `json:"event"`
	State  State    `json:"state"`
}

// Event is the triggering event, as a rule's expression sees it.
type Event struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Session string          `json:"session"`
	Seq     uint64          `json:"seq"`
	Data    json.RawMessage `json:"data"`
}

// State is the session folded up to and including the trigger, as a rule's
// expression sees it (docs/workflows.md, "Expressions"). It is bounded by
// the session's decisions and open work, never its transcript: a router
// that needs the transcript reads it with pkg/client.
type State struct {
	Status            string            `json:"status"`
	Task              string            `json:"task"`
	LastAgent         string            `json:"last_agent"`
	TurnInFlight      bool              `json:"turn_in_flight"`
	Turns             int64             `json:"turns"`
	TurnsFailed       int64             `json:"turns_failed"`
	ToolCalls         int64             `json:"tool_calls"`
	ModelCalls        int64             `json:"model_calls"`
	Events            int64             `json:"events"`
	TokensIn          int64             `json:"tokens_in"`
	TokensOut         int64             `json:"tokens_out"`
	Tokens            int64             `json:"tokens"`
	ValidationsFailed int64             `json:"validations_failed"`
	ValidationsPassed int64             `json:"validations_passed"`
	Parent            string            `json:"parent"`
	ForkSeq           int64             `json:"fork_seq"`
	ForkDepth         int64             `json:"fork_depth"`
	Seq               int64             `json:"seq"`
	Labels            map[string]string `json:"labels"`
	AgentTurns        map[string]int64  `json:"agent_turns"`
	Decisions         []Decision        `json:"decisions"`
	OpenWork          []Work            `json:"open_work"`
	Experiments       []Experiment      `json:"experiments"`
}

// Decision is a routing decision in the session's log, oldest first.
type Decision struct {
	Seq   int64  `json:"seq"`
	Rule  string `json:"rule"`
	Route string `json:"route"`
}

// Experiment is an experiment recorded in the session
// (rath.experiment.recorded), oldest first: its configuration and the
// metrics the program reported; OK is an exit code of 0 and no problem
// with its report.
type Experiment struct {
	Seq      int64              `json:"seq"`
	Name     string             `json:"name"`
	Agent    string             `json:"agent"`
	OK       bool               `json:"ok"`
	ExitCode int64              `json:"exit_code"`
	Metrics  map[string]float64 `json:"metrics"`
	Config   map[string]any     `json:"config"`
	Commit   string             `json:"commit"`
	Problem  string             `json:"problem"`
}

// Work is work the session owes (rath.work.pending not yet done).
type Work struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Description string `json:"description"`
	Assignee    string `json:"assignee"`
	Seq         int64  `json:"seq"`
}

// Answer is the router's answer: exactly one of Agent, Close and Fork, or
// Error. The selector refuses anything else, and an agent the workflow
// does not define, as it refuses such a route in a workflow file.
type Answer struct {
	// Agent requests the next turn of that agent.
	Agent string `json:"agent,omitempty"`
	// Close closes the session.
	Close *Close `json:"close,omitempty"`
	// Fork forks the session (and closes it as superseded).
	Fork *Fork `json:"fork,omitempty"`
	// Reason is recorded with the decision (and is a close's reason);
	// empty: the close's own reason, else the rule's.
	Reason string `json:"reason,omitempty"`
	// Error says the router cannot route this trigger; the selector takes
	// the rule's fallback, or records the refusal.
	Error string `json:"error,omitempty"`
}

// Close closes the session with an outcome.
type Close struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// Fork forks the session at a sequence of its log (0: the trigger's), and
// gives the fork's first turn to Agent (empty: the rules route the fork).
type Fork struct {
	At    uint64 `json:"at,omitempty"`
	Agent string `json:"agent,omitempty"`
}

// Kind returns which route the answer is ("agent", "close" or "fork"), or
// an error naming what is wrong with its shape: an error answer, no route,
// more than one, or a close without an outcome. It does not know the
// workflow: the selector checks the agent and the fork point.
func (a Answer) Kind() (string, error) {
	if a.Error != "" {
		return "", fmt.Errorf("the router answered an error: %s", a.Error)
	}
	var kinds []string
	if a.Agent != "" {
		kinds = append(kinds, "agent")
	}
	if a.Close != nil {
		kinds = append(kinds, "close")
	}
	if a.Fork != nil {
		kinds = append(kinds, "fork")
	}
	switch {
	case len(kinds) == 0:
		return "", errors.New("the answer names no route (want one of agent, close, fork)")
	case len(kinds) > 1:
		return "", fmt.Errorf("the answer names %d routes %v (want exactly one of agent, close, fork)", len(kinds), kinds)
	case kinds[0] == "close" && a.Close.Outcome == "":
		return "", errors.New("the answer closes the session without an outcome")
	}
	return kinds[0], nil
}
