package toolserver

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
)

// requestGated records a gated call as the agent worker does: the approval
// request and the call naming it, in one atomic append.
func (r *rig) requestGated(t *testing.T, session, callID, approvalID, args string) {
	t.Helper()
	var evs []event.Event
	for _, d := range []any{
		&events.ApprovalRequested{ApprovalID: approvalID, Action: "count", Approver: "maintainers", CallID: callID, Tool: "word_count"},
		&events.ToolRequested{CallID: callID, Tool: "word_count", Agent: "a", Arguments: json.RawMessage(args), ApprovalID: approvalID},
	} {
		ev, err := events.New(session, d)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if _, err := r.c.AppendAtomic(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// A custom tool's gated call waits for its approval: a call requested
// after it is served first (a session's events are handled in order), the
// grant runs it, and a rejection fails the other with the reason, unrun.
func TestGatedCallsWaitForTheirApproval(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	waitRegistered(t, r.store, "word_count")
	if _, err := r.c.Start(context.Background(), "g", events.SessionStarted{Task: "count"}); err != nil {
		t.Fatal(err)
	}
	r.requestGated(t, "g", "held", "ap-1", `{"text":"a b"}`)
	r.requestGated(t, "g", "refused", "ap-2", `{"text":"a b c"}`)
	r.request(t, "g", "free", "word_count", `{"text":"one"}`)
	r.finish(t, "g", "free")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d runs before any grant, want the ungated call's only", n)
	}

	if _, err := r.c.Approve(context.Background(), "g", "ap-1", ""); err != nil {
		t.Fatal(err)
	}
	if _, last := r.finish(t, "g", "held"); last.(*events.ToolCompleted).Result != "2" {
		t.Fatalf("granted call: %#v", last)
	}
	if _, err := r.c.Reject(context.Background(), "g", "ap-2", "enough counting"); err != nil {
		t.Fatal(err)
	}
	chunk, last := r.finish(t, "g", "refused")
	failed, ok := last.(*events.ToolFailed)
	if !ok || !strings.Contains(failed.Error, "enough counting") || !strings.Contains(chunk.Content, "enough counting") {
		t.Fatalf("rejected call: %#v %+v", last, chunk)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d runs, want 2: the rejected call ran", n)
	}
}
