package selector

import (
	"testing"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

// decideSpec has a rule of every route kind, a stop condition and a budget,
// each on its own trigger, so that every outcome of decide is one row.
const decideSpec = `
name: decide
memory:
  scope: project:demo
agents:
  - name: researcher
    provider: openai
    model: gpt-test
  - name: coder
    provider: openai
    model: gpt-test
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: researcher}
  - name: done
    when: event.type == "rath.conversation.chunk.appended" && event.data.content == "done"
    route: {close: {outcome: succeeded, reason: all done}}
  - name: ask
    when: event.type == "rath.conversation.chunk.appended" && event.data.content == "ask"
    route: {router: triage}
  - name: deploy
    when: event.type == "rath.conversation.chunk.appended" && event.data.content == "deploy"
    route: {approval: {action: deploy the build, approver: maintainers}}
  - name: broken
    when: event.type == "rath.validation.passed" && event.data.validator == "broken" && event.data.nope == "x"
    route: {agent: coder}
  - name: remember
    when: event.type == "rath.validation.failed" && event.data.validator == "lint"
    route:
      memory:
        content: '"Failure pattern: " + event.data.reason'
        tags: [failure-pattern]
        evidence: validation_signal
  - name: retry
    when: event.type == "rath.validation.failed" && event.data.validator == "tests"
    route: {fork: {agent: coder, reason: try again}}
stop:
  - name: halt
    when: event.type == "rath.validation.passed" && event.data.validator == "halt"
    reason: halted
  - name: stuck
    when: event.type == "rath.validation.passed" && event.data.validator == "stuck" && event.data.nope == "x"
budgets:
  max_tool_calls: 2
`

// Every outcome route's decision can have, from the state at the trigger
// and the head, with no bus: what is recorded (rule, route string, reason),
// a question for a router, nothing, or a permanent error.
func TestDecide(t *testing.T) {
	wf, err := workflow.Parse([]byte(decideSpec), "decide.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(content string) *events.ChunkAppended {
		return &events.ChunkAppended{Role: events.RoleUser, Content: content}
	}
	idle := &events.TurnCompleted{TurnID: "t1", Agent: "coder"}
	call2 := &events.ToolRequested{CallID: "c2", Tool: "run", Agent: "coder"}
	tests := []struct {
		name  string
		given []any // the session up to and including the trigger
		head  []any // events stored after the trigger
		rule  string
		route string
		// reason is the recorded reason; "" when not checked.
		reason  string
		content string // a memory route's
		ask     string // the router asked
		err     bool
	}{
		{name: "agent turn", given: []any{started}, rule: "start", route: "agent:researcher"},
		{name: "agent turn while another is in flight", given: []any{started}, head: []any{requested}},
		{name: "close", given: []any{started, chunk("done")}, rule: "done", route: "close:succeeded", reason: "all done"},
		{name: "fork at the trigger", given: []any{started, &events.ValidationFailed{Validator: "tests"}}, rule: "retry", route: "fork:coder@2", reason: "try again"},
		{name: "approval", given: []any{started, chunk("deploy")}, rule: "deploy", route: "approval:deploy the build"},
		{name: "memory", given: []any{started, &events.ValidationFailed{Validator: "lint", Reason: "flaky"}}, rule: "remember", route: "memory:project:demo", content: "Failure pattern: flaky"},
		{name: "memory while tools are pending", given: []any{started, requested, callRun, &events.ValidationFailed{Validator: "lint", Reason: "flaky"}}, rule: "remember", route: "memory:project:demo"},
		{name: "no fork while tools are pending", given: []any{started, requested, callRun, &events.ValidationFailed{Validator: "tests"}}},
		{name: "router", given: []any{started, chunk("ask")}, ask: "triage"},
		{name: "stop condition", given: []any{started, &events.ValidationPassed{Validator: "halt"}}, rule: "stop:halt", route: "close:stopped", reason: "halted"},
		{name: "budget", given: []any{started, requested, callRun, runStart, runDone, call2, chunk("done")}, rule: RuleBudget, route: "close:budget_exceeded", reason: "budget max_tool_calls=2 reached (2 tool calls)"},
		{
			name:  "approval expired",
			given: []any{started, &events.ApprovalRequested{ApprovalID: "a1", Action: "release"}, &events.ApprovalExpired{ApprovalID: "a1", Deadline: "noon", OnTimeout: events.TimeoutClose}},
			rule:  RuleTimeout, route: "close:" + OutcomeApprovalExpired, reason: "approval a1 expired at noon undecided by anyone: release",
		},
		{name: "approval expired, rejected", given: []any{started, &events.ApprovalRequested{ApprovalID: "a1", Action: "release"}, &events.ApprovalExpired{ApprovalID: "a1", Deadline: "noon", OnTimeout: events.TimeoutReject}}},
		{name: "continue", given: []any{started, requested, callRun, completed, runStart, runDone}, rule: RuleContinue, route: "agent:coder"},
		{name: "continue already decided", given: []any{started, requested, callRun, completed, runStart, runDone}, head: []any{&events.SelectorDecided{Rule: RuleContinue, Route: "agent:coder"}}},
		{name: "correction", given: []any{started, requested, idle, &events.ChunkAppended{Role: events.RoleUser, Content: "no", Correction: true}}, rule: RuleCorrection, route: "agent:coder"},
		{name: "turn failed", given: []any{started, requested, &events.TurnFailed{TurnID: "t1", Agent: "coder", Error: "boom"}}, rule: RuleTurnFailed, route: "close:" + OutcomeTurnFailed, reason: "turn t1 of coder failed and no rule routes a failed turn: boom"},
		{name: "nothing to route", given: []any{started, requested, idle}},
		{name: "a rule that fails to evaluate", given: []any{started, &events.ValidationPassed{Validator: "broken"}}, err: true},
		{name: "a stop condition that fails to evaluate", given: []any{started, &events.ValidationPassed{Validator: "stuck"}}, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at, ev := folded(t, tc.given...)
			head, _ := folded(t, append(append([]any{}, tc.given...), tc.head...)...)
			d, err := decide(at, head, wf, ev)
			if tc.err {
				if !consume.IsPermanent(err) {
					t.Fatalf("decide = %+v, %v; want a permanent error", d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.ask != "" {
				if d.ask == nil || d.ask.Route.Router != tc.ask || d.event != nil {
					t.Fatalf("decide = %+v; want a question to router %s", d, tc.ask)
				}
				return
			}
			if tc.rule == "" {
				if d.event != nil || d.ask != nil {
					t.Fatalf("decide = %+v %+v; want nothing", d, d.event)
				}
				return
			}
			if d.event == nil {
				t.Fatalf("decide = %+v; want rule %s routing %s", d, tc.rule, tc.route)
			}
			e := d.event
			if e.Rule != tc.rule || e.Route != tc.route || d.p.route() != tc.route || (tc.reason != "" && e.Reason != tc.reason) {
				t.Fatalf("decided %+v (plan %+v); want rule %s, route %s, reason %q", e, d.p, tc.rule, tc.route, tc.reason)
			}
			if agent := d.p.kind == workflow.RouteAgent; (e.TurnID != "") != agent || agent && e.Agent != d.p.agent {
				t.Fatalf("decided %+v: an agent route names its agent and turn, others neither", e)
			}
			if tc.content != "" && d.p.content != tc.content {
				t.Fatalf("memory content %q, want %q", d.p.content, tc.content)
			}
		})
	}
}
