package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Issue 33: a call that the program which recorded it runs (runner caller,
// the model gateway's sessions) is nobody's in Rath. The tool runner
// neither screens, fails nor runs it, whatever tool it names (a built-in a
// gate of the workflow holds, a custom server's, an unknown one), nor when
// an approval it names is granted; the word_count server leaves it alone;
// the ledger refuses a runner it does not know; and the caller records the
// outcome itself, which the fold shows.
func TestCallerRunCallsAreLeftAlone(t *testing.T) {
	tn := setupTenants(t)
	ctx := context.Background()
	tn.start(t, "g")
	byCaller := func(callID, tool, args, approval string) {
		t.Helper()
		if _, err := tn.mallory.Emit(ctx, "g", &events.ToolRequested{CallID: callID, Tool: tool, Agent: "coder",
			Arguments: json.RawMessage(args), ApprovalID: approval, Runner: events.RunnerCaller}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tn.mallory.Emit(ctx, "g", &events.ApprovalRequested{ApprovalID: "ap-caller", Action: "run call", CallID: "c-run", Tool: "run"}); err != nil {
		t.Fatal(err)
	}
	byCaller("c-run", "run", `{"command":["sh","-c","echo RAN"]}`, "ap-caller") // the workflow's gate "runs" holds the coder's runs
	byCaller("c-count", "word_count", `{"text":"a b"}`, "")
	byCaller("c-unknown", "lookup_weather", `{"city":"Oslo"}`, "")
	if _, err := tn.lead.Approve(ctx, "g", "ap-caller", "not Rath's to run"); err != nil {
		t.Fatal(err)
	}

	// Rath's own calls after them: once both are done, the tool runner and
	// the word_count server have handled every event before them (one
	// session, in order).
	tn.emit(t, tn.mallory, "g", "free", "list_files", `{}`)
	tn.emit(t, tn.mallory, "g", "plain", "word_count", `{"text":"a b"}`)
	for _, id := range []string{"free", "plain"} {
		if got := tn.finish(t, "g", id); len(got) == 0 {
			t.Fatalf("no events of %s", id)
		} else if _, ok := got[len(got)-1].(*events.ToolCompleted); !ok {
			t.Fatalf("%s: %#v", id, got)
		}
	}
	callers := []string{"c-run", "c-count", "c-unknown"}
	for _, id := range callers {
		for _, typ := range []string{events.TypeToolCleared, events.TypeApprovalRequested, events.TypeToolStarted, events.TypeToolCompleted, events.TypeToolFailed} {
			want := 0
			if id == "c-run" && typ == events.TypeApprovalRequested {
				want = 1 // mallory's own
			}
			if n := tn.count(t, "g", typ, id); n != want {
				t.Errorf("%d %s about the caller's %s, want %d", n, typ, id, want)
			}
		}
		if s := tn.status(t, "g", id); s != session.ToolRequested {
			t.Errorf("the caller's %s is %s before its caller answers", id, s)
		}
	}
	if n := tn.counted.Load(); n != 1 {
		t.Errorf("word_count ran %d times, want once (plain only)", n)
	}

	// A runner the schema does not know is refused, naming the field.
	_, err := tn.mallory.Emit(ctx, "g", &events.ToolRequested{CallID: "c-bad", Tool: "run", Runner: "someone"})
	if api.CodeOf(err) != api.CodeSchema || !strings.Contains(err.Error(), `/runner: value must be one of "caller"`) {
		t.Errorf("runner someone: %v, want a schema refusal naming /runner", err)
	}

	// The caller records the outcomes; the fold shows them, and who ran them.
	if _, err := tn.mallory.Emit(ctx, "g", &events.ToolCompleted{CallID: "c-unknown", Tool: "lookup_weather", Attempt: 1, Result: "sunny", DurationMS: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.mallory.Emit(ctx, "g", &events.ToolFailed{CallID: "c-count", Tool: "word_count", Attempt: 1, Error: "no words"}); err != nil {
		t.Fatal(err)
	}
	st, err := tn.lead.State(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Tools["c-unknown"]; c.Status != session.ToolCompleted || c.Runner != events.RunnerCaller {
		t.Errorf("the caller's completed call: %+v", c)
	}
	if c := st.Tools["c-count"]; c.Status != session.ToolFailed || c.Error != "no words" || c.Runner != events.RunnerCaller {
		t.Errorf("the caller's failed call: %+v", c)
	}
	if c := st.Tools["c-run"]; c.Status != session.ToolRequested || c.Runner != events.RunnerCaller {
		t.Errorf("the caller's pending call: %+v", c)
	}
}
