package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

const gated = `name: gated
agents:
  - name: coder
    provider: openai
    tools: [run, write_file]
  - name: reviewer
    provider: openai
    tools: [read_file, run]
rules:
  - name: go
    when: "true"
    route: {agent: coder}
gates:
  - name: push
    tools: [run]
    when: event.data.?arguments.?command.orValue([]).join(" ").startsWith("git push")
    action: git push
    approver: maintainers
  - name: reviewer-writes
    agents: [reviewer]
    approver: leads
  - name: broken
    tools: [write_file]
    when: event.data.arguments.size > 1
    approver: maintainers
`

// GateFor: per tool with a condition over the arguments, per agent, the
// first gate in file order wins, and a condition that fails holds the call.
func TestGateFor(t *testing.T) {
	w := mustParse(t, gated)
	st := &session.State{ID: "s"}
	call := func(agent, tool, args string) *events.ToolRequested {
		return &events.ToolRequested{CallID: "c1", Tool: tool, Agent: agent, Arguments: json.RawMessage(args)}
	}
	tests := []struct {
		name     string
		call     *events.ToolRequested
		gate     string
		approver string
		action   string
	}{
		{"git push by the coder", call("coder", "run", `{"command":["git","push","origin","fix"]}`), "push", "maintainers", "git push"},
		{"go test by the coder", call("coder", "run", `{"command":["go","test","./..."]}`), "", "", ""},
		{"run without arguments", call("coder", "run", ``), "", "", ""},
		{"anything by the reviewer", call("reviewer", "read_file", `{"path":"a"}`), "reviewer-writes", "leads", "read_file call"},
		{"a push by the reviewer: the first gate", call("reviewer", "run", `{"command":["git","push"]}`), "push", "maintainers", "git push"},
		{"a failing condition holds", call("coder", "write_file", `{"path":"a"}`), "broken", "maintainers", "write_file call (gate broken held the call: its condition failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := w.GateFor(st, "s", tc.call)
			if ok != (tc.gate != "") {
				t.Fatalf("gated %v (%+v), want %q", ok, m, tc.gate)
			}
			if !ok {
				return
			}
			if m.Gate != tc.gate || m.Approver != tc.approver || !strings.HasPrefix(m.Action, tc.action) {
				t.Errorf("match %+v, want gate %s approver %s action %s", m, tc.gate, tc.approver, tc.action)
			}
			if want := workflow.ApprovalID(tc.call.CallID, m.Approver, m.Action, tc.call.Arguments); m.ApprovalID != want {
				t.Errorf("approval ID %s, want %s", m.ApprovalID, want)
			}
			req := m.Request(tc.call, time.Now())
			if req.CallID != "c1" || req.Tool != tc.call.Tool || req.Gate != tc.gate || req.ApprovalID != m.ApprovalID {
				t.Errorf("request %+v", req)
			}
		})
	}
}

// ScreenFor, for a call the agent worker did not propose: a gate's agents
// condition holds whatever agent the call names (a proposer's claim), the
// other conditions as for GateFor, and the approval's ID derives from the
// request's event ID, so it differs from any the proposer could have asked.
func TestScreenFor(t *testing.T) {
	w := mustParse(t, gated)
	st := &session.State{ID: "s"}
	call := func(agent, tool, args string) *events.ToolRequested {
		return &events.ToolRequested{CallID: "c1", Tool: tool, Agent: agent, Arguments: json.RawMessage(args)}
	}
	tests := []struct {
		name string
		call *events.ToolRequested
		gate string
	}{
		{"a push claimed by the coder", call("coder", "run", `{"command":["git","push"]}`), "push"},
		{"a read claimed by the coder: the reviewer's gate holds it", call("coder", "read_file", `{"path":"a"}`), "reviewer-writes"},
		{"a read by no agent", call("", "read_file", `{"path":"a"}`), "reviewer-writes"},
		{"go test claimed by the coder: the reviewer's gate holds any call", call("coder", "run", `{"command":["go","test"]}`), "reviewer-writes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := w.ScreenFor(st, "s", "ev-1", tc.call)
			if !ok || m.Gate != tc.gate {
				t.Fatalf("gated %v by %q, want %q", ok, m.Gate, tc.gate)
			}
			if want := workflow.ApprovalID("ev-1", m.Approver, m.Action, tc.call.Arguments); m.ApprovalID != want {
				t.Errorf("approval ID %s, want %s", m.ApprovalID, want)
			}
			if byCall, _ := w.GateFor(st, "s", tc.call); byCall.ApprovalID == m.ApprovalID {
				t.Errorf("the screened approval's ID %s is the one the call's proposer derives", m.ApprovalID)
			}
		})
	}
	onlyPush := mustParse(t, strings.Replace(gated, "  - name: reviewer-writes\n    agents: [reviewer]\n    approver: leads\n", "", 1))
	if m, ok := onlyPush.ScreenFor(st, "s", "ev-1", call("coder", "run", `{"command":["go","test"]}`)); ok {
		t.Errorf("an ungated call screened as gated: %+v", m)
	}
}

// No gate holds a call its caller runs, however a gate would hold the same
// call run by Rath: no Rath runner would wait for the approval.
func TestNoGateHoldsACallersCall(t *testing.T) {
	w := mustParse(t, gated)
	st := &session.State{ID: "s"}
	push := &events.ToolRequested{CallID: "c1", Tool: "run", Agent: "reviewer", Arguments: json.RawMessage(`{"command":["git","push"]}`), Runner: events.RunnerCaller}
	if m, ok := w.GateFor(st, "s", push); ok {
		t.Errorf("GateFor holds a caller-run call: %+v", m)
	}
	if m, ok := w.ScreenFor(st, "s", "ev-1", push); ok {
		t.Errorf("ScreenFor holds a caller-run call: %+v", m)
	}
	push.Runner = ""
	if _, ok := w.GateFor(st, "s", push); !ok {
		t.Error("the same call, run by Rath, is not held")
	}
}

// The approval ID is a function of the call ID, approver, action and
// arguments, and of each of them.
func TestApprovalID(t *testing.T) {
	base := workflow.ApprovalID("c1", "maintainers", "git push", json.RawMessage(`{"command":["git","push"]}`))
	if again := workflow.ApprovalID("c1", "maintainers", "git push", json.RawMessage(`{"command":["git","push"]}`)); again != base {
		t.Fatalf("not deterministic: %s %s", base, again)
	}
	for _, other := range []string{
		workflow.ApprovalID("c2", "maintainers", "git push", json.RawMessage(`{"command":["git","push"]}`)),
		workflow.ApprovalID("c1", "leads", "git push", json.RawMessage(`{"command":["git","push"]}`)),
		workflow.ApprovalID("c1", "maintainers", "push", json.RawMessage(`{"command":["git","push"]}`)),
		workflow.ApprovalID("c1", "maintainers", "git push", json.RawMessage(`{"command":["git","push","-f"]}`)),
	} {
		if other == base {
			t.Errorf("%s collides", other)
		}
	}
}

func TestGateProblems(t *testing.T) {
	base := "name: w\nagents:\n  - name: coder\n    provider: openai\n    tools: [run]\nrules:\n  - name: go\n    when: \"true\"\n    route: {agent: coder}\ngates:\n"
	tests := []struct {
		name, gates string
		want        workflow.Problem
	}{
		{"no condition", "  - name: g\n    approver: m\n", workflow.Problem{Line: 11, Field: "gates[0]", Message: "a gate needs tools, agents or when"}},
		{"no approver", "  - name: g\n    tools: [run]\n", workflow.Problem{Line: 11, Field: "gates[0].approver", Message: "required"}},
		{"unknown agent", "  - name: g\n    agents: [coderr]\n    approver: m\n", workflow.Problem{Line: 12, Field: "gates[0].agents[0]", Message: `"coderr" is not an agent`}},
		{"nobody's tool", "  - name: g\n    tools: [shell]\n    approver: m\n", workflow.Problem{Line: 12, Field: "gates[0].tools[0]", Message: `"shell" is no agent's tool`}},
		{"bad CEL", "  - name: g\n    when: event.dat\n    approver: m\n", workflow.Problem{Line: 12, Field: "gates[0].when", Message: `event has no field "dat"`}},
		{"bad on_timeout", "  - name: g\n    tools: [run]\n    approver: m\n    timeout: 1m\n    on_timeout: wait\n", workflow.Problem{Line: 11, Field: "gates[0].on_timeout", Message: `"wait" is not reject, close or escalate`}},
		{"on_timeout without timeout", "  - name: g\n    tools: [run]\n    approver: m\n    on_timeout: close\n", workflow.Problem{Line: 11, Field: "gates[0].on_timeout", Message: "needs a timeout"}},
		{"escalate without a role", "  - name: g\n    tools: [run]\n    approver: m\n    timeout: 1m\n    on_timeout: escalate\n", workflow.Problem{Line: 11, Field: "gates[0].escalate_to", Message: "on_timeout escalate and escalate_to go together"}},
		{"unknown field", "  - name: g\n    tool: run\n    approver: m\n", workflow.Problem{Line: 12, Field: "gates[0].tool", Message: "unknown field (fields: name, tools, agents, when, action, approver, timeout, on_timeout, escalate_to, escalate_timeout)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := workflow.Parse([]byte(base+tc.gates), "w.yaml")
			var se *workflow.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err %v, want a SpecError", err)
			}
			for _, p := range se.Problems {
				if p.Line == tc.want.Line && p.Field == tc.want.Field && strings.HasPrefix(p.Message, tc.want.Message) {
					return
				}
			}
			t.Fatalf("problems %+v, want %+v", se.Problems, tc.want)
		})
	}
}

// A gate with a timeout asks with a deadline, rounded up to the second, and
// an escalation's deadline follows the first.
func TestGateTimeoutSetsTheDeadlines(t *testing.T) {
	m := workflow.Match{Gate: "push", Action: "git push", Approver: "maintainers", ApprovalID: "ap-1",
		Expiry: workflow.Expiry{Timeout: 30 * time.Minute, OnTimeout: events.TimeoutEscalate, EscalateTo: "leads", EscalateTimeout: time.Hour}}
	now := time.Date(2026, 1, 5, 9, 0, 0, 300_000_000, time.UTC)
	req := m.Request(&events.ToolRequested{CallID: "c1", Tool: "run"}, now)
	if req.Deadline != "2026-01-05T09:30:01Z" || req.OnTimeout != events.TimeoutEscalate ||
		req.EscalateTo != "leads" || req.EscalateDeadline != "2026-01-05T10:30:01Z" {
		t.Errorf("request %+v", req)
	}
	m.OnTimeout, m.EscalateTo = "", ""
	if req := m.Request(&events.ToolRequested{CallID: "c1", Tool: "run"}, now); req.OnTimeout != events.TimeoutReject || req.EscalateTo != "" {
		t.Errorf("default on_timeout: %+v", req)
	}
	m.Timeout = 0
	if req := m.Request(&events.ToolRequested{CallID: "c1", Tool: "run"}, now); req.Deadline != "" || req.OnTimeout != "" {
		t.Errorf("no timeout: %+v", req)
	}
}
