package dossier

import (
	"encoding/json"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// The dossier's fold names every registered kind: a kind added to the
// catalog fails here until the dossier decides what it shows of it
// (nothing, at times).
func TestFoldKnowsEveryKind(t *testing.T) {
	stored := func(typ string, seq uint64, data any) events.Stored {
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		return events.Stored{ID: typ, Type: typ, Session: "s", Seq: seq, Data: raw}
	}
	tr, err := newTree("s", map[string][]events.Stored{"s": {stored(events.TypeSessionStarted, 1, events.SessionStarted{Task: "t"})}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range events.Kinds() {
		if f := newFold(tr, "s", nil); !f.event(stored(k.Type, 2, k.New())) {
			t.Errorf("the dossier's fold does not know %s", k.Type)
		}
	}
	if f := newFold(tr, "s", nil); f.event(stored("rath.unknown", 2, struct{}{})) {
		t.Error("the fold knows a kind that is not registered")
	}
}
