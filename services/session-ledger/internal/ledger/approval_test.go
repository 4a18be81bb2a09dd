package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// A decision counts once, on an approval the session requested: a grant or
// rejection of an unknown approval, and a second decision, are refused with
// their own codes and recorded like every refusal; a retried decision gets
// its ack.
func TestApprovalDecisionsAreChecked(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "ap")
	r.emit(t, "ap", &events.ApprovalRequested{ApprovalID: "ap-1", Action: "git push", Approver: "maintainers", CallID: "c1", Tool: "run"})
	r.emit(t, "ap", &events.ApprovalRequested{ApprovalID: "ap-2", Action: "deploy"})

	refused := func(name string, data any, code api.Code, inMsg string) {
		t.Helper()
		n := len(r.rejections(t, "ap"))
		_, err := r.c.Emit(ctx, "ap", data)
		wantCode(t, err, code)
		if !strings.Contains(err.Error(), inMsg) {
			t.Errorf("%s: error %q does not say %q", name, err, inMsg)
		}
		if rej := r.rejections(t, "ap"); len(rej) != n+1 || rej[len(rej)-1].Code != string(code) {
			t.Errorf("%s: refusal not recorded: %+v", name, rej)
		}
	}
	refused("unknown grant", &events.ApprovalGranted{ApprovalID: "ap-9"}, api.CodeApprovalUnknown, `no approval "ap-9"`)
	refused("unknown rejection", &events.ApprovalRejected{ApprovalID: "ap-9", Reason: "no"}, api.CodeApprovalUnknown, `no approval "ap-9"`)

	grant := r.emit(t, "ap", &events.ApprovalGranted{ApprovalID: "ap-1", By: "ana"}, events.WithID("grant-1"))
	again, err := r.c.Emit(ctx, "ap", &events.ApprovalGranted{ApprovalID: "ap-1", By: "ana"}, events.WithID("grant-1"))
	if err != nil || !again.Duplicate || again.Seq != grant.Seq {
		t.Fatalf("a retried grant: %+v %v, want the ack of %d", again, err, grant.Seq)
	}
	refused("second grant", &events.ApprovalGranted{ApprovalID: "ap-1"}, api.CodeApprovalSettled, "granted already")
	refused("rejection after a grant", &events.ApprovalRejected{ApprovalID: "ap-1", Reason: "too late"}, api.CodeApprovalSettled, "granted already")
	refused("rejection without a reason", &events.ApprovalRejected{ApprovalID: "ap-2"}, api.CodeSchema, "reason")

	r.emit(t, "ap", &events.ApprovalRejected{ApprovalID: "ap-2", Reason: "not today"})
	refused("grant after a rejection", &events.ApprovalGranted{ApprovalID: "ap-2"}, api.CodeApprovalSettled, "rejected already")

	st, err := r.c.State(ctx, "ap")
	if err != nil {
		t.Fatal(err)
	}
	// The decider is the authenticated identity, whatever by says.
	if a := st.Approvals["ap-1"]; a.Outcome != "granted" || a.Actor != events.DefaultClient.String() || a.By != "ana" {
		t.Fatalf("ap-1 %+v", a)
	}
	if a := st.Approvals["ap-2"]; a.Outcome != "rejected" || a.Reason != "not today" {
		t.Fatalf("ap-2 %+v", a)
	}
	if !errors.Is(&api.Error{Code: api.CodeApprovalSettled}, api.ErrApprovalSettled) {
		t.Fatal("sentinel")
	}
}

// An approval with a deadline: a decision before it counts only from a
// principal holding the role asked; after it, no decision counts; the
// expiry is recorded only by a service, only once the deadline passed,
// only naming the approval's deadline, and once; an escalation moves the
// role and the deadline, and only the new role may decide.
func TestApprovalDeadlinesAndRoles(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
	_, nc := natstest.Start(t)
	r := serveWith(t, nc, "ledger-a", func(c *ledger.Config) {
		c.Approvers = func(p events.Principal) ([]string, error) {
			return map[string][]string{"default/client": {"maintainers"}, "default/lead": {"leads"}}[p.String()], nil
		}
	})
	r.l.SetClock(clk.Now)
	ctx := context.Background()
	timer, err := client.New(nc, client.As(events.Service("selector")), client.WithRetryFor(0))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := client.New(nc, client.As(events.Principal{Tenant: "default", User: "lead"}), client.WithRetryFor(0))
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, "dl")
	r.emit(t, "dl", &events.ApprovalRequested{ApprovalID: "ap-1", Action: "git push", Approver: "leads", Deadline: "2026-01-05T09:30:00Z", OnTimeout: events.TimeoutReject})
	r.emit(t, "dl", &events.ApprovalRequested{ApprovalID: "ap-2", Action: "deploy", Approver: "maintainers", Deadline: "2026-01-05T09:30:00Z",
		OnTimeout: events.TimeoutEscalate, EscalateTo: "leads", EscalateDeadline: "2026-01-05T10:30:00Z"})

	n := len(r.rejections(t, "dl"))
	_, err = r.c.Emit(ctx, "dl", &events.ApprovalGranted{ApprovalID: "ap-1"})
	wantCode(t, err, api.CodeNotApprover)
	if !strings.Contains(err.Error(), `default/client does not hold the approver role "leads" (its roles: maintainers)`) {
		t.Errorf("wrong-role refusal says %q", err)
	}
	if rej := r.rejections(t, "dl"); len(rej) != n+1 || rej[n].Code != string(api.CodeNotApprover) || rej[n].Actor != "default/client" {
		t.Errorf("the wrong-role refusal is not recorded: %+v", rej)
	}
	expiry := func(id, deadline, on string) *events.ApprovalExpired {
		return &events.ApprovalExpired{ApprovalID: id, Deadline: deadline, OnTimeout: on}
	}
	_, err = timer.Emit(ctx, "dl", expiry("ap-1", "2026-01-05T09:30:00Z", events.TimeoutReject))
	wantCode(t, err, api.CodeTransition) // not yet
	_, err = r.c.Emit(ctx, "dl", expiry("ap-1", "2026-01-05T09:30:00Z", events.TimeoutReject))
	wantCode(t, err, api.CodeTransition) // not by a user

	clk.Advance(30 * time.Minute)
	_, err = lead.Emit(ctx, "dl", &events.ApprovalGranted{ApprovalID: "ap-1"})
	wantCode(t, err, api.CodeApprovalExpired) // late, though not yet recorded
	_, err = timer.Emit(ctx, "dl", expiry("ap-1", "2026-01-05T09:00:00Z", events.TimeoutReject))
	wantCode(t, err, api.CodeTransition) // another deadline
	first, err := timer.Emit(ctx, "dl", expiry("ap-1", "2026-01-05T09:30:00Z", events.TimeoutReject), events.WithID("exp-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := timer.Emit(ctx, "dl", expiry("ap-1", "2026-01-05T09:30:00Z", events.TimeoutReject), events.WithID("exp-1")); err != nil || again.Seq != first.Seq {
		t.Fatalf("a timer delivered twice: %+v %v, want the ack of %d", again, err, first.Seq)
	}
	_, err = lead.Emit(ctx, "dl", &events.ApprovalRejected{ApprovalID: "ap-1", Reason: "late"})
	wantCode(t, err, api.CodeApprovalExpired)

	timer.Emit(ctx, "dl", &events.ApprovalExpired{ApprovalID: "ap-2", Deadline: "2026-01-05T09:30:00Z", OnTimeout: events.TimeoutEscalate,
		Approver: "maintainers", EscalatedTo: "leads", NextDeadline: "2026-01-05T10:30:00Z"})
	_, err = r.c.Emit(ctx, "dl", &events.ApprovalGranted{ApprovalID: "ap-2"})
	wantCode(t, err, api.CodeNotApprover) // maintainers were asked before the escalation
	r.emit(t, "dl", &events.ApprovalRequested{ApprovalID: "ap-3", Action: "anyone's"})
	r.emit(t, "dl", &events.ApprovalGranted{ApprovalID: "ap-3"})
	if _, err := lead.Emit(ctx, "dl", &events.ApprovalGranted{ApprovalID: "ap-2"}); err != nil {
		t.Fatal(err)
	}
	st, err := r.c.State(ctx, "dl")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Approvals["ap-1"]; a.Outcome != "expired" || a.Actor != "rath/selector" || a.DecidedSeq != first.Seq {
		t.Errorf("ap-1 %+v", a)
	}
	if a := st.Approvals["ap-2"]; a.Outcome != "granted" || a.Actor != "default/lead" || a.Approver != "leads" || a.EscalatedFrom != "maintainers" || a.Deadline != "2026-01-05T10:30:00Z" {
		t.Errorf("ap-2 %+v", a)
	}
}

// Nobody asks for an approval again under its ID (which would replace who
// is asked, and let a tenant's user ask itself), and nobody but Rath's
// services clears a tool call's gate; a user's refusals are recorded. A
// retried request gets its ack.
func TestApprovalRequestsAndClearancesAreChecked(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "rq")
	ask := &events.ApprovalRequested{ApprovalID: "ap-1", Action: "run call", Approver: "leads", CallID: "c1", Tool: "run"}
	first := r.emit(t, "rq", ask, events.WithID("ask-1"))
	if again, err := r.c.Emit(ctx, "rq", ask, events.WithID("ask-1")); err != nil || again.Seq != first.Seq {
		t.Fatalf("a retried request: %+v %v, want the ack of %d", again, err, first.Seq)
	}
	runner, err := client.New(r.nc, client.As(events.Service("tool-runner")), client.WithRetryFor(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *client.Client
		data any
		says string
	}{
		{"the same approval asked again, of another role", r.c, &events.ApprovalRequested{ApprovalID: "ap-1", Action: "run call", CallID: "c1", Tool: "run"}, "requested already"},
		{"by a service too", runner, &events.ApprovalRequested{ApprovalID: "ap-1", Action: "run call", Approver: "leads", CallID: "c1", Tool: "run"}, "requested already"},
		{"a user clears a call", r.c, &events.ToolCleared{CallID: "c1", Tool: "run"}, "only the tool runner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(r.rejections(t, "rq"))
			_, err := tc.c.Emit(ctx, "rq", tc.data)
			wantCode(t, err, api.CodeTransition)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %v does not say %q", err, tc.says)
			}
			if rej := r.rejections(t, "rq"); tc.c == r.c && len(rej) != n+1 {
				t.Errorf("refusal not recorded: %+v", rej)
			}
		})
	}
	if _, err := runner.Emit(ctx, "rq", &events.ToolCleared{CallID: "c1", Tool: "run"}); err != nil {
		t.Fatalf("the tool runner's clearance: %v", err)
	}
	st, err := r.c.State(ctx, "rq")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Approvals["ap-1"]; a.Approver != "leads" || a.Seq != first.Seq {
		t.Fatalf("the approval was replaced: %+v", a)
	}
}
