package answer_test

import (
	"encoding/json"
	"testing"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/pkg/events"
)

func stored(t *testing.T, id, typ, correlation string, data any) events.Stored {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: id, Type: typ, Session: "s1", Correlation: correlation, Data: raw}
}

// The rule every worker links its answers by: causation is the answered
// event, correlation is carried or started, and the ID is the same for
// every delivery of the answered event.
func TestAnswerRule(t *testing.T) {
	chunk := &events.ChunkAppended{Role: events.RoleUser, Content: "hi"}
	tests := []struct {
		name     string
		cause    events.Stored
		handler  string
		what     []string
		wantID   string
		wantCorr string
	}{
		{
			name:     "a carried correlation",
			cause:    stored(t, "e1", events.TypeChunkAppended, "corr-1", chunk),
			handler:  "selector",
			what:     []string{"decided"},
			wantID:   events.DerivedID("selector", "e1", "decided"),
			wantCorr: "corr-1",
		},
		{
			name:     "an event without one starts it",
			cause:    stored(t, "e2", events.TypeChunkAppended, "", chunk),
			handler:  "selector",
			what:     []string{"decided"},
			wantID:   events.DerivedID("selector", "e2", "decided"),
			wantCorr: "e2",
		},
		{
			name:     "a turn request without one starts its turn",
			cause:    stored(t, "e3", events.TypeTurnRequested, "", &events.TurnRequested{TurnID: "turn-x", Agent: "coder"}),
			handler:  "agent-worker",
			what:     []string{"completed"},
			wantID:   events.DerivedID("agent-worker", "e3", "completed"),
			wantCorr: "turn-x",
		},
		{
			name:     "a turn request carries its correlation",
			cause:    stored(t, "e4", events.TypeTurnRequested, "corr-4", &events.TurnRequested{TurnID: "turn-y", Agent: "coder"}),
			handler:  "agent-worker",
			what:     []string{"completed"},
			wantID:   events.DerivedID("agent-worker", "e4", "completed"),
			wantCorr: "corr-4",
		},
		{
			name:     "a turn request that does not decode is correlated by its ID",
			cause:    events.Stored{ID: "e5", Type: events.TypeTurnRequested, Session: "s1", Data: json.RawMessage(`[`)},
			handler:  "agent-worker",
			what:     []string{"failed"},
			wantID:   events.DerivedID("agent-worker", "e5", "failed"),
			wantCorr: "e5",
		},
		{
			name:     "several parts name one answer",
			cause:    stored(t, "e6", events.TypeToolRequested, "corr-6", &events.ToolRequested{CallID: "c", Tool: "run"}),
			handler:  "tool-runner",
			what:     []string{"chunk", "2"},
			wantID:   events.DerivedID("tool-runner", "e6", "chunk", "2"),
			wantCorr: "corr-6",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := answer.To(tc.cause, tc.handler, "rath/test")
			if got := a.ID(tc.what...); got != tc.wantID {
				t.Errorf("ID %s, want %s", got, tc.wantID)
			}
			// A redelivery is the same stored event: the same answer.
			if again := answer.To(tc.cause, tc.handler, "rath/test").ID(tc.what...); again != a.ID(tc.what...) {
				t.Errorf("redelivery ID %s, first %s", again, a.ID(tc.what...))
			}
			if other := answer.To(tc.cause, tc.handler+"-other", "rath/test").ID(tc.what...); other == tc.wantID {
				t.Error("another handler's answer has the same ID")
			}
			ev, err := a.Event(&events.ModelCalled{Agent: "coder"}, tc.what...)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID() != tc.wantID || ev.Subject() != tc.cause.Session || ev.Source() != "rath/test" {
				t.Errorf("event %s in %s from %s", ev.ID(), ev.Subject(), ev.Source())
			}
			if got := events.Causation(ev); got != tc.cause.ID {
				t.Errorf("causation %q, want %q", got, tc.cause.ID)
			}
			if got := events.Correlation(ev); got != tc.wantCorr {
				t.Errorf("correlation %q, want %q", got, tc.wantCorr)
			}
			if got := answer.Correlation(tc.cause); got != tc.wantCorr {
				t.Errorf("Correlation %q, want %q", got, tc.wantCorr)
			}
		})
	}
}

// An answer without a source keeps the emitting client's (Links sets none),
// and Links sets no ID: the caller derives one its own way.
func TestLinksWithoutSource(t *testing.T) {
	cause := stored(t, "e1", events.TypeChunkAppended, "", &events.ChunkAppended{Role: events.RoleUser, Content: "hi"})
	ev, err := events.New("s1", &events.ModelCalled{Agent: "coder"},
		append([]events.Option{events.WithSource("rath/tool/x"), events.WithID("own")}, answer.To(cause, "tool-x", "").Links()...)...)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Source() != "rath/tool/x" || ev.ID() != "own" || events.Causation(ev) != "e1" || events.Correlation(ev) != "e1" {
		t.Errorf("source %s id %s causation %s correlation %s", ev.Source(), ev.ID(), events.Causation(ev), events.Correlation(ev))
	}
}
