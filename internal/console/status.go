package console

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// quietAfter is how long an active session goes without an event before
// the console says what it waits for: a model call or a test run takes
// seconds, a stall lasts.
const quietAfter = 30 * time.Second

// badge is how a session's status shows: its words, the class that colours
// them (style.css) and the longer story on hover.
type badge struct {
	Text  string `json:"text"`
	Class string `json:"class"`
	Title string `json:"title,omitempty"`
}

// failureWords mark an outcome as a failure when it holds one of them
// (failed, rejected, budget_exceeded, approval_expired, eval_timeout…).
var failureWords = []string{"fail", "reject", "error", "abort", "abandon", "cancel", "timeout", "timed_out", "expired", "exceeded", "incomplete", "gave_up", "give_up", "broken"}

// outcomeClass sorts a close's outcome: "succeeded" for the successful
// outcomes the dossier accepts as a final answer, "superseded" for a
// branch closed to continue on a fork, "failed" for a failure, "closed"
// for the rest (recorded, stopped…) and a close without an outcome.
func outcomeClass(outcome string) string {
	o := strings.ToLower(strings.TrimSpace(outcome))
	switch {
	case o == "":
		return "closed"
	case slices.Contains(dossier.SuccessOutcomes, o):
		return "succeeded"
	case o == dossier.VerdictSuperseded:
		return "superseded"
	}
	for _, w := range failureWords {
		if strings.Contains(o, w) {
			return "failed"
		}
	}
	return "closed"
}

// badgeOf is the badge of a session with status and outcome: a closed one
// shows its outcome, coloured by what it means, never one green "closed"
// for all; an active one that waits says so (w, nil if it does not).
func badgeOf(status, outcome, reason string, w *wait) badge {
	switch status {
	case string(session.StatusActive):
		if w != nil {
			return badge{Text: "waiting", Class: "waiting", Title: "waits for " + w.For}
		}
		return badge{Text: "active", Class: "active"}
	case string(session.StatusClosed), string(session.StatusArchived):
		b := badge{Text: outcome, Class: outcomeClass(outcome), Title: status}
		if outcome != "" {
			b.Title += ": " + outcome
		}
		if reason != "" {
			b.Title += " (" + reason + ")"
		}
		switch {
		case outcome == "":
			b.Text = status
		case b.Class == "closed":
			b.Text = status + ": " + outcome // "recorded" alone reads as a status
		}
		if status == string(session.StatusArchived) {
			b.Text, b.Class = "archived", "archived "+b.Class
		}
		return b
	}
	return badge{Text: status, Class: status}
}

// wait is what an active session waits for, in words, and since when.
type wait struct {
	For   string    `json:"for"`
	Since time.Time `json:"since"`
}

// waitOf says what an active session waits for: a person's approval at
// once; else, once nothing happened for quietAfter, the oldest thing in
// flight (pending work, a tool call the runner has not started or not
// finished, a turn with no answer) or, with nothing in flight, the next
// step of its workflow. Nil when it is not active, or busy.
func waitOf(v *session.Overview, now time.Time) *wait {
	if v == nil || v.Status != session.StatusActive {
		return nil
	}
	if a := v.Approvals.Waiting; len(a) > 0 {
		w := &wait{For: fmt.Sprintf("approval %s (asked of %s)", a[0].ID, orSomeone(a[0].Approver)), Since: a[0].Requested}
		if a[0].Action != "" {
			w.For += ": " + clipText(a[0].Action, 120)
		}
		return w
	}
	if now.Sub(v.Updated) < quietAfter {
		return nil
	}
	since := v.Updated
	switch {
	case len(v.Pending) > 0:
		p := v.Pending[0]
		what := p.Description
		if what == "" {
			what = fmt.Sprintf("%s work %s", p.Kind, p.ID)
		}
		return &wait{For: clipText(what, 200) + fmt.Sprintf(" (pending since seq %d)", p.Seq), Since: since}
	case len(v.Tools.Open) > 0:
		t := v.Tools.Open[0]
		if t.Approval != "" {
			return &wait{For: fmt.Sprintf("approval %s of tool call %s (%s)", t.Approval, t.CallID, t.Tool), Since: since}
		}
		if t.Runner == events.RunnerCaller {
			return &wait{For: fmt.Sprintf("its caller to record the outcome of tool call %s (%s), requested at seq %d: the caller runs it, not Rath", t.CallID, t.Tool, t.Seq), Since: since}
		}
		if t.Status == session.ToolRequested {
			return &wait{For: fmt.Sprintf("a tool runner to start tool call %s (%s), requested at seq %d", t.CallID, t.Tool, t.Seq), Since: since}
		}
		return &wait{For: fmt.Sprintf("tool call %s (%s) to finish, started by seq %d", t.CallID, t.Tool, t.LastSeq), Since: since}
	case v.Turn != nil:
		return &wait{For: fmt.Sprintf("the agent worker: turn %s of %s, requested at seq %d, has no answer", v.Turn.ID, v.Turn.Agent, v.Turn.Seq), Since: v.Turn.At}
	case v.Workflow != "":
		return &wait{For: fmt.Sprintf("a next step: nothing is in flight, and no rule of %s routed the last event (seq %d)", v.Workflow, v.Seq), Since: since}
	}
	return nil // a session without a workflow waits for whoever appends to it
}

// waitText is a wait as a page shows it: what, and for how long.
func waitText(w *wait, now time.Time) string {
	if w == nil {
		return ""
	}
	if w.Since.IsZero() {
		return w.For
	}
	return fmt.Sprintf("%s (%s so far)", w.For, now.Sub(w.Since).Round(time.Second))
}

func orSomeone(approver string) string {
	if approver == "" {
		return "anyone who may approve"
	}
	return "the " + approver + " role"
}

// clipText cuts s to at most n runes, marking the cut.
func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
