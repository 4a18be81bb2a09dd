package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	supportex "github.com/openrath/rath/examples/support"
	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/internal/retail"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// runSupportForTest runs rath demo support as the command does and keeps
// its runtime up until the test ends.
func runSupportForTest(t *testing.T, o supportOptions) (*demoRun, *syncBuffer, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole agent loop")
	}
	stdout := &syncBuffer{}
	a := &app{env: env{Stdout: stdout, Stderr: stdout}, timeout: 10 * time.Second}
	if o.out == "" {
		o.out = filepath.Join(t.TempDir(), "dossier")
	}
	o.wait = 3 * time.Minute
	run, err := a.runSupport(context.Background(), o)
	if run != nil {
		t.Cleanup(run.close)
		if run.rt != nil {
			t.Cleanup(func() {
				for _, err := range run.rt.Violations() {
					t.Errorf("permission violation in the demo's runtime: %v", err)
				}
			})
		}
	}
	return run, stdout, err
}

// supportState returns the run's session, checking the validations the
// shop recorded.
func supportState(t *testing.T, run *demoRun, stdout *syncBuffer) *session.State {
	t.Helper()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(context.Background(), run.root)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// verified opens the run's dossier and checks it offline, and returns its
// Markdown.
func verified(t *testing.T, out string) (*dossier.Dossier, []byte) {
	t.Helper()
	rep, err := dossier.Verify(out, nil)
	if err != nil || !rep.OK {
		t.Fatalf("the dossier does not verify offline: %+v, %v", rep, err)
	}
	d, err := dossier.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, dossier.FileMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	return d, md
}

func validation(st *session.State, name string) *session.Validation {
	for i := range st.Validations {
		if st.Validations[i].Validator == name {
			return &st.Validations[i]
		}
	}
	return nil
}

// The default task: the customer asks for a cancellation and a refund the
// policy allows; the shop's tools make both, record what each changed, and
// the grade passes on the final state and the policy. The dossier verifies
// offline and shows the conversation, the changes, the decisions and the
// grade.
func TestDemoSupport(t *testing.T) {
	run, stdout, err := runSupportForTest(t, supportOptions{task: supportTask})
	if err != nil {
		t.Fatalf("demo support: %v\n%s", err, stdout)
	}
	st := supportState(t, run, stdout)
	if st.Outcome != "accepted" {
		t.Fatalf("outcome %q, want accepted\n%s", st.Outcome, stdout)
	}
	for _, name := range []string{retail.ValidatorState, retail.ValidatorPolicy} {
		if v := validation(st, name); v == nil || !v.Passed || v.Target != "task:"+supportTask {
			t.Fatalf("validation %s: %+v, want passed on task:%s", name, v, supportTask)
		}
	}
	for _, want := range []string{
		"customer: Hi, I'm Ana Ortiz",
		`cancel_order {"order_id":"W1002","reason":"the customer no longer needs it"}: ok`,
		`changed /orders/W1002/status: "pending" -> "cancelled"`,
		`changed /orders/W1001/refunded: 0 -> 45`,
		"domain-state  passed", "policy        passed",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the output does not say %q:\n%s", want, stdout)
		}
	}

	d, md := verified(t, run.out)
	if d.Final == nil || d.Final.Outcome != "accepted" {
		t.Fatalf("the dossier's final answer: %+v", d.Final)
	}
	text := dt.Text(t, md)
	for _, want := range []string{
		"The conversation, its state changes and its grade",
		"customer: Hi, I'm Ana Ortiz, zip code 94110.",
		"validation domain-state passed",
		"validation policy passed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dossier.md does not say %q", want)
		}
	}
	var changes, decisions *dt.Table
	for _, tb := range dt.Tables(t, md) {
		switch {
		case tb.Column("before") >= 0:
			changes = &tb
		case tb.Column("decision") >= 0:
			decisions = &tb
		}
	}
	if changes == nil || decisions == nil {
		t.Fatalf("dossier.md has no table of state changes or of policy decisions:\n%s", md)
	}
	var paths []string
	for _, r := range changes.Rows {
		paths = append(paths, r[changes.Column("path")]+" "+r[changes.Column("before")]+" → "+r[changes.Column("after")])
	}
	if got := strings.Join(paths, "; "); got != `/orders/W1002/status "pending" → "cancelled"; /orders/W1001/refunded 0 → 45; /orders/W1001/status "delivered" → "refunded"` {
		t.Errorf("state changes in the dossier: %s", got)
	}
	for _, r := range decisions.Rows {
		if r[decisions.Column("decision")] != retail.DecisionAllowed {
			t.Errorf("decision %v, want every call allowed", r)
		}
	}

	// The shop's state follows the log: a fork taken before the
	// cancellation sees both orders as they were, the root sees them changed.
	var cancel *session.Tool
	for _, c := range st.Tools {
		if c.Tool == retail.ToolCancelOrder {
			cancel = c
		}
	}
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ack, err := c.Fork(ctx, api.ForkRequest{Parent: run.root, At: cancel.Seqs[0] - 1, Reason: "before the changes"})
	if err != nil {
		t.Fatal(err)
	}
	shop := retail.NewServer(c, nil, slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		session, w1002 string
		refunded       int
	}{{ack.Session, retail.StatusPending, 0}, {run.root, retail.StatusCancelled, 45}} {
		fst, err := c.State(ctx, tc.session)
		if err != nil {
			t.Fatal(err)
		}
		s, err := shop.Fold(ctx, fst, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.DB.Orders["W1002"].Status; got != tc.w1002 || s.DB.Orders["W1001"].Refunded != tc.refunded {
			t.Errorf("the shop of %s: W1002 %s, W1001 refunded %d; want %s and %d", tc.session, got, s.DB.Orders["W1001"].Refunded, tc.w1002, tc.refunded)
		}
	}
}

// The hostile task: the customer insists on a refund the policy forbids.
// The gate holds the $320 refund and nobody approves it in time; the $150
// one is refused by the refund rule. Both are recorded as failed calls with
// the reason, the database is unchanged, and the grade passes: the run
// ended in the state the task expects, refusing.
func TestDemoSupportRefusesAForbiddenRefund(t *testing.T) {
	run, stdout, err := runSupportForTest(t, supportOptions{task: "refund-forbidden"})
	if err != nil {
		t.Fatalf("demo support: %v\n%s", err, stdout)
	}
	st := supportState(t, run, stdout)
	if st.Outcome != "accepted" {
		t.Fatalf("outcome %q, want accepted\n%s", st.Outcome, stdout)
	}
	var gated, refused *session.Tool
	for _, c := range st.Tools {
		if c.Tool != retail.ToolRefundOrder {
			continue
		}
		switch {
		case strings.Contains(string(c.Arguments), `"amount":320`):
			gated = c
		case strings.Contains(string(c.Arguments), `"amount":150`):
			refused = c
		}
	}
	if gated == nil || gated.Status != session.ToolFailed || !strings.Contains(gated.Error, "not approved in time") {
		t.Fatalf("the $320 refund: %+v, want failed, not approved", gated)
	}
	if a := st.Approvals[gated.Approval]; a.Outcome != session.ApprovalExpired || a.Gate != "large-refund" || a.Approver != "supervisors" {
		t.Fatalf("the $320 refund's approval: %+v, want expired, asked by gate large-refund of supervisors", a)
	}
	if refused == nil || refused.Status != session.ToolFailed || refused.Approval != "" ||
		!strings.Contains(refused.Error, "policy "+retail.RuleRefund+": order W1003 was delivered on 2026-01-29, 45 days before today") {
		t.Fatalf("the $150 refund: %+v, want refused by rule 3, ungated", refused)
	}
	for _, name := range []string{retail.ValidatorState, retail.ValidatorPolicy} {
		if v := validation(st, name); v == nil || !v.Passed {
			t.Fatalf("validation %s: %+v, want passed", name, v)
		}
	}
	d, md := verified(t, run.out)
	var g retail.Grade
	for _, v := range d.Validations {
		if v.Validator == retail.ValidatorPolicy {
			if err := json.Unmarshal(v.Details, &g); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	for _, p := range g.Policy {
		got = append(got, p.Tool+" "+p.Decision)
	}
	if strings.Join(got, ", ") != "find_user allowed, get_order allowed, refund_order not approved, refund_order refused" {
		t.Fatalf("policy decisions: %s", strings.Join(got, ", "))
	}
	text := dt.Text(t, md)
	for _, want := range []string{
		"No tool call changed the state.",
		"failed: the call was not approved in time",
		"failed: policy 3 (refund only delivered orders, within 30 days)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dossier.md does not say %q", want)
		}
	}
	if !strings.Contains(stdout.String(), "REFUSED: policy 3") {
		t.Errorf("the output does not show the refusal:\n%s", stdout)
	}
}

// A task whose expected state the run does not reach fails the grade: the
// domain-state validation fails naming the difference, the session is
// closed rejected, and the command fails.
func TestDemoSupportGradeFails(t *testing.T) {
	example := t.TempDir()
	if err := supportex.Write(example); err != nil {
		t.Fatal(err)
	}
	// The task now expects W1002 to stay pending.
	path := filepath.Join(example, "tasks", supportTask, retail.FileExpected)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var db retail.DB
	if err := json.Unmarshal(raw, &db); err != nil {
		t.Fatal(err)
	}
	db.Orders["W1002"].Status = retail.StatusPending
	if err := os.WriteFile(path, db.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, example)
	run, stdout, err := runSupportForTest(t, supportOptions{demoOptions: demoOptions{example: example}, task: supportTask})
	if after := dirNames(t, example); after != before {
		t.Errorf("the run wrote into the example directory: %s, was %s", after, before)
	}
	if err == nil || !strings.Contains(err.Error(), "no branch was accepted") {
		t.Fatalf("demo support with an expected state the run misses: %v, want no branch accepted\n%s", err, stdout)
	}
	st := supportState(t, run, stdout)
	v := validation(st, retail.ValidatorState)
	if st.Outcome != "rejected" || v == nil || v.Passed || !strings.Contains(v.Reason, `/orders/W1002/status: expected "pending", got "cancelled"`) {
		t.Fatalf("outcome %q, validation %+v; want rejected after domain-state failed on W1002's status", st.Outcome, v)
	}
	if p := validation(st, retail.ValidatorPolicy); p == nil || !p.Passed {
		t.Fatalf("policy validation %+v, want passed: no call broke the policy", p)
	}
	verified(t, run.out)
}

// Hostile flags are refused before anything starts, saying why.
func TestDemoSupportRefusesBadTasks(t *testing.T) {
	example := t.TempDir()
	if err := supportex.Write(example); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    supportOptions
		want string
	}{
		{"a path for a task", supportOptions{demoOptions: demoOptions{example: example}, task: "../workspace"}, `task "../workspace": want 1-64 of a-z 0-9 - (tasks: cancel-and-refund, refund-forbidden)`},
		{"an unknown task", supportOptions{demoOptions: demoOptions{example: example}, task: "free-money"}, `task "free-money": no such task`},
		{"an example without a workflow", supportOptions{demoOptions: demoOptions{example: t.TempDir()}, task: supportTask}, "no workflow.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{env: env{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}, timeout: 10 * time.Second}
			run, err := a.runSupport(context.Background(), tc.o)
			if run != nil {
				run.close()
			}
			var usage usageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &usage) {
				t.Fatalf("error %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
	// The embedded example's unknown task is refused too, before the
	// runtime starts.
	a := &app{env: env{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}, timeout: 10 * time.Second}
	run, err := a.runSupport(context.Background(), supportOptions{demoOptions: demoOptions{data: t.TempDir()}, task: "nope"})
	if run != nil {
		if run.rt != nil {
			t.Error("the runtime started for an unknown task")
		}
		run.close()
	}
	if err == nil || !strings.Contains(err.Error(), `task "nope": no such task`) {
		t.Fatalf("unknown task of the embedded example: %v", err)
	}
}

// Hostile calls of the shop's tools, proposed by a person in a session of
// their own (no workflow: no gate, no agent's tool list), meet the shop's
// own checks: arguments against the tool's schema, then the policy on the
// shop as the session's earlier calls left it.
func TestDemoSupportShopRefusesHostileCalls(t *testing.T) {
	run, stdout, err := runSupportForTest(t, supportOptions{task: supportTask})
	if err != nil {
		t.Fatalf("demo support: %v\n%s", err, stdout)
	}
	ctx := context.Background()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.State(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	// The same shop and task as the run's session.
	ack, err := c.Start(ctx, "", events.SessionStarted{Task: "poke the shop", Labels: map[string]string{
		client.LabelWorkspace: root.Labels[client.LabelWorkspace], retail.LabelTask: supportTask}})
	if err != nil {
		t.Fatal(err)
	}
	id := ack.Session
	n := 0
	shop := func(tool, args string) *session.Tool {
		t.Helper()
		n++
		callID := fmt.Sprintf("hostile-%d", n)
		if _, err := c.Emit(ctx, id, &events.ToolRequested{CallID: callID, Tool: tool, Arguments: json.RawMessage(args), Agent: "mallory"}); err != nil {
			t.Fatal(err)
		}
		var done *session.Tool
		testrig.Eventually(t, time.Minute, "call "+callID+" ends", func() (bool, string) {
			st, err := c.State(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			done = st.Tools[callID]
			return done != nil && (done.Status == session.ToolCompleted || done.Status == session.ToolFailed), fmt.Sprintf("%+v", done)
		})
		return done
	}
	for _, tc := range []struct {
		tool, args, want string
	}{
		{retail.ToolRefundOrder, `{"order_id":"W1001","amount":-5,"reason":"x"}`, "refund_order: invalid arguments: /amount: "},
		{retail.ToolGetOrder, `{"order_id":"W1001","sql":"drop table orders"}`, "get_order: invalid arguments: "},
		{retail.ToolGetOrder, `{"order_id":"W1001"}`, "policy " + retail.RuleIdentity},
		{retail.ToolFindUser, `{"name":"Ana Ortiz","zip":"94110"}`, ""},
		{retail.ToolCancelOrder, `{"order_id":"W1005","reason":"x"}`, "policy " + retail.RuleIdentity + ": order W1005 belongs to a customer whose identity"},
		{retail.ToolCancelOrder, `{"order_id":"W1002","reason":"x"}`, ""},
		{retail.ToolCancelOrder, `{"order_id":"W1002","reason":"again"}`, "policy " + retail.RuleCancel + ": order W1002 is cancelled, not pending"},
		{retail.ToolRefundOrder, `{"order_id":"W1001","amount":46,"reason":"x"}`, "the amount must be between $1 and the $45 not yet refunded"},
	} {
		got := shop(tc.tool, tc.args)
		if tc.want == "" {
			if got.Status != session.ToolCompleted {
				t.Fatalf("%s %s: %+v, want completed", tc.tool, tc.args, got)
			}
			continue
		}
		if got.Status != session.ToolFailed || !strings.Contains(got.Error, tc.want) {
			t.Fatalf("%s %s: %s %q, want failed saying %q", tc.tool, tc.args, got.Status, got.Error, tc.want)
		}
	}
	// The grade of this session: W1002 cancelled as the task expects, W1001
	// not refunded as it does not.
	end := shop(retail.ToolEndConversation, `{}`)
	st, err := c.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != session.ToolCompleted || len(st.Validations) != 2 {
		t.Fatalf("end_conversation %+v, validations %+v", end, st.Validations)
	}
	if v := validation(st, retail.ValidatorState); v.Passed || v.Reason != "the final state differs from task cancel-and-refund's in 2 places: "+
		`/orders/W1001/refunded: expected 45, got 0; /orders/W1001/status: expected "refunded", got "delivered"` {
		t.Fatalf("domain-state: %+v", v)
	}
	if v := validation(st, retail.ValidatorPolicy); !v.Passed {
		t.Fatalf("policy: %+v, want passed: every refused call was refused", v)
	}
}

func dirNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
