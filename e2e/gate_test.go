package e2e_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// begin starts a session of a workflow in testdata without waiting for it.
func (r *rig) begin(t *testing.T, id, wfFile, workspace string) {
	t.Helper()
	r.startWorkflow(t, id, filepath.Join("testdata", wfFile), events.SessionStarted{Task: "push the fix", Labels: map[string]string{"workspace": workspace}})
}

// until watches session id from its start until pred holds for an event,
// and returns that event.
func (r *rig) until(t *testing.T, id string, what string, pred func(events.Stored) bool) events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var found events.Stored
	stop := errors.New("found")
	var types []string
	err := r.c.Watch(ctx, id, func(ev events.Stored) error {
		types = append(types, ev.Type)
		if pred(ev) {
			found = ev
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("%s: no %s: %v; log: %v", id, what, err, types)
	}
	return found
}

func ofType(typ string) func(events.Stored) bool {
	return func(ev events.Stored) bool { return ev.Type == typ }
}

// pendingGate waits for the session's gated call and returns its pending
// approval, as rath approvals lists it.
func (r *rig) pendingGate(t *testing.T, id string) client.PendingApproval {
	t.Helper()
	r.until(t, id, "approval request", ofType(events.TypeApprovalRequested))
	r.until(t, id, "end of the gated turn", ofType(events.TypeTurnCompleted))
	pending, err := r.c.Pending(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 {
		t.Fatalf("%s: pending approvals %+v, want the push", id, pending)
	}
	p := pending[0]
	if p.Action != "git push" || p.Approver != "maintainers" || p.Tool != "run" || p.Gate != "push" || p.Agent != "pusher" ||
		!strings.Contains(string(p.Arguments), `"git","push"`) || p.Requested.IsZero() {
		t.Fatalf("%s: pending approval %+v", id, p)
	}
	// The request is stored right before the call it gates, in the
	// answer's atomic append: no prefix of the log holds the call alone.
	st, err := r.c.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if call := st.Tools[p.CallID]; call == nil || call.Approval != p.ApprovalID || call.Seqs[0] != p.Seq+1 ||
		p.ApprovalID != workflow.ApprovalID(p.CallID, p.Approver, p.Action, call.Arguments) {
		t.Fatalf("%s: gated call %+v of approval %+v", id, call, p)
	}
	return p
}

// started reports whether the call ran in the session: a
// rath.tool.call.started of it.
func (r *rig) started(t *testing.T, id, callID string) []events.Stored {
	t.Helper()
	log, err := r.c.Log(context.Background(), id, client.Range{From: 1, Limit: api.MaxLogPage})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Stored
	for _, ev := range log {
		if ev.Type == events.TypeToolStarted && data[events.ToolStarted](t, ev).CallID == callID {
			out = append(out, ev)
		}
	}
	return out
}

// A rejected git push: the call fails with the reason without running, the
// agent reads the rejection as the call's result, and the session goes on
// to close.
func TestGateRejectionReachesTheAgent(t *testing.T) {
	r := start(t)
	r.begin(t, "rej", "gated.yaml", "repo")
	p := r.pendingGate(t, "rej")
	if _, err := r.c.Reject(context.Background(), "rej", p.ApprovalID, "pushes wait for the release"); err != nil {
		t.Fatal(err)
	}
	r.until(t, "rej", "close", ofType(events.TypeSessionClosed))
	st, err := r.c.State(context.Background(), "rej")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" {
		t.Fatalf("session ended %s (%s)", st.Outcome, st.CloseReason)
	}
	call := st.Tools[p.CallID]
	if call.Status != "failed" || !strings.Contains(call.Error, "pushes wait for the release") || len(r.started(t, "rej", p.CallID)) != 0 {
		t.Fatalf("rejected call %+v", call)
	}
	last := st.Chunks[len(st.Chunks)-1]
	if last.Agent != "pusher" || last.Content != "The push was rejected; I stop here." {
		t.Fatalf("the agent's answer after the rejection: %+v", last)
	}
	if a := st.Approvals[p.ApprovalID]; a.Outcome != "rejected" || a.Actor != events.DefaultClient.String() {
		t.Fatalf("approval %+v", a)
	}

	// A replay reproduces the human decision from the record: the same
	// gated call asks for the same approval, and the rejection is applied
	// again where it was.
	if testing.Short() {
		return
	}
	orig, err := replay.Read(context.Background(), r.c, "rej")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rerun.Reexecute(context.Background(), r.c, orig, rerun.Options{Runtime: runtime.DefaultConfig(),
		Wait: 2 * time.Minute, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reproduced || len(rep.External) != 1 || !rep.External[0].Applied || rep.External[0].Type != events.TypeApprovalRejected {
		t.Fatalf("replay of a rejection: %+v", rep)
	}
}

// A granted git push runs, in answer to the grant. A fork taken before the
// grant asks again (its approval is pending, and granting it there runs the
// call in the fork); a fork taken after it inherits the decision.
func TestGateGrantAndForks(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	r.begin(t, "push", "gated.yaml", "repo")
	p := r.pendingGate(t, "push")
	before, err := r.c.Fork(ctx, api.ForkRequest{Parent: "push", ID: "push-before", Reason: "before the grant"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.started(t, "push", p.CallID)) != 0 {
		t.Fatal("the gated call ran before its grant")
	}

	grant, err := r.c.Approve(ctx, "push", p.ApprovalID, "ship it")
	if err != nil {
		t.Fatal(err)
	}
	r.until(t, "push", "close", ofType(events.TypeSessionClosed))
	ran := r.started(t, "push", p.CallID)
	if len(ran) != 1 || ran[0].Causation != grant.ID {
		t.Fatalf("granted call ran %d times (%+v), want once in answer to the grant %s", len(ran), ran, grant.ID)
	}

	// After: the fork holds the grant and the call's run.
	st, err := r.c.State(ctx, "push")
	if err != nil {
		t.Fatal(err)
	}
	done := st.Tools[p.CallID].Seqs
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "push", At: done[len(done)-1], ID: "push-after"}); err != nil {
		t.Fatal(err)
	}
	if pending, err := r.c.Pending(ctx, "push-after"); err != nil || len(pending) != 0 {
		t.Fatalf("a fork after the grant waits for %+v (%v)", pending, err)
	}
	if _, err := r.c.Approve(ctx, "push-after", p.ApprovalID, ""); !errors.Is(err, api.ErrApprovalSettled) {
		t.Fatalf("approving the inherited grant again: %v, want approval_settled", err)
	}

	// Before: the fork asks again, and its own grant runs the call there.
	pending, err := r.c.Pending(ctx, before.Session)
	if err != nil || len(pending) != 1 || pending[0].ApprovalID != p.ApprovalID {
		t.Fatalf("a fork before the grant waits for %+v (%v), want the push again", pending, err)
	}
	if len(r.started(t, before.Session, p.CallID)) != 0 {
		t.Fatal("the parent's grant ran the call in the fork")
	}
	forkGrant, err := r.c.Approve(ctx, before.Session, p.ApprovalID, "")
	if err != nil {
		t.Fatal(err)
	}
	ev := r.until(t, before.Session, "the call's run", func(ev events.Stored) bool {
		return ev.Type == events.TypeToolStarted && ev.Seq > forkGrant.Seq
	})
	if ev.Causation != forkGrant.ID {
		t.Fatalf("the fork's call ran in answer to %s, not its grant %s", ev.Causation, forkGrant.ID)
	}
}
