package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

func TestTodoWork(t *testing.T) {
	open := map[string]session.Work{"tests": {Seq: 4, Kind: "todo", Description: "run the tests"}}
	for _, tc := range []struct {
		name, args string
		want       any    // the work event
		result     string // a prefix of the model's text
		err        string // a part of the error
	}{
		{name: "add with an id", args: `{"action":"add","id":"fix","description":"write the fix"}`,
			want: &events.WorkPending{WorkID: "fix", Kind: "todo", Description: "write the fix", Assignee: "coder"}, result: "added fix: write the fix (2 open)"},
		{name: "add without", args: `{"action":"add","description":"write the fix"}`,
			want: &events.WorkPending{WorkID: "todo-" + events.DerivedID("todo", "c1")[:8], Kind: "todo", Description: "write the fix", Assignee: "coder"}, result: "added todo-"},
		{name: "done", args: `{"action":"done","id":"tests","outcome":"passed"}`,
			want: &events.WorkDone{WorkID: "tests", Outcome: "passed"}, result: "done tests: run the tests (0 open)"},
		{name: "list", args: `{"action":"list"}`, result: "open: \n- tests: run the tests"},
		{name: "done of an item not open", args: `{"action":"done","id":"fix"}`, err: "no open item fix; open: \n- tests"},
		{name: "add of an open id", args: `{"action":"add","id":"tests","description":"again"}`, err: "item tests is open already"},
		{name: "add without a description", args: `{"action":"add"}`, err: "argument description: required for add"},
		{name: "done without an id", args: `{"action":"done"}`, err: "argument id: required for done"},
		{name: "unknown action", args: `{"action":"drop"}`, err: "todo: argument action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work, result, err := tools.Work(json.RawMessage(tc.args), "c1", "coder", open)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(work)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) || !strings.HasPrefix(result, tc.result) {
				t.Fatalf("work %s, result %q; want %s, %q", got, result, want, tc.result)
			}
		})
	}
	var ae *tools.ArgError
	if _, _, err := tools.Work(json.RawMessage(`{"action":"add"}`), "c1", "coder", nil); !errors.As(err, &ae) {
		t.Fatalf("bad arguments: %T %v, want *ArgError", err, err)
	}
}
