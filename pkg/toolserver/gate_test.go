package toolserver

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
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
	if _, err := r.worker.AppendAtomic(context.Background(), evs); err != nil {
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

// A call that the agent worker did not propose, in a session with a
// workflow, waits for the tool runner's decision about its gate, which the
// server never takes itself: a clearance by the tool runner runs it, the
// tool runner's approval request holds it until the grant, and a tenant's
// own "clearance" or self-granted approval is worth nothing (the tool
// runner is played here by a client with its identity; services/tool-runner
// tests the real one).
func TestUnscreenedCallsWaitForTheToolRunner(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	waitRegistered(t, r.store, "word_count")
	wf, err := workflow.Parse([]byte("name: w\nagents:\n  - {name: a, provider: openai, model: m, tools: [word_count]}\nrules:\n  - {name: r, when: \"false\", route: {agent: a}}\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "u", events.SessionStarted{Workflow: "w", WorkflowRef: testrig.Bundle(t, r.store, wf)}); err != nil {
		t.Fatal(err)
	}
	runner, err := client.New(r.nc, client.As(events.Service("tool-runner")))
	if err != nil {
		t.Fatal(err)
	}
	user := func(callID string) {
		t.Helper()
		if _, err := r.c.Emit(ctx, "u", &events.ToolRequested{CallID: callID, Tool: "word_count", Agent: "a", Arguments: json.RawMessage(`{"text":"a b c"}`)}); err != nil {
			t.Fatal(err)
		}
	}

	user("free")
	user("held")
	if _, err := r.c.Emit(ctx, "u", &events.ApprovalRequested{ApprovalID: "ap-self", Action: "count", CallID: "held", Tool: "word_count"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Approve(ctx, "u", "ap-self", "I approve of myself"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Emit(ctx, "u", &events.ToolCleared{CallID: "held", Tool: "word_count"}); err == nil {
		t.Fatal("a tenant's user cleared a call")
	}
	r.request(t, "u", "barrier", "word_count", `{"text":"x"}`) // the agent worker's: runs in order
	r.finish(t, "u", "barrier")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d runs, want the agent worker's call's only", n)
	}

	if _, err := runner.Emit(ctx, "u", &events.ToolCleared{CallID: "free", Tool: "word_count"}); err != nil {
		t.Fatal(err)
	}
	if _, last := r.finish(t, "u", "free"); last.(*events.ToolCompleted).Result != "3" {
		t.Fatalf("cleared call: %#v", last)
	}
	if _, err := runner.Emit(ctx, "u", &events.ApprovalRequested{ApprovalID: "ap-r", Action: "count", Approver: "leads", CallID: "held", Tool: "word_count"}); err != nil {
		t.Fatal(err)
	}
	r.request(t, "u", "barrier2", "word_count", `{"text":"x"}`)
	r.finish(t, "u", "barrier2")
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d runs, want 3: the held call ran before its approval", n)
	}
	if _, err := r.c.Approve(ctx, "u", "ap-r", ""); err != nil {
		t.Fatal(err)
	}
	if _, last := r.finish(t, "u", "held"); last.(*events.ToolCompleted).Result != "3" {
		t.Fatalf("granted call: %#v", last)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d runs, want 4", n)
	}
}
