package session_test

import (
	"encoding/json"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// TestViewIsIndependent folds a log that touches every part of the state and
// takes a view after each event: folding on into the original (own events
// and merged ones) must leave every earlier view as it was, and a view folded
// on must equal the original folded the same way.
func TestViewIsIndependent(t *testing.T) {
	given := []any{
		&events.SessionStarted{Task: "t", Labels: map[string]string{"a": "1"}},
		&events.ChunkAppended{Role: "user", Content: "hi"},
		&events.SelectorDecided{Rule: "r", Route: "agent:a", Agent: "a", TurnID: "t1"},
		&events.TurnRequested{TurnID: "t1", Agent: "a"},
		&events.ModelCalled{Agent: "a", Provider: "p", Model: "m", TokensIn: 3},
		&events.UsageRecorded{Agent: "b", Model: "e", TokensIn: 1},
		&events.ToolRequested{CallID: "c1", Tool: "run", Agent: "a", Arguments: json.RawMessage(`{}`)},
		&events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 1},
		&events.ChunkAppended{Role: "tool", Content: "out", ToolCallID: "c1"},
		&events.ToolCompleted{CallID: "c1", Tool: "run", Attempt: 1},
		&events.TurnCompleted{TurnID: "t1", Agent: "a", ToolCalls: 1},
		&events.SandboxPlaced{Backend: "local", SandboxID: "sb"},
		&events.WorkPending{WorkID: "w", Kind: "k"},
		&events.WorkDone{WorkID: "w"},
		&events.ApprovalRequested{ApprovalID: "ap", Action: "x"},
		&events.ApprovalGranted{ApprovalID: "ap", By: "ann"},
		&events.ValidationPassed{Validator: "v"},
		&events.ValidationFailed{Validator: "v", Reason: "no"},
		&events.MemoryWritten{ItemID: "i"},
		&events.TranscriptCompacted{FromSeq: 2, ToSeq: 9, Summary: "s"},
		&events.SessionPaused{},
		&events.SessionResumed{},
		&events.HandlerFailed{Handler: "h"},
		&events.SessionMerged{Source: "x"},
		&events.SessionMerged{Source: "x"},
		&events.SessionClosed{Outcome: "ok"},
		&events.SessionArchived{BundleRef: "sha256:00", HeadSeq: 25},
		&events.SessionPurged{},
	}
	var evs []events.Stored
	for i, d := range given {
		evs = append(evs, stored(t, "s", uint64(i+1), d))
	}
	// Two merges of adjacent runs of x: the second extends the first's
	// coverage run.
	merged := [][]events.Stored{{
		stored(t, "x", 5, &events.ChunkAppended{Role: "assistant", Content: "from x"}),
		stored(t, "x", 6, &events.ToolCompleted{CallID: "c1", Tool: "run", Attempt: 2}),
	}, {
		stored(t, "x", 7, &events.ModelCalled{Agent: "a", Provider: "p", Model: "m", TokensIn: 1}),
		stored(t, "x", 8, &events.TurnCompleted{TurnID: "t9", Agent: "z"}),
	}}
	st := &session.State{}
	type taken struct {
		view *session.State
		json string
		at   int
	}
	var views []taken
	for i, e := range evs {
		if e.Type == events.TypeSessionMerged {
			for _, m := range merged[0] {
				session.ApplyMerged(st, m)
			}
			merged = merged[1:]
		}
		session.Apply(st, e)
		v := st.View()
		views = append(views, taken{v, marshal(t, v), i})
	}
	for _, v := range views {
		if got := marshal(t, v.view); got != v.json {
			t.Fatalf("view after event %d changed by later folds:\nbefore %s\nafter  %s", v.at+1, v.json, got)
		}
	}
	// A view folded on is the original folded on, and leaves it alone.
	mid := fold(evs[:10]...)
	v := mid.View()
	before := marshal(t, mid)
	for _, e := range evs[10:] {
		session.Apply(v, e)
	}
	if marshal(t, mid) != before {
		t.Fatal("folding a view changed the state it was taken of")
	}
	whole := fold(evs...)
	if marshal(t, v) != marshal(t, whole) {
		t.Fatalf("view folded on differs:\n%s\n%s", marshal(t, v), marshal(t, whole))
	}
}

func marshal(t *testing.T, st *session.State) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
