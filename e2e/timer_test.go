package e2e_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// The durable timers of issue 15 (ADR 0026), driven by the server's real
// scheduler with deadlines of one or two seconds: each test waits for the
// event the timer records, never for a time.

// expiries returns the session's rath.approval.expired events.
func (r *rig) expiries(t *testing.T, id string) []*events.ApprovalExpired {
	t.Helper()
	log, err := r.c.Log(context.Background(), id, client.Range{From: 1, Limit: api.MaxLogPage})
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.ApprovalExpired
	for _, ev := range log {
		if ev.Type == events.TypeApprovalExpired {
			if ev.Actor != "rath/selector" || ev.Source != "rath/timer" {
				t.Errorf("expiry %d by %s from %s", ev.Seq, ev.Actor, ev.Source)
			}
			out = append(out, data[events.ApprovalExpired](t, ev))
		}
	}
	return out
}

// A gated push nobody decides in time: its approval expires once, the call
// fails with the expiry without running, the agent reads it and goes on to
// close the session; a decision after the expiry is refused.
func TestGateTimeoutRejects(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	r.begin(t, "late", "timed-reject.yaml", "repo")
	p := r.pendingGate(t, "late")
	if p.Deadline == "" || p.OnTimeout != events.TimeoutReject {
		t.Fatalf("pending approval without its deadline: %+v", p)
	}
	r.until(t, "late", "close", ofType(events.TypeSessionClosed))
	st, err := r.c.State(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" {
		t.Fatalf("session ended %s (%s)", st.Outcome, st.CloseReason)
	}
	a := st.Approvals[p.ApprovalID]
	if a.Outcome != session.ApprovalExpired || a.Actor != "rath/selector" {
		t.Fatalf("approval %+v", a)
	}
	if x := r.expiries(t, "late"); len(x) != 1 || x[0].Deadline != p.Deadline || x[0].OnTimeout != events.TimeoutReject || x[0].Approver != "maintainers" {
		t.Fatalf("expiries %+v, want one of %s", x, p.Deadline)
	}
	call := st.Tools[p.CallID]
	if call.Status != session.ToolFailed || !strings.Contains(call.Error, "not approved in time") || len(r.started(t, "late", p.CallID)) != 0 {
		t.Fatalf("expired call %+v", call)
	}
	if last := st.Chunks[len(st.Chunks)-1]; last.Content != "No approval in time; I stop here." {
		t.Fatalf("the agent's answer after the expiry: %+v", last)
	}
	// A replay reproduces the expiry with its own timer: the deadlines
	// differ, the events agree.
	if !testing.Short() {
		orig, err := replay.Read(ctx, r.c, "late")
		if err != nil {
			t.Fatal(err)
		}
		rep, err := rerun.Reexecute(ctx, r.c, orig, rerun.Options{Runtime: runtime.DefaultConfig(),
			Wait: 2 * time.Minute, Idle: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Reproduced || len(rep.External) != 0 {
			t.Fatalf("replay of an expiry: %+v", rep)
		}
	}

	// A fork taken after the expiry inherits it: a decision there is
	// refused as expired (in the closed session itself, as closed).
	expired := r.until(t, "late", "expiry", ofType(events.TypeApprovalExpired))
	fork, err := r.c.Fork(ctx, api.ForkRequest{Parent: "late", At: expired.Seq, ID: "late-after"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Approve(ctx, fork.Session, p.ApprovalID, "too late"); !errors.Is(err, api.ErrApprovalExpired) {
		t.Fatalf("approve after the expiry: %v, want approval_expired", err)
	}
}

// An approval escalated on timeout asks the next role: the role first asked
// may no longer decide, a user without the role is refused (and the
// refusal recorded), and a lead's grant runs the call.
func TestGateTimeoutEscalates(t *testing.T) {
	dev := events.Principal{Tenant: "default", User: "dev"}
	lead := events.Principal{Tenant: "default", User: "lead"}
	r := startUsers(t, dev, lead)
	ctx := context.Background()
	if err := auth.AddApproverRoles(natstest.CredsDir(t, r.url), dev, "maintainers"); err != nil {
		t.Fatal(err)
	}
	if err := auth.AddApproverRoles(natstest.CredsDir(t, r.url), lead, "leads"); err != nil {
		t.Fatal(err)
	}
	devc, err := client.New(natstest.ConnectUser(t, r.url, dev), client.As(dev))
	if err != nil {
		t.Fatal(err)
	}
	leadc, err := client.New(natstest.ConnectUser(t, r.url, lead), client.As(lead))
	if err != nil {
		t.Fatal(err)
	}
	r.begin(t, "esc", "timed-escalate.yaml", "repo")
	p := r.pendingGate(t, "esc")
	r.until(t, "esc", "escalation", ofType(events.TypeApprovalExpired))
	x := r.expiries(t, "esc")
	if len(x) != 1 || x[0].OnTimeout != events.TimeoutEscalate || x[0].EscalatedTo != "leads" || x[0].NextDeadline == "" {
		t.Fatalf("escalation %+v", x)
	}
	pending, err := r.c.Pending(ctx, "esc")
	if err != nil || len(pending) != 1 || pending[0].Approver != "leads" || pending[0].EscalatedFrom != "maintainers" || pending[0].Deadline != x[0].NextDeadline {
		t.Fatalf("pending after the escalation %+v (%v)", pending, err)
	}
	_, err = devc.Approve(ctx, "esc", p.ApprovalID, "")
	if !errors.Is(err, api.ErrNotApprover) || !strings.Contains(err.Error(), `default/dev does not hold the approver role "leads"`) {
		t.Fatalf("a maintainer's grant after the escalation: %v, want not_approver", err)
	}
	var refused []string
	if err := r.c.Rejections(ctx, "esc", func(rj eventstore.Rejection) error {
		refused = append(refused, rj.Code+" "+rj.Actor)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0] != "not_approver default/dev" {
		t.Fatalf("rejections %v, want the maintainer's grant", refused)
	}
	grant, err := leadc.Approve(ctx, "esc", p.ApprovalID, "ship it")
	if err != nil {
		t.Fatal(err)
	}
	r.until(t, "esc", "close", ofType(events.TypeSessionClosed))
	if ran := r.started(t, "esc", p.CallID); len(ran) != 1 || ran[0].Causation != grant.ID {
		t.Fatalf("the lead's grant ran the call %d times: %+v", len(ran), ran)
	}
	st, err := r.c.State(ctx, "esc")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Approvals[p.ApprovalID]; a.Outcome != session.ApprovalGranted || a.Actor != "default/lead" {
		t.Fatalf("approval %+v", a)
	}
}

// An approval whose timeout closes the session: the expiry, then the
// selector's decision to close, with the approval named in the reason.
func TestGateTimeoutCloses(t *testing.T) {
	r := start(t)
	r.begin(t, "shut", "timed-close.yaml", "repo")
	p := r.pendingGate(t, "shut")
	r.until(t, "shut", "close", ofType(events.TypeSessionClosed))
	st, err := r.c.State(context.Background(), "shut")
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "approval_expired" || !strings.Contains(st.CloseReason, p.ApprovalID) || st.Approvals[p.ApprovalID].Outcome != session.ApprovalExpired {
		t.Fatalf("session ended %s (%s), approval %+v", st.Outcome, st.CloseReason, st.Approvals[p.ApprovalID])
	}
	if d := st.Decisions[len(st.Decisions)-1]; d.Rule != "timeout" || d.Route != "close:approval_expired" {
		t.Fatalf("last decision %+v", d)
	}
	if x := r.expiries(t, "shut"); len(x) != 1 || x[0].OnTimeout != events.TimeoutClose {
		t.Fatalf("expiries %+v", x)
	}

	// A fork taken while the approval was pending holds it, with its
	// deadline, and times it out on its own.
	fork, err := r.c.Fork(context.Background(), api.ForkRequest{Parent: "shut", At: p.Seq + 1, ID: "shut-fork"})
	if err != nil {
		t.Fatal(err)
	}
	r.until(t, fork.Session, "close", ofType(events.TypeSessionClosed))
	if st, err = r.c.State(context.Background(), fork.Session); err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "approval_expired" || len(r.expiries(t, fork.Session)) != 1 {
		t.Fatalf("fork ended %s (%s), expiries %+v", st.Outcome, st.CloseReason, r.expiries(t, fork.Session))
	}
}

// A rule's approval route waits with a deadline as a gate does: nobody
// deciding in time closes the session, once.
func TestRuleApprovalTimesOut(t *testing.T) {
	r := start(t)
	r.begin(t, "ask", "rule-timed.yaml", "repo")
	r.until(t, "ask", "close", ofType(events.TypeSessionClosed))
	st, err := r.c.State(context.Background(), "ask")
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for k, a := range st.Approvals {
		if a.Action == "release the build" && a.Approver == "maintainers" {
			id = k
		}
	}
	if id == "" || st.Approvals[id].Outcome != session.ApprovalExpired || st.Outcome != "approval_expired" {
		t.Fatalf("session ended %s (%s), approvals %+v", st.Outcome, st.CloseReason, st.Approvals)
	}
	if x := r.expiries(t, "ask"); len(x) != 1 || x[0].OnTimeout != events.TimeoutClose {
		t.Fatalf("expiries %+v", x)
	}
}

// A session nobody routes is closed by its wall time, on time, without an
// event of its own to notice it.
func TestWallTimeClosesAnIdleSession(t *testing.T) {
	r := start(t)
	r.begin(t, "idle", "idle.yaml", "")
	closed := r.until(t, "idle", "close", ofType(events.TypeSessionClosed))
	c := data[events.SessionClosed](t, closed)
	if c.Outcome != "budget_exceeded" || !strings.Contains(c.Reason, "wall_time=2s") || closed.Source != "rath/timer" || closed.Seq != 2 {
		t.Fatalf("close %d from %s: %+v", closed.Seq, closed.Source, c)
	}
}
