package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
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
