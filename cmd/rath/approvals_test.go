package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// The approval commands against a real ledger: a pending approval is
// listed, granted once, and the bad inputs are refused with their own exit
// codes: an unknown approval, a second decision, a rejection without a
// reason.
func TestApprovalCommands(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "ap")
	ok(t, url, "emit", "ap", events.TypeApprovalRequested, "--data",
		`{"approval_id":"ap-1","action":"git push","approver":"maintainers","call_id":"c1","tool":"run"}`)
	ok(t, url, "emit", "ap", events.TypeToolRequested, "--data",
		`{"call_id":"c1","tool":"run","agent":"coder","arguments":{"command":["git","push"]},"approval_id":"ap-1"}`)
	ok(t, url, "emit", "ap", events.TypeApprovalRequested, "--data", `{"approval_id":"ap-2","action":"deploy"}`)

	out := ok(t, url, "approvals")
	for _, want := range []string{"SESSION", "ap-1", "git push (run)", `{"command":["git","push"]}`, "maintainers", "ap-2", "deploy"} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals lacks %q:\n%s", want, out)
		}
	}
	var listed []struct {
		Session, Approver, Tool string
		ApprovalID              string `json:"approval_id"`
		Arguments               any
	}
	decode(t, ok(t, url, "approvals", "ap", "--json"), &listed)
	if len(listed) != 2 || listed[0].ApprovalID != "ap-1" || listed[0].Session != "ap" || listed[0].Tool != "run" || listed[0].Arguments == nil {
		t.Fatalf("approvals --json: %+v", listed)
	}

	ok(t, url, "approve", "ap", "ap-1", "--reason", "reviewed")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unknown approval", []string{"approve", "ap", "ap-9"}, exitNotPending, "unknown_approval"},
		{"second approve", []string{"approve", "ap", "ap-1"}, exitNotPending, "approval_settled"},
		{"reject after approve", []string{"reject", "ap", "ap-1", "--reason", "no"}, exitNotPending, "approval_settled"},
		{"reject without a reason", []string{"reject", "ap", "ap-2"}, exitUsage, "--reason"},
		{"approve without an ID", []string{"approve", "ap"}, exitUsage, "accepts 2 arg(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rath(t, url, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want exit %d and a message with %q", r.code, r.stderr, tc.code, tc.says)
			}
		})
	}
	ok(t, url, "reject", "ap", "ap-2", "--reason", "not today")
	if out := ok(t, url, "approvals", "ap"); strings.Contains(out, "ap-1") || strings.Contains(out, "ap-2") {
		t.Errorf("decided approvals still listed:\n%s", out)
	}
	if rej := ok(t, url, "rejects", "ap"); !strings.Contains(rej, "unknown_approval") || !strings.Contains(rej, "approval_settled") {
		t.Errorf("the refusals are not recorded:\n%s", rej)
	}
	var st struct {
		Approvals struct {
			Decided []struct {
				ID, Outcome, Actor string
			}
		}
	}
	decode(t, ok(t, url, "state", "ap", "--json"), &st)
	for _, d := range st.Approvals.Decided {
		if d.Actor != events.DefaultClient.String() {
			t.Errorf("approval %s %s by %q, want the authenticated %s", d.ID, d.Outcome, d.Actor, events.DefaultClient)
		}
	}
}

// A deadline is listed, and a decision after it is refused (exit 9); a
// decision by an identity without the approver role asked is refused
// (exit 8) and recorded with the session's rejections.
func TestApprovalDeadlineAndRole(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "dl")
	ok(t, url, "emit", "dl", events.TypeApprovalRequested, "--data",
		`{"approval_id":"ap-late","action":"deploy","approver":"maintainers","deadline":"2020-01-01T00:00:00Z","on_timeout":"reject"}`)
	ok(t, url, "emit", "dl", events.TypeApprovalRequested, "--data", `{"approval_id":"ap-lead","action":"release","approver":"leads"}`)
	if out := ok(t, url, "approvals", "dl"); !strings.Contains(out, "DEADLINE") || !strings.Contains(out, "2020-01-01T00:00:00Z then reject") {
		t.Errorf("approvals does not show the deadline:\n%s", out)
	}
	if r := rath(t, url, "approve", "dl", "ap-late"); r.code != exitNotPending || !strings.Contains(r.stderr, "approval_expired") {
		t.Errorf("approve after the deadline: exit %d, stderr %q", r.code, r.stderr)
	}
	// client.nk holds every role by default; here only maintainers.
	if err := os.WriteFile(filepath.Join(natstest.CredsDir(t, url), auth.ApproversFile), []byte("default/client maintainers\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := rath(t, url, "reject", "dl", "ap-lead", "--reason", "no"); r.code != exitDenied || !strings.Contains(r.stderr, "not_approver") ||
		!strings.Contains(r.stderr, `does not hold the approver role "leads"`) {
		t.Errorf("reject without the role: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := ok(t, url, "rejects", "dl"); !strings.Contains(out, "not_approver") {
		t.Errorf("the wrong-role refusal is not among the rejections:\n%s", out)
	}
	// A user made an approver of leads with rath creds add decides.
	dir := natstest.CredsDir(t, url)
	if r := rathWith(env{}, "creds", "add", "--dir", dir, "--tenant", "default", "--user", "lead", "--approver", "leads"); r.code != exitOK {
		t.Fatalf("creds add --approver: exit %d, stderr %q", r.code, r.stderr)
	}
	lead := events.Principal{Tenant: "default", User: "lead"}
	natstest.ConnectUser(t, url, lead)
	if r := rathWith(env{}, "--nats", url, "--creds", auth.UserPath(dir, lead), "reject", "dl", "ap-lead", "--reason", "not this week"); r.code != exitOK {
		t.Fatalf("the lead's rejection: exit %d, stderr %q", r.code, r.stderr)
	}
}
