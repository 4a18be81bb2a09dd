package workflow_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// t0 is when every test session starts; event seq n happens n seconds later.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// history builds the stored events of session "s", numbered from 1.
func history(t testing.TB, data ...any) []events.Stored {
	t.Helper()
	out := make([]events.Stored, len(data))
	for i, d := range data {
		k, ok := events.KindOf(d)
		if !ok {
			t.Fatalf("%T is not an event kind", d)
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		out[i] = events.Stored{
			ID: events.NewID(), Type: k.Type, Session: "s", Seq: seq,
			Time: t0.Add(time.Duration(seq) * time.Second), Data: raw,
		}
	}
	return out
}

// fold folds events with the session package's own fold, as the selector
// does, and returns the state after the last one.
func fold(evs []events.Stored) *session.State {
	st := &session.State{}
	for _, e := range evs {
		session.Apply(st, e)
	}
	return st
}

// activation folds the history and builds the activation of its last event.
func activation(t *testing.T, data ...any) map[string]any {
	t.Helper()
	evs := history(t, data...)
	act, err := workflow.Activation(fold(evs), evs[len(evs)-1])
	if err != nil {
		t.Fatal(err)
	}
	return act
}

func mustParse(t *testing.T, src string) *workflow.Workflow {
	t.Helper()
	w, err := workflow.Parse([]byte(src), "workflow.yaml")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return w
}
