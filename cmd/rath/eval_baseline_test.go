package main

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// --baseline given as an earlier eval run's ID (its report recomputed
// from its sessions in the ledger) and as a workflow (the same tasks run
// with it in the same invocation): the gate's exit code, the flipped task
// and the rath diff of a run of each.
func TestEvalBaselineByIDAndWorkflow(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	sessionOf := func(evalID, task string) string {
		t.Helper()
		ss, err := eval.Runs(ctx, c, evalID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if s.Labels[eval.LabelTask] == task {
				return s.ID
			}
		}
		t.Fatalf("no run of %s in eval %s: %v", task, evalID, ss)
		return ""
	}

	if r := rath(t, rt.URL, "eval", "testdata/eval/gate-base.yaml", "--id", "ev-main"); r.code != exitOK {
		t.Fatalf("the baseline eval: exit %d, stderr %q", r.code, r.stderr)
	}
	// By ID: recomputed from the ledger, then compared.
	r := rath(t, rt.URL, "eval", "testdata/eval/gate-worse.yaml", "--id", "ev-change", "--baseline", "ev-main")
	passed, failed := sessionOf("ev-main", "flips"), sessionOf("ev-change", "flips")
	if r.code != exitRegressed || !strings.Contains(r.stderr, "rath: regressed against baseline ev-main: 1 task(s): flips") {
		t.Fatalf("a regression against an eval run's ID: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"against baseline ev-main (its sessions in the ledger, graded again with this task file's graders; max pass drop 0.00, cost not gated): REGRESSED: flips\n",
		"steady  1.00 → 1.00  1.00 → 1.00",
		fmt.Sprintf("  flips worse: passed in ev-main (session %s), fails now (session %s)\n    rath diff %s %s\n", passed, failed, passed, failed),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the gate printed no %q:\n%s", want, r.stdout)
		}
	}
	// The other way round: ev-change as the baseline of the passing set is
	// an improvement, and the JSON says where the baseline came from.
	r = rath(t, rt.URL, "eval", "testdata/eval/gate-base.yaml", "--id", "ev-fixed", "--baseline", "ev-change", "--json")
	if r.code != exitOK {
		t.Fatalf("an improvement against an eval run's ID: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if g := rep.Gate; g == nil || g.BaselineKind != eval.BaselineEval || g.Baseline != "ev-change" || g.BaselineFile != "" || g.Regressed != nil ||
		g.Tasks[1].Flip != eval.FlipBetter || g.Tasks[1].BaselineSession != failed || g.Tasks[1].Session != sessionOf("ev-fixed", "flips") {
		t.Errorf("the gate against ev-change: %+v", g)
	}

	// By workflow: the candidate's tasks run first with the baseline's
	// workflow (eval <id>-baseline), then as the file says.
	r = rath(t, rt.URL, "eval", "testdata/eval/gate-worse.yaml", "--id", "ev-wf", "--baseline", "testdata/eval/answers.yaml", "--json")
	if r.code != exitRegressed {
		t.Fatalf("a regression against a workflow: exit %d, stderr %q", r.code, r.stderr)
	}
	decode(t, r.stdout, &rep)
	base := sessionOf("ev-wf-baseline", "flips")
	if g := rep.Gate; g == nil || g.BaselineKind != eval.BaselineWorkflow || g.Baseline != "ev-wf-baseline" || g.BaselineFile != "testdata/eval/answers.yaml" ||
		!reflect.DeepEqual(g.Regressed, []string{"flips"}) || g.Tasks[1].BaselineSession != base || g.Tasks[1].Session != sessionOf("ev-wf", "flips") {
		t.Errorf("the gate against a workflow: %+v", g)
	}
	if !strings.Contains(r.stderr, "rath eval: baseline flips try 1: pass") || !strings.Contains(r.stderr, "rath eval: flips try 1: fail") {
		t.Errorf("progress of the baseline's and the candidate's runs: %q", r.stderr)
	}
	if st, err := c.State(ctx, base); err != nil || st.Workflow != "eval-answers" {
		t.Errorf("the baseline's run of flips: %v, %v", st, err)
	}
}

// --baseline values that name nothing usable are refused, and no session
// starts.
func TestEvalBaselineRefused(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	for _, tc := range []struct {
		baseline, want string
		code           int
	}{
		{"ev-nothing", "baseline ev-nothing: no session in the ledger is labelled eval=ev-nothing: not an eval run's ID here", exitUsage},
		{"no/such/report.json", `--baseline "no/such/report.json": no such file, and not an eval run's ID`, exitUsage},
		{"-rf", `--baseline "-rf": no such file, and not an eval run's ID`, exitUsage},
		{strings.Repeat("x", 65), "not an eval run's ID", exitUsage},
		{"ev\nx", "not an eval run's ID", exitUsage},
		{"testdata/eval/gate-base.yaml", "--baseline testdata/eval/gate-base.yaml: a workflow to run the tasks with", exitUsage},
	} {
		r := rath(t, rt.URL, "eval", "testdata/eval/tasks.yaml", "--id", "ev-refused", "--baseline", tc.baseline)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--baseline %q: exit %d, stderr %q; want %d, %q", tc.baseline, r.code, r.stderr, tc.code, tc.want)
		}
	}
	// A console URL report.html would link to is a URL, nothing else.
	for _, bad := range []string{"javascript:alert(1)", "127.0.0.1:8470", "http://h/?next=evil"} {
		if r := rath(t, rt.URL, "eval", "testdata/eval/tasks.yaml", "--id", "ev-refused", "--console", bad); r.code != exitUsage || !strings.Contains(r.stderr, "--console: console URL") {
			t.Errorf("--console %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
	// A sandboxed grader with a baseline workflow none of whose agents
	// may use its tools.
	r := rath(t, rt.URL, "eval", "testdata/eval/sandbox/graders.yaml", "--id", "ev-refused-2", "--baseline", "testdata/eval/sandbox/reader.yaml")
	if r.code != exitUsage || !strings.Contains(r.stderr, "task command-passes with workflow testdata/eval/sandbox/reader.yaml: no agent of workflow eval-reader may use run") {
		t.Errorf("a baseline workflow the grader cannot call as: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, id := range []string{"ev-refused", "ev-refused-2"} {
		if ss, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: id}}); err != nil || len(ss) != 0 {
			t.Errorf("sessions after a refused baseline: %v, %v", ss, err)
		}
	}
}
