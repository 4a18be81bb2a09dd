package session

import (
	"encoding/json"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// The fold names every registered kind, as an event of the session's own
// and as one a merge takes in: a kind added to the catalog fails here until
// Apply decides what it means for the state (nothing, at times).
func TestApplyKnowsEveryKind(t *testing.T) {
	for _, k := range events.Kinds() {
		raw, err := json.Marshal(k.New())
		if err != nil {
			t.Fatal(err)
		}
		e := events.Stored{Type: k.Type, Session: "s", Seq: 1, Data: raw}
		if !apply(&State{}, e, false) || !apply(&State{}, e, true) {
			t.Errorf("session.Apply does not know %s", k.Type)
		}
	}
	if apply(&State{}, events.Stored{Type: "rath.unknown", Session: "s", Seq: 1, Data: json.RawMessage(`{}`)}, false) {
		t.Error("apply knows a kind that is not registered")
	}
}
