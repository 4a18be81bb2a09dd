package workflow

import (
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// A condition compiles and checks as a rule's when does, without a file.
func TestCompileCondition(t *testing.T) {
	for src, want := range map[string]string{
		"state.turns ==":     "invalid CEL: Syntax error",
		"state.turn > 1":     `state has no field "turn"`,
		"size(state.task)":   "must yield bool, not int",
		`event.nope == "x"`:  `event has no field "nope"`,
		"undeclared == true": "undeclared reference",
	} {
		if _, err := CompileCondition(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
	c, err := CompileCondition(`state.turns == 2 && event.data.outcome == "succeeded"`)
	if err != nil {
		t.Fatal(err)
	}
	st := &session.State{Status: session.StatusClosed}
	st.Counts.Turns = 2
	for outcome, want := range map[string]bool{"succeeded": true, "failed": false} {
		act, err := Activation(st, events.Stored{Type: events.TypeSessionClosed, Data: []byte(`{"outcome":"` + outcome + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Holds(act); err != nil || got != want {
			t.Errorf("outcome %s: %v, %v; want %v", outcome, got, err, want)
		}
	}
	if c.String() != `state.turns == 2 && event.data.outcome == "succeeded"` {
		t.Errorf("String() = %q", c)
	}
}
