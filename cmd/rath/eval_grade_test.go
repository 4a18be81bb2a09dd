package main

import (
	"context"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// The graders that need the run's final workspace, against a whole
// runtime: a command run in the sandbox and an expected-state comparison,
// each passing once and failing once. Each ran on a grading fork of the
// run, at the event before its close, through the tool runner (its
// placement and calls are in the fork's log), and the fork was closed.
func TestEvalSandboxGraders(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	r := rath(t, rt.URL, "eval", "testdata/eval/sandbox/graders.yaml", "--id", "ev-sandbox", "--json", "--run-timeout", "2m")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	want := map[string]struct {
		passed bool
		detail string
	}{
		"command-passes": {true, ""},
		"command-fails":  {false, "command sh -c 'test -f receipt.txt && echo has a receipt' exited 1"},
		"state-matches":  {true, ""},
		"state-differs": {false, `state orders.json differs from the expected: /orders/0/status: expected "cancelled", got "shipped"; ` +
			`/refunds: expected [], missing`},
	}
	if len(rep.Tasks) != len(want) {
		t.Fatalf("%d tasks, want %d", len(rep.Tasks), len(want))
	}
	for _, task := range rep.Tasks {
		run := task.Runs[0]
		w := want[task.ID]
		if run.Passed != w.passed || (!w.passed && (run.Failure == nil || run.Failure.Cause != eval.CauseGrader || run.Failure.Detail != w.detail)) {
			t.Errorf("task %s: passed %v, failure %+v; want passed %v, %q", task.ID, run.Passed, run.Failure, w.passed, w.detail)
			continue
		}
		g := run.Grading
		if g == nil || g.Fork == "" || g.As != "clerk" {
			t.Errorf("task %s: grading %+v", task.ID, g)
			continue
		}
		if strings.HasPrefix(task.ID, "command") && (g.ExitCode == nil || (*g.ExitCode == 0) != w.passed) {
			t.Errorf("task %s: exit code %v", task.ID, g.ExitCode)
		}
		// The grading fork: of the run, at the event before its close,
		// labelled, closed once graded; its calls run by the tool runner
		// in a sandbox it placed.
		fork, err := c.State(ctx, g.Fork)
		if err != nil {
			t.Fatal(err)
		}
		runLog, err := c.Log(ctx, run.Session, client.Range{})
		if err != nil {
			t.Fatal(err)
		}
		if fork.Lineage.Parent != run.Session || fork.Lineage.ForkSeq != runLog[len(runLog)-1].Seq-1 || fork.Labels[eval.LabelGrades] != run.Session ||
			fork.Labels[eval.LabelEval] != "ev-sandbox" || fork.Status != session.StatusClosed || fork.Outcome != eval.OutcomeGraded {
			t.Errorf("task %s: grading fork %s: lineage %+v, labels %v, %s %s", task.ID, g.Fork, fork.Lineage, fork.Labels, fork.Status, fork.Outcome)
		}
		forkLog, err := c.Log(ctx, g.Fork, client.Range{From: fork.Lineage.ForkSeq + 1})
		if err != nil {
			t.Fatal(err)
		}
		var placed, completed, turns int
		for _, ev := range forkLog {
			switch ev.Type {
			case events.TypeSandboxPlaced:
				placed++
			case events.TypeToolCompleted:
				completed++
			case events.TypeTurnRequested:
				turns++
			}
		}
		if placed != 1 || completed != 1 || turns != 0 {
			t.Errorf("task %s: the grading fork placed %d sandboxes, completed %d calls, requested %d turns; want 1, 1, 0", task.ID, placed, completed, turns)
		}
	}
	// An eval's runs, listed by its label, leave the grading forks out
	// only by theirs: both carry eval=ev-sandbox.
	all, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: "ev-sandbox"}})
	if err != nil || len(all) != 2*len(want) {
		t.Errorf("sessions labelled eval=ev-sandbox: %d, %v; want the runs and their grading forks, %d", len(all), err, 2*len(want))
	}
}

// A command grader's call is screened by the tool runner like any call the
// agent worker did not propose: a workflow gate that holds run for
// approval fails the run, named, rather than leave the eval waiting.
func TestEvalSandboxGraderGated(t *testing.T) {
	rt, _ := evalRuntime(t)
	r := rath(t, rt.URL, "eval", "testdata/eval/sandbox/gated-task.yaml", "--id", "ev-gated", "--json", "--run-timeout", "2m")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	run := rep.Tasks[0].Runs[0]
	if run.Passed || run.Failure == nil || run.Failure.Cause != eval.CauseGrader ||
		run.Failure.Detail != "command true: the workflow's gate runs holds the run call for approval by leads: a grader's call must run unattended" {
		t.Errorf("a gated grader's call: passed %v, failure %+v", run.Passed, run.Failure)
	}
}
