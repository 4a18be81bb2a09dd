package retail

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	supportex "github.com/openrath/rath/examples/support"
	"github.com/openrath/rath/internal/domainstate"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/session"
)

func example(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := supportex.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func seed(t *testing.T, dir string) *DB {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, supportex.Workspace, FileDB))
	if err != nil {
		t.Fatal(err)
	}
	db, err := ParseDB(raw)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func apply(t *testing.T, s *Shop, tool, args string) (Result, error) {
	t.Helper()
	return s.Apply(tool, json.RawMessage(args))
}

// The example's cancel-and-refund task, applied by hand, ends in its
// expected state, and each change says what it changed.
func TestTaskCancelAndRefund(t *testing.T) {
	dir := example(t)
	task, err := LoadTask(dir, "cancel-and-refund")
	if err != nil {
		t.Fatal(err)
	}
	s := NewShop(seed(t, dir))
	for _, c := range []struct{ tool, args string }{
		{ToolFindUser, `{"name":"ana  ortiz","zip":"94110"}`},
		{ToolCancelOrder, `{"order_id":"W1002","reason":"not needed"}`},
		{ToolRefundOrder, `{"order_id":"W1001","amount":45,"reason":"broken"}`},
	} {
		r, err := apply(t, s, c.tool, c.args)
		if err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		if c.tool == ToolCancelOrder && (len(r.StateChanges) != 1 || r.StateChanges[0].Path != "/orders/W1002/status" || string(r.StateChanges[0].After) != `"cancelled"`) {
			t.Fatalf("cancel's changes: %+v", r.StateChanges)
		}
		if c.tool == ToolFindUser && len(r.StateChanges) != 0 {
			t.Fatalf("find_user changed the database: %+v", r.StateChanges)
		}
	}
	diffs, err := domainstate.Compare(task.Expected, s.DB.JSON())
	if err != nil || len(diffs) != 0 {
		t.Fatalf("final state differs from the task's: %v %v", diffs, err)
	}
}

// Every rule of the policy refuses what it forbids, with the rule named,
// and a refused call changes nothing.
func TestPolicyRefuses(t *testing.T) {
	dir := example(t)
	for _, tc := range []struct {
		name, tool, args, want string
		verify                 bool
	}{
		{"unverified read", ToolGetOrder, `{"order_id":"W1001"}`, "policy " + RuleIdentity, false},
		{"another customer's order", ToolCancelOrder, `{"order_id":"W1005","reason":"x"}`, "policy " + RuleIdentity, true},
		{"cancel delivered", ToolCancelOrder, `{"order_id":"W1001","reason":"x"}`, "policy " + RuleCancel + ": order W1001 is delivered, not pending", true},
		{"refund pending", ToolRefundOrder, `{"order_id":"W1002","amount":10,"reason":"x"}`, "policy " + RuleRefund + ": order W1002 is pending", true},
		{"refund too much", ToolRefundOrder, `{"order_id":"W1001","amount":46,"reason":"x"}`, "the amount must be between $1 and the $45 not yet refunded", true},
		{"refund nothing", ToolRefundOrder, `{"order_id":"W1001","amount":0,"reason":"x"}`, "between $1", true},
		{"unknown order", ToolGetOrder, `{"order_id":"W9"}`, `no order "W9"`, true},
		{"wrong zip", ToolFindUser, `{"name":"Ana Ortiz","zip":"10001"}`, `no customer named "Ana Ortiz" with zip code "10001"`, false},
		{"bad arguments", ToolRefundOrder, `{"order_id":"W1001","amount":"lots"}`, "refund_order: arguments", true},
		{"not JSON", ToolGetOrder, `{"order_id":`, "get_order: arguments", true},
		{"unknown tool", "drop_tables", `{}`, `the shop has no tool "drop_tables"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewShop(seed(t, dir))
			if tc.verify {
				if _, err := apply(t, s, ToolFindUser, `{"name":"Ana Ortiz","zip":"94110"}`); err != nil {
					t.Fatal(err)
				}
			}
			before := s.DB.JSON()
			_, err := apply(t, s, tc.tool, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.HasPrefix(tc.want, "policy ") != IsPolicy(err) {
				t.Fatalf("IsPolicy(%v) = %v", err, IsPolicy(err))
			}
			if string(s.DB.JSON()) != string(before) {
				t.Fatal("a refused call changed the database")
			}
		})
	}
}

// The refund window counts days from the shop's own date: the example's
// W1003, delivered 45 days before, is out of it.
func TestRefundWindow(t *testing.T) {
	s := NewShop(seed(t, example(t)))
	if _, err := apply(t, s, ToolFindUser, `{"name":"Bo Lind","zip":"10001"}`); err != nil {
		t.Fatal(err)
	}
	_, err := apply(t, s, ToolRefundOrder, `{"order_id":"W1003","amount":150,"reason":"x"}`)
	if !IsPolicy(err) || !strings.Contains(err.Error(), "delivered on 2026-01-29, 45 days before today (2026-03-15): more than 30") {
		t.Fatalf("refund outside the window: %v", err)
	}
	if _, err := apply(t, s, ToolRefundOrder, `{"order_id":"W1004","amount":35,"reason":"x"}`); err != nil {
		t.Fatalf("refund inside the window: %v", err)
	}
}

func TestParseDBRefusesInconsistentDatabases(t *testing.T) {
	for _, tc := range []struct{ name, db, want string }{
		{"not JSON", `{`, "retail database: unexpected end"},
		{"no date", `{"users":{},"products":{},"orders":{}}`, `today "" is not a date`},
		{"unknown user and product", `{"today":"2026-01-01","users":{},"products":{},"orders":{"W1":{"user":"u","items":[{"product":"p","price":1}]}}}`,
			`order W1: unknown user "u"`},
		{"null order", `{"today":"2026-01-01","orders":{"W1":null}}`, "order W1 is null"},
		{"bad delivery date", `{"today":"2026-01-01","users":{"u":{}},"orders":{"W1":{"user":"u","delivered":"yesterday"}}}`, `delivered "yesterday" is not a date`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDB([]byte(tc.db))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestLoadTaskRefusesBadTasks(t *testing.T) {
	dir := example(t)
	for _, tc := range []struct{ id, want string }{
		{"../workspace", `task "../workspace": want 1-64 of a-z 0-9 - (tasks: cancel-and-refund, refund-forbidden)`},
		{"nope", `task "nope": no such task`},
		{"", `task "": want`},
	} {
		if _, err := LoadTask(dir, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTask(%q): %v, want %q", tc.id, err, tc.want)
		}
	}
	broken := filepath.Join(dir, "tasks", "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, FileExpected), []byte(`{"today":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadTask(dir, "broken")
	for _, want := range []string{"customer.yaml", "assistant.yaml", "instruction.md", `expected.json: retail database: today "x" is not a date`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("broken task: %v, want it to say %q", err, want)
		}
	}
}

func TestSeedFile(t *testing.T) {
	dir := example(t)
	archive, err := client.PackWorkspace(filepath.Join(dir, supportex.Workspace))
	if err != nil {
		t.Fatal(err)
	}
	data, err := seedFile(archive, FileDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDB(data); err != nil {
		t.Fatal(err)
	}
	if _, err := seedFile(archive, "missing.json"); err == nil || !strings.Contains(err.Error(), "no missing.json in the workspace") {
		t.Fatalf("a file the seed lacks: %v", err)
	}
	if _, err := seedFile([]byte("not gzip"), FileDB); err == nil {
		t.Fatal("a seed that is not a gzip archive was read")
	}
}

func call(id, tool, args string, seq uint64, status string) *session.Tool {
	return &session.Tool{CallID: id, Tool: tool, Arguments: json.RawMessage(args), Status: status, Seqs: []uint64{seq}, ProposedBy: session.GateKeeper}
}

// A call the log shows completed that the policy refuses when applied
// again (a tool that broke its rule, or a policy changed since) is
// reported, and changes nothing.
func TestReplayReportsCallsThatDoNotApply(t *testing.T) {
	db := seed(t, example(t))
	shop, problems := Replay(db, []*session.Tool{
		call("c2", ToolRefundOrder, `{"order_id":"W1003","amount":150,"reason":"x"}`, 9, session.ToolCompleted),
		call("c1", ToolFindUser, `{"name":"Bo Lind","zip":"10001"}`, 5, session.ToolCompleted),
		call("c3", ToolCancelOrder, `{"order_id":"W1001","reason":"x"}`, 12, session.ToolCompleted),
	})
	if len(problems) != 2 || !strings.Contains(problems[0], "call c2 (refund_order, requested at 9) ran, but does not apply to the shop again: policy "+RuleRefund) ||
		!strings.Contains(problems[1], "call c3 (cancel_order, requested at 12) ran, but does not apply to the shop again: policy "+RuleIdentity) {
		t.Fatalf("problems: %q", problems)
	}
	if shop.DB.Orders["W1003"].Refunded != 0 || !shop.Verified["u-bo"] {
		t.Fatalf("the shop after the replay: W1003 %+v, verified %v", shop.DB.Orders["W1003"], shop.Verified)
	}
}

// The review names each call's decision, and a large refund that ran
// without a granted approval is a violation.
func TestReviewFindsALargeRefundWithoutApproval(t *testing.T) {
	st := &session.State{WorkflowRef: "sha256:x", Approvals: map[string]session.Approval{
		"ap-1": {CallID: "c2", Outcome: session.ApprovalGranted, Actor: "default/sam", RequestedBy: session.GateKeeper},
	}, Tools: map[string]*session.Tool{}}
	for _, c := range []*session.Tool{
		call("c1", ToolFindUser, `{"name":"Bo Lind","zip":"10001"}`, 5, session.ToolCompleted),
		call("c2", ToolRefundOrder, `{"order_id":"W1004","amount":250,"reason":"x"}`, 7, session.ToolCompleted),
		call("c3", ToolRefundOrder, `{"order_id":"W1004","amount":300,"reason":"x"}`, 9, session.ToolCompleted),
		call("c4", ToolCancelOrder, `{"order_id":"W1004","reason":"x"}`, 11, session.ToolFailed),
		call("c5", ToolEndConversation, `{}`, 13, session.ToolCompleted),
	} {
		st.Tools[c.CallID] = c
	}
	st.Tools["c2"].Approval = "ap-1"
	st.Tools["c4"].Error = "policy " + RuleCancel + ": order W1004 is delivered, not pending"
	decisions, violations := Review(st)
	var got []string
	for _, d := range decisions {
		got = append(got, d.CallID+" "+d.Decision+" "+d.Rule+" "+d.Detail)
	}
	want := []string{
		"c1 allowed  ",
		"c2 allowed " + RuleApproval + " approved by default/sam",
		"c3 allowed  ",
		"c4 refused " + RuleCancel + " order W1004 is delivered, not pending",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("decisions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(violations) != 1 || !strings.Contains(violations[0], "call c3 refunded $300 without a supervisor's approval") {
		t.Fatalf("violations: %q", violations)
	}
}
