package worker_test

import (
	"slices"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// A call a gate holds is recorded right after its approval request, in the
// answer's atomic append, and names it; a call no gate holds is recorded
// as before.
func TestWorkerRecordsGatedCallsWithTheirApproval(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupFile(t, nc, "testdata/gated.yaml", "")
	m := answering(toolUse)
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	r.start(t, "g1")
	req := r.request(t, "g1", "turn-1", "coder")
	r.end(t, req)

	got := caused(r.log(t, "g1"), req)
	want := []string{events.TypeChunkAppended, events.TypeToolRequested, events.TypeApprovalRequested, events.TypeToolRequested,
		events.TypeModelCalled, events.TypeTurnCompleted}
	if !slices.Equal(typesOf(got), want) {
		t.Fatalf("events caused by the request: %v, want %v", typesOf(got), want)
	}
	if got[2].ID != events.DerivedID(worker.Durable, req.ID, "approval-1") {
		t.Errorf("approval request's ID %s is not derived from the turn", got[2].ID)
	}
	free, ask, held := decode[events.ToolRequested](t, got[1]), decode[events.ApprovalRequested](t, got[2]), decode[events.ToolRequested](t, got[3])
	if free.ApprovalID != "" {
		t.Errorf("go test is not gated, yet waits for %s", free.ApprovalID)
	}
	wantID := workflow.ApprovalID(held.CallID, "maintainers", "go vet", held.Arguments)
	if *ask != (events.ApprovalRequested{ApprovalID: wantID, Action: "go vet", Approver: "maintainers", CallID: held.CallID, Tool: "run", Gate: "vet"}) {
		t.Errorf("approval request %+v", ask)
	}
	if held.ApprovalID != wantID || held.CallID != "turn-1-1" {
		t.Errorf("gated call %+v", held)
	}
}
