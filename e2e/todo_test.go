package e2e_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// The todo tool records the planner's work as pending and done, a rule
// reads the open work, and no workspace is placed for it.
func TestTodoToolRecordsPendingWork(t *testing.T) {
	r := start(t)
	st, log := r.run(t, "plan", "todo.yaml", "")
	if st.Outcome != "incomplete" || st.CloseReason != "work is still open" {
		t.Fatalf("session ended %s (%s)", st.Outcome, st.CloseReason)
	}
	if w, ok := st.Pending["tests"]; len(st.Pending) != 1 || !ok || w.Kind != "todo" || w.Assignee != "planner" || w.Description != "run the tests" {
		t.Fatalf("pending work %+v", st.Pending)
	}
	var work []string
	for _, ev := range log {
		switch ev.Type {
		case events.TypeWorkPending:
			work = append(work, "pending "+data[events.WorkPending](t, ev).WorkID)
		case events.TypeWorkDone:
			d := data[events.WorkDone](t, ev)
			work = append(work, "done "+d.WorkID+" "+d.Outcome)
		case events.TypeSandboxPlaced:
			t.Fatalf("a workspace was placed for todo at %d", ev.Seq)
		case events.TypeSelectorDecided:
			if d := data[events.SelectorDecided](t, ev); d.Rule == "open-work-left" {
				var in map[string]json.RawMessage
				if err := json.Unmarshal(d.Inputs, &in); err != nil || !strings.Contains(string(in["state.open_work"]), `"id":"tests"`) {
					t.Fatalf("decision inputs %s (%v)", d.Inputs, err)
				}
			}
		}
	}
	if want := []string{"pending fix", "pending tests", "done fix written"}; !slices.Equal(work, want) {
		t.Fatalf("work events %v, want %v", work, want)
	}
}
