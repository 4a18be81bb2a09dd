package eval

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

func TestGrade(t *testing.T) {
	cond := func(src string) *workflow.Condition {
		t.Helper()
		c, err := workflow.CompileCondition(src)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	closed := func(outcome, reason string, turns int) (*session.State, events.Stored) {
		st := &session.State{ID: "s", Status: session.StatusClosed, Outcome: outcome, CloseReason: reason}
		st.Counts.Turns = turns
		data, _ := json.Marshal(events.SessionClosed{Outcome: outcome, Reason: reason})
		return st, events.Stored{Type: events.TypeSessionClosed, Session: "s", Seq: 9, Data: data}
	}
	for _, tc := range []struct {
		name    string
		g       Grader
		outcome string
		turns   int
		cause   string
		detail  string
	}{
		{"the outcome wanted", Grader{Outcome: "succeeded"}, "succeeded", 1, "", ""},
		{"another outcome", Grader{Outcome: "succeeded"}, "failed", 1, CauseOutcome, "closed failed, want succeeded (why)"},
		{"no outcome", Grader{Outcome: "succeeded"}, "", 1, CauseOutcome, "closed without an outcome, want succeeded (why)"},
		{"CEL true", Grader{CEL: cond(`state.turns == 2 && event.data.reason == "why"`)}, "failed", 2, "", ""},
		{"CEL false", Grader{CEL: cond("state.turns == 2")}, "succeeded", 1, CauseGrader, "state.turns == 2 is false"},
		{"both, the outcome fails first", Grader{Outcome: "succeeded", CEL: cond("state.turns == 2")}, "failed", 1, CauseOutcome, "closed failed"},
		{"both, CEL fails", Grader{Outcome: "succeeded", CEL: cond("state.turns == 2")}, "succeeded", 1, CauseGrader, "is false"},
		{"CEL fails to evaluate", Grader{CEL: cond("event.data.score > 1")}, "succeeded", 1, CauseGrader, "no such key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, last := closed(tc.outcome, "why", tc.turns)
			f := tc.g.Grade(st, last)
			switch {
			case tc.cause == "" && f != nil:
				t.Errorf("failed: %v", f)
			case tc.cause != "" && (f == nil || f.Cause != tc.cause || !strings.Contains(f.Detail, tc.detail)):
				t.Errorf("failure %v, want %s containing %q", f, tc.cause, tc.detail)
			}
		})
	}
}
