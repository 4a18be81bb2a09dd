package dossier

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A task whose environment is a domain served by tools (rath demo support's
// shop) leaves three kinds of evidence that this section of the dossier
// reads, all from the events:
//
//   - a conversation: the turns of several agents, one of them simulating
//     the user;
//   - state changes: a tool call whose result is a JSON object with a
//     "state_changes" list of {path, before, after} (the shape of
//     domainstate.Change) says what the call changed in the domain;
//   - a grade: validations whose details hold "policy_decisions" (each
//     {call_id, tool, seq, decision, rule, detail}) and "differences"
//     (each {path, expected, actual, text}).
//
// Dossiers of other runs have none of these, and their Markdown has no such
// section.

// StateChange is one value a tool call changed in its domain.
type StateChange struct {
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// StateChanges returns the state changes a tool call's result records (nil
// when it records none).
func StateChanges(t ToolCall) []StateChange {
	var r struct {
		StateChanges []StateChange `json:"state_changes"`
	}
	if t.Status != ToolCompleted || !strings.HasPrefix(strings.TrimSpace(t.Result), "{") || json.Unmarshal([]byte(t.Result), &r) != nil {
		return nil
	}
	return r.StateChanges
}

// PolicyDecision is a grade's decision about one tool call.
type PolicyDecision struct {
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Seq      uint64 `json:"seq"`
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// gradeDetails are the details of a grade's validations.
type gradeDetails struct {
	Policy      []PolicyDecision `json:"policy_decisions"`
	Differences []struct {
		Text string `json:"text"`
	} `json:"differences"`
	Violations []string `json:"violations"`
}

func grade(v Validation) (gradeDetails, bool) {
	var g gradeDetails
	if len(v.Details) == 0 || json.Unmarshal(v.Details, &g) != nil || g.Policy == nil {
		return g, false
	}
	return g, true
}

// hasDomain reports whether the dossier holds a graded domain task.
func hasDomain(d *Dossier) bool {
	for _, v := range d.Validations {
		if _, ok := grade(v); ok {
			return true
		}
	}
	return slices.ContainsFunc(d.ToolCalls, func(t ToolCall) bool { return len(StateChanges(t)) > 0 })
}

// domainSection tells a graded domain task: per branch, the conversation
// with each tool call and what it changed, the state changes, the policy's
// decisions and the grade.
func domainSection(w func(string, ...any), d *Dossier, n namer) {
	if !hasDomain(d) {
		return
	}
	w("\n## The conversation, its state changes and its grade\n\n")
	w("What each agent said, in log order, with the tool calls it made: a call's state changes are what its result recorded (`state_changes`), and the grade is the validations whose details review the run (the final state against the task's, the policy's decision about each call).\n\n")
	for _, b := range d.Branches {
		if len(d.Branches) > 1 {
			w("### %s\n\n", n.of(b.ID))
		}
		conversation(w, d, b, n)
		changes(w, d, b, n)
		policy(w, d, b, n)
	}
}

func conversation(w func(string, ...any), d *Dossier, b Branch, n namer) {
	w("**Conversation**\n\n")
	calls := map[string][]ToolCall{}
	for _, t := range d.ToolCalls {
		if t.Branch == b.ID {
			calls[t.TurnID] = append(calls[t.TurnID], t)
		}
	}
	for _, t := range d.Turns {
		if t.Branch != b.ID || t.Status != TurnCompleted {
			continue
		}
		answer := strings.TrimSpace(t.Answer)
		if answer == "" {
			answer = "(no text)"
		}
		w("- seq %d, **%s**: %s\n", t.Seq, inline(t.Agent, 80), inline(n.text(answer), 600))
		for _, c := range calls[t.TurnID] {
			w("  - %s %s → %s\n", code(c.Tool), code(oneLine(string(c.Arguments), 200)), callOutcome(c))
		}
	}
	w("\n")
}

// callOutcome is a call's end in a few words: its result's message, its
// changes, or why it failed.
func callOutcome(c ToolCall) string {
	switch c.Status {
	case ToolFailed:
		return "**failed**: " + inline(c.Error, 300)
	case ToolCompleted:
	default:
		return c.Status
	}
	var r struct {
		Message string `json:"message"`
	}
	text := c.Result
	if json.Unmarshal([]byte(c.Result), &r) == nil && r.Message != "" {
		text = r.Message
	}
	out := inline(oneLine(text, 200), 200)
	if cs := StateChanges(c); len(cs) > 0 {
		out += fmt.Sprintf(" (%s)", plural(len(cs), "state change"))
	}
	return out
}

func changes(w func(string, ...any), d *Dossier, b Branch, n namer) {
	w("**State changes**\n\n")
	found := false
	for _, t := range d.ToolCalls {
		cs := StateChanges(t)
		if t.Branch != b.ID || len(cs) == 0 {
			continue
		}
		if !found {
			w("By call, in the order the calls were requested (the order the domain applies them in); seq is the call's request.\n\n")
			w("| seq | call | tool | by | path | before | after |\n|---|---|---|---|---|---|---|\n")
			found = true
		}
		for _, c := range cs {
			w("| %d | %s | %s | %s | %s | %s | %s |\n", t.Seq, cell(inline(t.CallID, 80)), cell(inline(t.Tool, 80)),
				cell(inline(orDash(t.Agent), 80)), cellCode(c.Path), cellCode(orDash(string(c.Before))), cellCode(orDash(string(c.After))))
		}
	}
	if !found {
		w("No tool call changed the state.\n")
	}
	w("\n")
}

func policy(w func(string, ...any), d *Dossier, b Branch, n namer) {
	var graded []Validation
	for _, v := range d.Validations {
		if _, ok := grade(v); ok && v.Branch == b.ID {
			graded = append(graded, v)
		}
	}
	if len(graded) == 0 {
		w("**Grade**\n\nNot graded.\n\n")
		return
	}
	g, _ := grade(graded[len(graded)-1])
	w("**Policy decisions**\n\n")
	if len(g.Policy) == 0 {
		w("No call of the domain's tools.\n\n")
	} else {
		w("| seq | call | tool | decision | rule | detail |\n|---|---|---|---|---|---|\n")
		for _, p := range g.Policy {
			w("| %d | %s | %s | %s | %s | %s |\n", p.Seq, cell(inline(p.CallID, 80)), cell(inline(p.Tool, 80)),
				cell(inline(p.Decision, 40)), cell(inline(orDash(p.Rule), 120)), cell(inline(orDash(n.text(p.Detail)), 300)))
		}
		w("\n")
	}
	w("**Grade**\n\n")
	for _, v := range graded {
		verdict := "passed"
		if !v.Passed {
			verdict = "**failed**"
		}
		w("- validation %s %s at seq %d", code(v.Validator), verdict, v.Seq)
		if v.Target != "" {
			w(" (%s)", code(oneLine(v.Target, 120)))
		}
		if v.Reason != "" {
			w(": %s", inline(n.text(v.Reason), 600))
		}
		w("\n")
	}
	for _, diff := range g.Differences {
		w("  - differs: %s\n", inline(diff.Text, 300))
	}
	for _, v := range g.Violations {
		w("  - violation: %s\n", inline(v, 300))
	}
	w("\n")
}

// cellCode is s as a code span in a table cell: GFM reads a pipe as the
// cell's end even in a code span unless it is escaped, and shows the
// escaped pipe as a pipe.
func cellCode(s string) string {
	return cell(code(strings.ReplaceAll(oneLine(s, 300), "|", `\|`)))
}
