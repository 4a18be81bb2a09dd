package dossier

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// Kinds of an Intervention.
const (
	InterventionGranted  = "granted"
	InterventionRejected = "rejected"
	// InterventionExpired is an approval nobody decided in time: its
	// timer recorded the expiry (rath.approval.expired; Actor is the
	// timer's service, Text what the expiry did).
	InterventionExpired = "expired"
	// InterventionSaid is a person's message to the agents, marked
	// correction (rath fork --say).
	InterventionSaid = "said"
	// InterventionResult is a tool call's result a person gave in place of
	// the tool's (rath fork --tool-result).
	InterventionResult = "tool_result"
)

// Intervention is a person in the loop: an approval granted or rejected, or
// a correction (a message, or a tool result given in place of the tool's),
// with who made it (Actor, the ledger's stamp), what it was about and what
// followed. It belongs to the branch that stored its event.
type Intervention struct {
	At
	Kind  string `json:"kind"`
	Actor string `json:"actor,omitempty"`
	// ApprovalID, Action, Approver and Requested are the approval decided
	// and its request (for granted and rejected).
	ApprovalID string `json:"approval_id,omitempty"`
	Action     string `json:"action,omitempty"`
	Approver   string `json:"approver,omitempty"`
	Requested  *Ref   `json:"requested,omitempty"`
	// CallID, Tool and Arguments are the tool call decided or corrected.
	CallID    string          `json:"call_id,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Text is the grant's comment, the rejection's reason, the message, or
	// the result given.
	Text string `json:"text,omitempty"`
	// Call is how the call ended after the decision (nil: not in the log).
	Call *CallEnd `json:"call,omitempty"`
	// Next is the first agent turn the branch's log requested after it (nil:
	// none).
	Next *NextTurn `json:"next,omitempty"`
}

// CallEnd is where and how a tool call ended.
type CallEnd struct {
	Ref
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
}

// NextTurn is a turn requested after an intervention.
type NextTurn struct {
	Ref
	Number int    `json:"number"`
	Agent  string `json:"agent"`
	Rule   string `json:"rule,omitempty"`
}

// WorkItem is an item of pending work (rath.work.pending; the todo tool's,
// among others) and, once settled, its rath.work.done. It belongs to the
// branch that stored its pending event (At); an item a fork settles that an
// ancestor added is listed in the fork too, At its rath.work.done, with
// AddedIn naming the ancestor's event.
type WorkItem struct {
	At
	WorkID      string `json:"work_id"`
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	Assignee    string `json:"assignee,omitempty"`
	Actor       string `json:"actor,omitempty"`
	AddedIn     *Ref   `json:"added_in,omitempty"`
	// Done is the event that settled it (nil: open at the branch's head).
	Done    *At    `json:"done,omitempty"`
	DoneBy  string `json:"done_by,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

// people keeps, while a branch is folded, the approvals requested on its
// logical log, the interventions waiting for what follows them, and the
// work seen.
type people struct {
	requests      map[string]approvalRequest // by approval ID
	interventions []Intervention
	awaitCall     map[string][]int // call ID → own interventions waiting for its end
	awaitTurn     []int            // own interventions waiting for a turn
	work          []WorkItem
	workIndex     map[string]int           // own items by work ID
	pending       map[string]events.Stored // every pending event on the logical log, by work ID
}

type approvalRequest struct {
	ref  Ref
	data *events.ApprovalRequested
}

func (p *people) init() {
	p.requests, p.awaitCall, p.workIndex, p.pending = map[string]approvalRequest{}, map[string][]int{}, map[string]int{}, map[string]events.Stored{}
}

// next says, in the interventions waiting for one, which turn followed
// them: the branch's own request e (number n).
func (p *people) next(e events.Stored, d *events.TurnRequested, n int) {
	for _, i := range p.awaitTurn {
		p.interventions[i].Next = &NextTurn{Ref: Ref{Branch: e.Session, Seq: e.Seq}, Number: n, Agent: d.Agent, Rule: d.Rule}
	}
	p.awaitTurn = nil
}

// pendingWork keeps a pending item of the logical log, and lists it when
// it is the branch's own.
func (p *people) pendingWork(e events.Stored, d *events.WorkPending, own bool) {
	p.pending[d.WorkID] = e
	if own {
		p.workIndex[d.WorkID] = len(p.work)
		p.work = append(p.work, WorkItem{At: at(e), WorkID: d.WorkID, Kind: d.Kind, Description: d.Description, Assignee: d.Assignee, Actor: e.Actor})
	}
}

// workDone settles an item with the branch's own e: one it listed, or one
// an ancestor added, listed here at e.
func (p *people) workDone(e events.Stored, d *events.WorkDone) {
	i, ok := p.workIndex[d.WorkID]
	if !ok {
		added, known := p.pending[d.WorkID]
		if !known {
			return // settles nothing the log added
		}
		w, _ := added.Decode()
		wp, _ := w.(*events.WorkPending)
		if wp == nil {
			return
		}
		i = len(p.work)
		p.workIndex[d.WorkID] = i
		// Listed in this branch, at the event that settles it.
		p.work = append(p.work, WorkItem{At: at(e), WorkID: d.WorkID, Kind: wp.Kind, Description: wp.Description,
			Assignee: wp.Assignee, Actor: added.Actor, AddedIn: &Ref{Branch: added.Session, Seq: added.Seq}})
	}
	done := at(e)
	p.work[i].Done, p.work[i].DoneBy, p.work[i].Outcome = &done, e.Actor, d.Outcome
}

// decided records an approval's decision, joined with its request.
func (p *people) decided(f *fold, e events.Stored, kind, id, text string) {
	iv := Intervention{At: at(e), Kind: kind, Actor: e.Actor, ApprovalID: id, Text: text}
	if r, ok := p.requests[id]; ok {
		ref := r.ref
		iv.Requested, iv.Action, iv.Approver, iv.CallID, iv.Tool = &ref, r.data.Action, r.data.Approver, r.data.CallID, r.data.Tool
		if c := f.calls[r.data.CallID]; c != nil {
			iv.Arguments = c.rec.Arguments
		}
	}
	p.add(iv, iv.CallID)
}

// add records an own intervention, waiting for the end of call (if any)
// and for the next turn.
func (p *people) add(iv Intervention, call string) {
	i := len(p.interventions)
	p.interventions = append(p.interventions, iv)
	if call != "" {
		p.awaitCall[call] = append(p.awaitCall[call], i)
	}
	p.awaitTurn = append(p.awaitTurn, i)
}

// ended fills in the end of a call the interventions wait for.
func (p *people) ended(e events.Stored, call, status string, exit int) {
	for _, i := range p.awaitCall[call] {
		p.interventions[i].Call = &CallEnd{Ref: Ref{Branch: e.Session, Seq: e.Seq}, Status: status, ExitCode: exit}
	}
	delete(p.awaitCall, call)
}

// peopleSection writes the interventions: who decided or corrected what,
// when, and what followed. Nothing when there were none.
func peopleSection(w func(string, ...any), d *Dossier, n namer) {
	if len(d.Interventions) == 0 {
		return
	}
	w("## People in the loop\n\nApprovals granted and rejected, and corrections, by the identity the ledger authenticated, with what followed in the same branch.\n\n")
	w("| branch | seq | when | who | what | about | followed |\n|---|---|---|---|---|---|---|\n")
	for _, iv := range d.Interventions {
		w("| %s | %d | %s | %s | %s | %s | %s |\n", n.of(iv.Branch), iv.Seq, iv.Time.UTC().Format(time.RFC3339), cell(inline(orDash(iv.Actor), 120)),
			cell(interventionWhat(iv, n)), cell(interventionAbout(iv, n)), cell(interventionFollowed(iv, n)))
	}
	w("\n")
}

// interventionLine is an intervention in a branch's story.
func interventionLine(iv Intervention, n namer) string {
	who := inline(orDash(iv.Actor), 120)
	switch iv.Kind {
	case InterventionGranted, InterventionRejected:
		line := fmt.Sprintf("**%s %s** approval %s", who, iv.Kind, inline(iv.ApprovalID, 80))
		if iv.Action != "" {
			line += " (" + inline(iv.Action, 120) + ")"
		}
		if iv.Text != "" {
			line += ": " + quote(n.text(iv.Text), 160)
		}
		return line
	case InterventionExpired:
		line := fmt.Sprintf("**nobody decided** approval %s", inline(iv.ApprovalID, 80))
		if iv.Action != "" {
			line += " (" + inline(iv.Action, 120) + ")"
		}
		return line + " in time: " + quote(n.text(iv.Text), 160)
	case InterventionSaid:
		return fmt.Sprintf("**%s said** (a correction): %s", who, quote(n.text(iv.Text), 200))
	case InterventionResult:
		return fmt.Sprintf("**%s gave the result** of tool call %s in place of running it (a correction): %s", who, code(iv.CallID), quote(n.text(iv.Text), 160))
	}
	return who + " " + iv.Kind
}

func interventionWhat(iv Intervention, n namer) string {
	switch iv.Kind {
	case InterventionGranted, InterventionRejected, InterventionExpired:
		s := iv.Kind + " " + iv.ApprovalID
		if iv.Text != "" {
			s += ": " + quote(n.text(iv.Text), 160)
		}
		return s
	case InterventionSaid:
		return "said " + quote(n.text(iv.Text), 200)
	case InterventionResult:
		return "gave the result " + quote(n.text(iv.Text), 160)
	}
	return iv.Kind
}

func interventionAbout(iv Intervention, n namer) string {
	var parts []string
	if iv.Action != "" {
		a := inline(iv.Action, 120)
		if iv.Approver != "" {
			a += " (asked of " + inline(iv.Approver, 60) + ")"
		}
		if iv.Requested != nil {
			a += fmt.Sprintf(", requested at %d", iv.Requested.Seq)
		}
		parts = append(parts, a)
	}
	if iv.CallID != "" {
		c := "call " + inline(iv.CallID, 80)
		if iv.Tool != "" {
			c += " " + inline(iv.Tool, 60)
		}
		if len(iv.Arguments) > 0 {
			c += " " + code(inline(string(iv.Arguments), 120))
		}
		parts = append(parts, c)
	}
	return orDash(strings.Join(parts, "; "))
}

func interventionFollowed(iv Intervention, n namer) string {
	var parts []string
	if c := iv.Call; c != nil {
		parts = append(parts, callEnd(*c))
	}
	if t := iv.Next; t != nil {
		s := fmt.Sprintf("turn %d of %s at %d", t.Number, inline(t.Agent, 60), t.Seq)
		if t.Rule != "" {
			s += " (rule " + inline(t.Rule, 60) + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "nothing yet"
	}
	return strings.Join(parts, "; ")
}

// callEnd says how a call ended: "the call completed (exit 0) at 27", "the
// call failed at 26" (a failure without an exit code never ran a command).
func callEnd(c CallEnd) string {
	if c.Status == "failed" && c.ExitCode == 0 {
		return fmt.Sprintf("the call failed at %d", c.Seq)
	}
	return fmt.Sprintf("the call %s (exit %d) at %d", c.Status, c.ExitCode, c.Seq)
}

// workSection writes the pending work and how it was settled. Nothing when
// there was none.
func workSection(w func(string, ...any), d *Dossier, n namer) {
	if len(d.Work) == 0 {
		return
	}
	w("## Pending work\n\nWork items the agents or people recorded (the todo tool, rath.work.pending) and how each was settled.\n\n")
	w("| branch | seq | item | for | recorded by | settled |\n|---|---|---|---|---|---|\n")
	for _, it := range d.Work {
		item := inline(it.WorkID, 64) + ": " + inline(n.text(it.Description), 160)
		if it.AddedIn != nil {
			item += fmt.Sprintf(" (added in %s at %d)", n.of(it.AddedIn.Branch), it.AddedIn.Seq)
		}
		settled := "**open**"
		if it.Done != nil {
			settled = fmt.Sprintf("done at %d by %s", it.Done.Seq, inline(orDash(it.DoneBy), 120))
			if it.Outcome != "" {
				settled += ": " + quote(n.text(it.Outcome), 120)
			}
		}
		w("| %s | %d | %s | %s | %s | %s |\n", n.of(it.Branch), it.Seq, cell(item), cell(inline(orDash(it.Assignee), 60)),
			cell(inline(orDash(it.Actor), 120)), cell(settled))
	}
	w("\n")
}

// ApprovalAnswer answers "who approved the command at step N": the tool
// call at the step, the approval that gated it and its decision on the
// branch's logical log (an ancestor's decision before a fork counts).
type ApprovalAnswer struct {
	Branch   string `json:"branch"`
	Step     uint64 `json:"step"`
	StepType string `json:"step_type"`
	// CallID, Tool, Agent and Arguments are the call's ("" when the step
	// is an approval no call waits for: a rule's approval route).
	CallID    string          `json:"call_id,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Agent     string          `json:"agent,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ApprovalID is the approval that gated the call ("": not gated), and
	// Requested where it was asked for.
	ApprovalID string `json:"approval_id,omitempty"`
	Requested  *Ref   `json:"requested,omitempty"`
	// Decision is its grant or rejection (nil: pending at the head).
	Decision *Intervention `json:"decision"`
}

// ErrNoCall is returned (wrapped) by Approved for a step that is neither a
// tool call's event nor an approval's.
var ErrNoCall = errors.New("no tool call or approval at the step")

// Approved answers who approved (or rejected) the tool call, or the
// approval, that step seq of branch's logical log belongs to: a call's
// request, start, result or failure, an approval's request or decision.
func (d *Dossier) Approved(branch string, seq uint64) (ApprovalAnswer, error) {
	if err := d.hasBranch(branch); err != nil {
		return ApprovalAnswer{}, err
	}
	e, ok := d.tree.Event(branch, seq)
	if !ok {
		return ApprovalAnswer{}, fmt.Errorf("%w: branch %s has no sequence %d (head %d)", ErrNoStep, branch, seq, d.tree.head(branch).Seq)
	}
	a := ApprovalAnswer{Branch: branch, Step: seq, StepType: e.Type}
	data, err := e.Decode()
	if err != nil {
		return ApprovalAnswer{}, fmt.Errorf("%w: %s at %d does not decode: %v", ErrNoCall, e.Type, seq, err)
	}
	switch v := data.(type) {
	case *events.ToolRequested:
		a.CallID = v.CallID
	case *events.ToolStarted:
		a.CallID = v.CallID
	case *events.ToolCompleted:
		a.CallID = v.CallID
	case *events.ToolFailed:
		a.CallID = v.CallID
	case *events.ApprovalRequested:
		a.ApprovalID, a.CallID = v.ApprovalID, v.CallID
	case *events.ApprovalGranted:
		a.ApprovalID = v.ApprovalID
	case *events.ApprovalRejected:
		a.ApprovalID = v.ApprovalID
	default:
		return ApprovalAnswer{}, fmt.Errorf("%w: %s at %d of %s", ErrNoCall, e.Type, seq, branch)
	}
	log := d.tree.Logical(branch)
	for _, ev := range log {
		switch ev.Type {
		case events.TypeApprovalRequested:
			var r events.ApprovalRequested
			if decode(ev, &r) && (r.ApprovalID == a.ApprovalID || a.CallID != "" && r.CallID == a.CallID) {
				a.ApprovalID, a.CallID, a.Requested = r.ApprovalID, r.CallID, &Ref{Branch: ev.Session, Seq: ev.Seq}
			}
		case events.TypeToolRequested:
			var r events.ToolRequested
			if decode(ev, &r) && a.CallID != "" && r.CallID == a.CallID {
				a.Tool, a.Agent, a.Arguments = r.Tool, r.Agent, r.Arguments
			}
		}
	}
	if a.ApprovalID == "" {
		return a, nil
	}
	for _, seg := range d.tree.Path(branch) {
		for i, iv := range d.Interventions {
			if iv.ApprovalID == a.ApprovalID && iv.Branch == seg.Session && iv.Seq >= seg.From && iv.Seq <= seg.To && a.Decision == nil {
				a.Decision = &d.Interventions[i]
			}
		}
	}
	return a, nil
}

func decode(e events.Stored, v any) bool {
	return json.Unmarshal(e.Data, v) == nil
}
