package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/workflow/expr"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Gate holds the tool calls it matches until an approver allows them: the
// agent worker records a matched call together with its approval request
// (rath.approval.requested), and no runner executes the call before the
// approval is granted; a rejection fails it with the reason.
//
// A gate matches a call when every condition it sets holds: the call's tool
// is one of Tools, its agent one of Agents, and When yields true. A gate
// sets at least one of them.
type Gate struct {
	// Name is unique among the workflow's gates and recorded with each
	// approval the gate asks for.
	Name string
	// Tools and Agents, if set, restrict the gate to calls of these tools
	// and by these agents.
	Tools  []string
	Agents []string
	// When, if set, is a CEL expression over event (the call's
	// rath.tool.call.requested, not yet stored: event.id is the call's ID
	// and event.seq is 0) and state
	// (the session before the answer that makes the call) yielding a bool:
	// `event.data.?arguments.?command.orValue([]).join(" ").startsWith("git push")`.
	When string
	// Action says what is approved, for the approver; empty: "<tool> call".
	Action string
	// Approver is the role asked to decide ("maintainers").
	Approver string
	// Expiry is how long the approval may wait undecided, and what follows.
	Expiry

	when *expr.Program
}

// Match is a gate that holds one tool call: the approval to ask for.
type Match struct {
	Gate     string
	Action   string
	Approver string
	// ApprovalID is the approval's ID (ApprovalID).
	ApprovalID string
	// Expiry is the gate's.
	Expiry
	// Err is set when the gate's When failed to evaluate: the gate holds
	// the call anyway (a gate fails closed), and Action says why.
	Err error
}

// Request is the approval request the match asks for, for call, asked at
// now: with a timeout, its deadline is now plus the timeout (rounded up to
// the second), and an escalation's deadline follows it.
func (m Match) Request(call *events.ToolRequested, now time.Time) *events.ApprovalRequested {
	r := &events.ApprovalRequested{ApprovalID: m.ApprovalID, Action: m.Action, Approver: m.Approver,
		CallID: call.CallID, Tool: call.Tool, Gate: m.Gate}
	m.Expiry.apply(r, now)
	return r
}

// Expiry is how long an approval may wait undecided and what follows, for
// a gate or a rule's approval route. With a Timeout, a durable timer records
// its expiry and OnTimeout applies: reject (the default: a gated call fails
// and the agent goes on), close (the session is closed), or escalate
// (EscalateTo is asked for EscalateTimeout, default Timeout, after which the
// approval expires and rejects).
type Expiry struct {
	Timeout         time.Duration
	OnTimeout       string
	EscalateTo      string
	EscalateTimeout time.Duration
}

// apply gives r, asked at now, the deadline e sets (none without a
// Timeout) and what follows it; an escalation's deadline follows the first.
func (e Expiry) apply(r *events.ApprovalRequested, now time.Time) {
	if e.Timeout <= 0 {
		return
	}
	r.Deadline, r.OnTimeout = events.DeadlineText(now.Add(e.Timeout)), e.OnTimeout
	if r.OnTimeout == "" {
		r.OnTimeout = events.TimeoutReject
	}
	if r.OnTimeout == events.TimeoutEscalate {
		next := e.EscalateTimeout
		if next == 0 {
			next = e.Timeout
		}
		d, _ := events.ParseDeadline(r.Deadline)
		r.EscalateTo, r.EscalateDeadline = e.EscalateTo, events.DeadlineText(d.Add(next))
	}
}

// expiryFields are the fields of an Expiry in a gate or an approval route.
var expiryFields = []string{"timeout", "on_timeout", "escalate_to", "escalate_timeout"}

// expiryField reads key into e if it is one of expiryFields.
func (p *parser) expiryField(e *Expiry, key string, v *yaml.Node, f string) {
	switch key {
	case "timeout":
		e.Timeout = p.Duration(v, f)
	case "on_timeout":
		e.OnTimeout = p.Str(v, f)
	case "escalate_to":
		e.EscalateTo = p.Str(v, f)
	case "escalate_timeout":
		e.EscalateTimeout = p.Duration(v, f)
	}
}

// ApprovalID derives the ID of the approval that gates a tool call from the
// call's ID, the approver role, the action and the arguments: a
// redelivered answer asks for the same approval, and an approval granted
// for one call never matches another call, or the same call with other
// arguments.
func ApprovalID(callID, approver, action string, args json.RawMessage) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(callID), []byte(approver), []byte(action), args} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return "ap-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// GateFor returns the first gate, in file order, that holds the call, with
// the approval it asks for; false when no gate does. session is the call's
// session and st its state before the answer that makes the call. A gate
// whose When fails to evaluate holds the call (Match.Err says why): a
// defect of the workflow must not let a call through unapproved. No gate
// holds a call its caller runs (events.RunnerCaller): no Rath runner runs
// it, so none would wait for the approval (session.State.GateOf).
func (w *Workflow) GateFor(st *session.State, sessionID string, call *events.ToolRequested) (Match, bool) {
	return w.gateFor(st, sessionID, call, false)
}

// ScreenFor is GateFor for a call the agent worker did not propose, which
// the tool runner screens where it is executed (ADR 0025, amendment). The
// agent such a call names is its proposer's claim, not an agent's turn: a
// gate's agents condition holds whatever agent it names, so no proposer
// slips a call past a gate by naming another agent. The call is stored
// already: requestID is its request's event ID, from which the approval's
// ID derives (as ApprovalID, in place of the call's ID), so that it is
// never one that an answer of the call's proposer asked for already.
func (w *Workflow) ScreenFor(st *session.State, sessionID, requestID string, call *events.ToolRequested) (Match, bool) {
	m, gated := w.gateFor(st, sessionID, call, true)
	if gated {
		m.ApprovalID = ApprovalID(requestID, m.Approver, m.Action, call.Arguments)
	}
	return m, gated
}

func (w *Workflow) gateFor(st *session.State, sessionID string, call *events.ToolRequested, anyAgent bool) (Match, bool) {
	if call.Runner == events.RunnerCaller {
		return Match{}, false
	}
	var act map[string]any
	for i := range w.Gates {
		g := &w.Gates[i]
		if len(g.Tools) > 0 && !slices.Contains(g.Tools, call.Tool) {
			continue
		}
		if len(g.Agents) > 0 && !anyAgent && !slices.Contains(g.Agents, call.Agent) {
			continue
		}
		m := Match{Gate: g.Name, Action: g.Action, Approver: g.Approver,
			Expiry: g.Expiry}
		if m.Action == "" {
			m.Action = call.Tool + " call"
		}
		if g.When != "" {
			if act == nil {
				var err error
				if act, err = callActivation(st, sessionID, call); err != nil {
					m.Err = err
				}
			}
			if m.Err == nil {
				held, err := g.when.Bool(act)
				if err != nil {
					m.Err = &RuleError{Rule: g.Name, Field: "when", Err: err}
				} else if !held {
					continue
				}
			}
			if m.Err != nil {
				m.Action = fmt.Sprintf("%s (gate %s held the call: its condition failed: %v)", m.Action, g.Name, m.Err)
			}
		}
		m.ApprovalID = ApprovalID(call.CallID, m.Approver, m.Action, call.Arguments)
		return m, true
	}
	return Match{}, false
}

// callActivation is the activation of a gate's When: the call as the event
// it will be stored as, and the state.
func callActivation(st *session.State, sessionID string, call *events.ToolRequested) (map[string]any, error) {
	data, err := json.Marshal(call)
	if err != nil {
		return nil, fmt.Errorf("gate activation of call %s: %w", call.CallID, err)
	}
	return Activation(st, events.Stored{ID: call.CallID, Type: events.TypeToolRequested, Session: sessionID, Data: data})
}

var gateFields = append([]string{"name", "tools", "agents", "when", "action", "approver"}, expiryFields...)

func (p *parser) gate(n *yaml.Node, field string) Gate {
	var g Gate
	p.Mapping(n, field, gateFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "name":
			g.Name = p.Str(v, f)
		case "tools":
			g.Tools = p.Strs(v, f)
		case "agents":
			g.Agents = p.Strs(v, f)
		case "when":
			g.When = p.Str(v, f)
		case "action":
			g.Action = p.Str(v, f)
		case "approver":
			g.Approver = p.Str(v, f)
		default:
			p.expiryField(&g.Expiry, key, v, f)
		}
	})
	return g
}

// validateGates checks each gate's name, that it sets a condition and names
// an approver, and that its agents exist and its tools are some agent's:
// a misspelt tool would gate nothing.
func (p *parser) validateGates(w *Workflow) {
	names := map[string]int{}
	for i, g := range w.Gates {
		f := fmt.Sprintf("gates[%d]", i)
		p.checkName(f+".name", g.Name, plainName, "gate", names)
		if len(g.Tools) == 0 && len(g.Agents) == 0 && g.When == "" {
			p.Add(p.Line(f), f, "a gate needs tools, agents or when: it would hold every tool call")
		}
		if g.Approver == "" {
			p.Add(p.Line(f), f+".approver", "required")
		}
		p.checkExpiry(f, g.Expiry)
		for j, a := range g.Agents {
			p.checkAgent(w, fmt.Sprintf("%s.agents[%d]", f, j), a, true)
		}
		for j, t := range g.Tools {
			if !slices.ContainsFunc(w.Agents, func(a Agent) bool { return slices.Contains(a.Tools, t) }) {
				tf := fmt.Sprintf("%s.tools[%d]", f, j)
				p.Add(p.Line(tf), tf, "%q is no agent's tool: the gate would hold nothing", t)
			}
		}
	}
}

// checkExpiry checks the expiry of a gate or an approval route at f: what
// follows the timeout, which needs one, and an escalation's role and
// timeout, which go with escalate only.
func (p *parser) checkExpiry(f string, e Expiry) {
	timeout, onTimeout, escalateTo, escalateTimeout := e.Timeout, e.OnTimeout, e.EscalateTo, e.EscalateTimeout
	switch onTimeout {
	case "", events.TimeoutReject, events.TimeoutClose, events.TimeoutEscalate:
	default:
		p.Add(p.Line(f), f+".on_timeout", "%q is not reject, close or escalate", onTimeout)
	}
	if onTimeout != "" && timeout == 0 {
		p.Add(p.Line(f), f+".on_timeout", "needs a timeout")
	}
	if (onTimeout == events.TimeoutEscalate) != (escalateTo != "") {
		p.Add(p.Line(f), f+".escalate_to", "on_timeout escalate and escalate_to go together")
	}
	if escalateTimeout > 0 && onTimeout != events.TimeoutEscalate {
		p.Add(p.Line(f), f+".escalate_timeout", "only with on_timeout escalate")
	}
}

// Call is one tool call of an agent's answer, as its model or its Go
// program named it.
type Call struct {
	ID        string
	Tool      string
	Arguments json.RawMessage
}

// Recorded is one event of an answer: its data, and what it records (the
// last part of its derived ID).
type Recorded struct {
	What string
	Data any
}

// CallEvents returns the events that record an answer's tool calls, in
// order: each call's rath.tool.call.requested, after its
// rath.approval.requested when a gate holds it (ADR 0025). A call keeps its
// ID unless it has none or the session or the answer already has a call of
// that ID: then it is named after the turn. st is the session's state
// before the answer; held, when not nil, hears of each gate whose condition
// failed (it holds the call).
func (w *Workflow) CallEvents(st *session.State, sessionID, turnID, agent string, calls []Call, now time.Time, held func(callID string, m Match)) []Recorded {
	var out []Recorded
	used := make(map[string]bool, len(calls))
	for i, call := range calls {
		id := call.ID
		if _, taken := st.Tools[id]; id == "" || taken || used[id] {
			id = fmt.Sprintf("%s-%d", turnID, i)
		}
		used[id] = true
		req := &events.ToolRequested{CallID: id, Tool: call.Tool, Arguments: call.Arguments, Agent: agent}
		if m, gated := w.GateFor(st, sessionID, req); gated {
			if m.Err != nil && held != nil {
				held(id, m)
			}
			req.ApprovalID = m.ApprovalID
			out = append(out, Recorded{What: fmt.Sprintf("approval-%d", i), Data: m.Request(req, now)})
		}
		out = append(out, Recorded{What: fmt.Sprintf("tool-%d", i), Data: req})
	}
	return out
}
