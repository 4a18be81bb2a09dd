package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// rath eval against a whole runtime with scripted agents: two tasks, two
// tries each; one task's workflow closes as succeeded and passes its
// grader, the other's closes as failed. Every metric of the report is
// checked against the recorded sessions it names: their labels, outcomes,
// usage, event times and signed heads.
func TestEval(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)

	// A grader that does not compile refuses the file, naming the line,
	// before any session starts.
	r := rath(t, rt.URL, "eval", "testdata/eval/bad-grader.yaml")
	if r.code != exitUsage || !strings.Contains(r.stderr, "bad-grader.yaml:10: tasks[1].grader.cel: invalid grader: state has no field \"turn\"") {
		t.Fatalf("a grader that does not compile: exit %d, stderr %q", r.code, r.stderr)
	}
	if sessions, err := c.List(ctx, api.ListRequest{}); err != nil || len(sessions) != 0 {
		t.Fatalf("sessions after a refused task file: %v, %v", sessions, err)
	}

	out := filepath.Join(t.TempDir(), "report")
	r = rath(t, rt.URL, "eval", "testdata/eval/tasks.yaml", "--runs", "2", "--concurrency", "2", "--run-timeout", "2m", "--out", out, "--json",
		"--prices", "testdata/eval/prices.yaml")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if rep.Format != eval.ReportFormat || rep.Currency != "EUR" || rep.Prices != "testdata/eval/prices.yaml" || rep.K != 2 || len(rep.Tasks) != 2 || rep.Tasks[0].ID != "answers" || rep.Tasks[1].ID != "gives-up" {
		t.Fatalf("report: %+v", rep)
	}

	// What the recorded sessions say, run by run.
	wantOutcome := map[string]string{"answers": "succeeded", "gives-up": "failed"}
	var all []eval.Run
	for _, task := range rep.Tasks {
		var passed []bool
		var in, outTok int64
		var cost float64
		var lat []time.Duration
		if len(task.Runs) != 2 {
			t.Fatalf("task %s: %d runs, want 2", task.ID, len(task.Runs))
		}
		for i, run := range task.Runs {
			st, err := c.State(ctx, run.Session)
			if err != nil {
				t.Fatalf("task %s try %d: session %q: %v", task.ID, run.Try, run.Session, err)
			}
			if want := map[string]string{eval.LabelEval: rep.ID, eval.LabelTask: task.ID, eval.LabelTry: fmt.Sprint(i + 1)}; st.Labels[eval.LabelEval] != want[eval.LabelEval] ||
				st.Labels[eval.LabelTask] != want[eval.LabelTask] || st.Labels[eval.LabelTry] != want[eval.LabelTry] || run.Try != i+1 {
				t.Errorf("task %s try %d: labels %v, want %v", task.ID, run.Try, st.Labels, want)
			}
			if _, seeded := st.Labels[client.LabelWorkspace]; seeded != (task.ID == "answers") {
				t.Errorf("task %s: workspace label %v", task.ID, st.Labels)
			}
			if st.Outcome != wantOutcome[task.ID] || run.Outcome != st.Outcome || run.CloseReason != st.CloseReason || !run.Closed {
				t.Errorf("task %s try %d: session closed %q (%s), run says %q (%s), closed %v", task.ID, run.Try, st.Outcome, st.CloseReason, run.Outcome, run.CloseReason, run.Closed)
			}
			pass := st.Outcome == "succeeded" && st.Counts.Turns == 1
			if run.Passed != pass {
				t.Errorf("task %s try %d: passed %v, but the session closed %s after %d turns", task.ID, run.Try, run.Passed, st.Outcome, st.Counts.Turns)
			}
			if !pass && (run.Failure == nil || run.Failure.Cause != eval.CauseOutcome || !strings.Contains(run.Failure.Detail, "closed failed, want succeeded (the agent gave up)")) {
				t.Errorf("task %s try %d: failure %+v", task.ID, run.Try, run.Failure)
			}
			passed = append(passed, pass)
			if run.TokensIn != st.Usage.Total.In || run.TokensOut != st.Usage.Total.Out || st.Usage.Total.In == 0 {
				t.Errorf("task %s try %d: tokens %d/%d, the session used %d/%d", task.ID, run.Try, run.TokensIn, run.TokensOut, st.Usage.Total.In, st.Usage.Total.Out)
			}
			// The price table's 2.5 EUR per million tokens in and 10 out,
			// of the one model the scripted agent used.
			used, ok := st.Usage.ByModel["scripted/scripted-1"]
			want := (float64(used.In)*2.5 + float64(used.Out)*10) / 1e6
			if !ok || len(st.Usage.ByModel) != 1 || !reflect.DeepEqual(run.Models, st.Usage.ByModel) || run.Cost == nil || *run.Cost != want || want == 0 {
				t.Errorf("task %s try %d: models %v, cost %s; the session used %v, which costs %v", task.ID, run.Try, run.Models, eval.Money(run.Cost), st.Usage.ByModel, want)
			}
			cost += want
			in += st.Usage.Total.In
			outTok += st.Usage.Total.Out
			log, err := c.Log(ctx, run.Session, client.Range{})
			if err != nil {
				t.Fatal(err)
			}
			d := log[len(log)-1].Time.Sub(log[0].Time)
			if log[len(log)-1].Type != events.TypeSessionClosed || run.LatencyMS != d.Milliseconds() {
				t.Errorf("task %s try %d: latency %dms, the log spans %s to its %s", task.ID, run.Try, run.LatencyMS, d, log[len(log)-1].Type)
			}
			lat = append(lat, time.Duration(run.LatencyMS)*time.Millisecond)
			v, err := c.Verify(ctx, run.Session)
			if err != nil {
				t.Fatal(err)
			}
			if !v.OK || v.HeadSig == "" || run.Head != v.Head || run.HeadHash != v.HeadHash || run.HeadSig != v.HeadSig || run.KeyID != v.KeyID || !run.Verified {
				t.Errorf("task %s try %d: head %d %s %s, verify says %+v", task.ID, run.Try, run.Head, run.HeadHash, run.HeadSig, v)
			}
			all = append(all, run)
		}
		want := eval.Summary{Runs: 2, Passed: count(passed), Closed: 2, PassAt1: eval.PassAt1(passed), PassHatK: b2f(eval.PassHatK(passed)), PassAtK: b2f(eval.PassAtK(passed)),
			TokensIn: in, TokensOut: outTok, LatencyP50: eval.Percentile(lat, 50).Milliseconds(), LatencyP95: eval.Percentile(lat, 95).Milliseconds()}
		got := task.Summary
		if got.Cost == nil || math.Abs(*got.Cost-cost) > 1e-12 {
			t.Errorf("task %s: cost %s, its runs cost %v", task.ID, eval.Money(got.Cost), cost)
		}
		got.ByCause, got.Failures, got.Cost = nil, nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("task %s:\n got %+v\nwant %+v", task.ID, got, want)
		}
	}
	// The known outcomes: every try of answers passed, none of gives-up's.
	if a, g := rep.Tasks[0].Summary, rep.Tasks[1].Summary; a.PassHatK != 1 || g.PassAtK != 0 || g.ByCause[eval.CauseOutcome] != 2 {
		t.Errorf("answers %+v, gives-up %+v", a, g)
	}
	if o := rep.Overall; o.Runs != 4 || o.Passed != 2 || o.PassAt1 != 0.5 || o.PassHatK != 0.5 || o.PassAtK != 0.5 ||
		o.TokensIn != rep.Tasks[0].Summary.TokensIn+rep.Tasks[1].Summary.TokensIn || o.Cost == nil || math.Abs(*o.Cost-(*rep.Tasks[0].Summary.Cost+*rep.Tasks[1].Summary.Cost)) > 1e-12 || !reflect.DeepEqual(o.ByCause, map[string]int{eval.CauseOutcome: 2}) {
		t.Errorf("overall: %+v", o)
	}
	if sessions, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: rep.ID}}); err != nil || len(sessions) != len(all) {
		t.Errorf("sessions labelled eval=%s: %d, %v; want %d", rep.ID, len(sessions), err, len(all))
	}

	// --out wrote the same report, and its page names every session.
	written, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fromFile eval.Report
	decode(t, string(written), &fromFile)
	if !reflect.DeepEqual(fromFile, rep) {
		t.Errorf("report.json differs from --json:\n%s", written)
	}
	page, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range all {
		if !strings.Contains(string(page), "`"+run.Session+"`") || !strings.Contains(string(page), run.HeadSig) {
			t.Errorf("report.md lacks session %s or its head signature:\n%s", run.Session, page)
		}
	}

	// A run that does not close in time is closed by the eval, and counted
	// as a timeout; the terminal table says so.
	r = rath(t, rt.URL, "eval", "testdata/eval/timeout.yaml", "--run-timeout", "1s", "--id", "ev-timeout")
	if r.code != exitOK {
		t.Fatalf("rath eval of a task that never closes: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"eval ev-timeout of testdata/eval/timeout.yaml: 1 tasks × 1 runs", "TASK", "PASS^1",
		"never-closes", "failures by cause: timeout 1", "1×  timeout: not closed within 1s", "fail (timeout)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rath eval printed no %q:\n%s", want, r.stdout)
		}
	}
	sessions, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: "ev-timeout"}})
	if err != nil || len(sessions) != 1 {
		t.Fatalf("the timed-out run's session: %v, %v", sessions, err)
	}
	if st, err := c.State(ctx, sessions[0].ID); err != nil || st.Outcome != eval.OutcomeTimeout || !strings.Contains(r.stdout, sessions[0].ID) {
		t.Errorf("the timed-out run's session %s: %+v, %v", sessions[0].ID, st, err)
	}

	// An interrupted eval closes the sessions of its runs in flight, so
	// that their agents stop, and says so.
	stop, interrupt := context.WithCancel(ctx)
	defer interrupt()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- execute(stop, env{Args: append([]string{"--nats", rt.URL, "eval", "testdata/eval/timeout.yaml", "--id", "ev-stop"}, credsArgs(rt.URL)...),
			Stdin: strings.NewReader(""), Stdout: &strings.Builder{}, Stderr: &stderr})
	}()
	var running []api.Session
	testrig.Eventually(t, time.Minute, "the interrupted eval's run started", func() (bool, string) {
		running, err = c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: "ev-stop"}})
		return err == nil && len(running) == 1, fmt.Sprint(running, err)
	})
	interrupt()
	if code := <-done; code != exitError || !strings.Contains(stderr.String(), "eval ev-stop interrupted: its runs still open were closed as eval_interrupted") {
		t.Errorf("interrupted: exit %d, stderr %q", code, stderr.String())
	}
	if st, err := c.State(ctx, running[0].ID); err != nil || st.Outcome != eval.OutcomeInterrupted {
		t.Errorf("the interrupted run's session %s: %+v, %v", running[0].ID, st, err)
	}
}

// evalRuntime starts a whole runtime with scripted agents and a client of
// it, for rath eval.
func evalRuntime(t *testing.T) (*runtime.Runtime, *client.Client) {
	t.Helper()
	cfg := demoConfig(t.TempDir())
	cfg.ToolRunner.Backend = "local"
	rt, err := startRuntime(context.Background(), cfg, "rath-eval-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	rt.StartLoop()
	upCreds.Store(rt.URL, rt.Creds)
	waitReady(t, rt.URL)
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	waitToolRunner(t, c)
	return rt, c
}

// waitToolRunner waits until the tool runner has registered all its
// built-in tools. It puts them one at a time, todo last: a workflow checked
// in between (rath eval, rath start) sees some and is refused for the rest.
func waitToolRunner(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tools, err := c.Tools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools {
			if tool.Name == "todo" && tool.Server == "tool-runner" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool runner registered no todo tool in 10s: %+v", tools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The regression gate end to end: a baseline eval where both tasks pass,
// a candidate where one task's workflow gives up (exit 11, the flipped
// task named with a session of each eval, read back from the ledger), and
// the baseline's task set again against that candidate: an improvement,
// exit 0.
func TestEvalGate(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	dir := t.TempDir()
	base, worse := filepath.Join(dir, "base"), filepath.Join(dir, "worse")

	if r := rath(t, rt.URL, "eval", "testdata/eval/gate-base.yaml", "--id", "ev-base", "--out", base); r.code != exitOK {
		t.Fatalf("the baseline eval: exit %d, stderr %q", r.code, r.stderr)
	}
	// session returns the session of the eval's one run of a task, from
	// the ledger, with its outcome.
	session := func(evalID, task string) (string, string) {
		t.Helper()
		ss, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: evalID, eval.LabelTask: task}})
		if err != nil || len(ss) != 1 {
			t.Fatalf("the session of %s in %s: %v, %v", task, evalID, ss, err)
		}
		st, err := c.State(ctx, ss[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		return ss[0].ID, st.Outcome
	}
	passed, outcome := session("ev-base", "flips")
	if outcome != "succeeded" {
		t.Fatalf("the baseline's flips closed %q", outcome)
	}

	r := rath(t, rt.URL, "eval", "testdata/eval/gate-worse.yaml", "--id", "ev-worse", "--baseline", filepath.Join(base, "report.json"), "--out", worse)
	failed, outcome := session("ev-worse", "flips")
	if outcome != "failed" {
		t.Fatalf("the candidate's flips closed %q", outcome)
	}
	if r.code != exitRegressed || !strings.Contains(r.stderr, "rath: regressed against baseline ev-base: 1 task(s): flips") {
		t.Fatalf("a regressed candidate: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"against baseline ev-base (" + filepath.Join(base, "report.json") + "; max pass drop 0.00, cost not gated): REGRESSED: flips\n",
		"steady  1.00 → 1.00  1.00 → 1.00  0.0000 → 0.0000  ok\n",
		"flips   1.00 → 0.00  1.00 → 0.00  0.0000 → 0.0000  REGRESSED: pass@1 1.00 → 0.00: a drop of 1.00, more than 0.00",
		fmt.Sprintf("  flips worse: passed in ev-base (session %s), fails now (session %s)\n    rath diff %s %s\n", passed, failed, passed, failed),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the gate printed no %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "steady worse") || strings.Contains(r.stdout, "steady better") {
		t.Errorf("a task that did not change is listed as flipped:\n%s", r.stdout)
	}
	// The command it names works on the two sessions.
	if d := rath(t, rt.URL, "diff", passed, failed); d.code != exitOK || !strings.Contains(d.stdout, "failed") {
		t.Errorf("rath diff %s %s: exit %d, %q, %q", passed, failed, d.code, d.stdout, d.stderr)
	}
	// The written report carries the gate, and its page the diff.
	written, err := eval.LoadReport(worse)
	if err != nil {
		t.Fatal(err)
	}
	if g := written.Gate; g == nil || !reflect.DeepEqual(g.Regressed, []string{"flips"}) || g.Tasks[1].BaselineSession != passed || g.Tasks[1].Session != failed {
		t.Errorf("report.json's gate: %+v", g)
	}
	if page, err := os.ReadFile(filepath.Join(worse, "report.md")); err != nil || !strings.Contains(string(page), "`rath diff "+passed+" "+failed+"`") {
		t.Errorf("report.md lacks the diff: %v\n%s", err, page)
	}

	// The reverse: against the regressed eval, the baseline's set is an
	// improvement, and the gate passes.
	r = rath(t, rt.URL, "eval", "testdata/eval/gate-base.yaml", "--id", "ev-better", "--baseline", worse, "--max-cost-rise", "0.10", "--json")
	if r.code != exitOK {
		t.Fatalf("an improved candidate: exit %d, stderr %q", r.code, r.stderr)
	}
	var better eval.Report
	decode(t, r.stdout, &better)
	again, _ := session("ev-better", "flips")
	if g := better.Gate; g == nil || g.Regressed != nil || g.Baseline != "ev-worse" || g.Tasks[1].Flip != eval.FlipBetter ||
		g.Tasks[1].BaselineSession != failed || g.Tasks[1].Session != again || g.Tasks[0].Flip != "" || *g.MaxCostRise != 0.10 {
		t.Errorf("the improvement's gate: %+v", g)
	}
}

// rath eval's usage errors and an unreachable deployment.
func TestEvalRefuses(t *testing.T) {
	url := "nats://127.0.0.1:1" // nothing listens there
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--runs", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "--runs 0") {
		t.Errorf("--runs 0: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--prices", "testdata/eval/tasks.yaml"); r.code != exitUsage || !strings.Contains(r.stderr, "price table testdata/eval/tasks.yaml: invalid") {
		t.Errorf("--prices of a file that is not a price table: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--max-cost-rise", "0.1"); r.code != exitUsage || !strings.Contains(r.stderr, "need --baseline") {
		t.Errorf("a threshold without a baseline: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--baseline", "testdata/eval/sandbox/expected-other.json"); r.code != exitUsage || !strings.Contains(r.stderr, `format "", want rath.eval.report.v1`) {
		t.Errorf("a baseline that is not a report: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--baseline", "testdata/eval/tasks.yaml"); r.code != exitUsage || !strings.Contains(r.stderr, "a workflow to run the tasks with: testdata/eval/tasks.yaml:2: tasks: unknown field") {
		t.Errorf("a baseline .yaml that is not a workflow: exit %d, %q", r.code, r.stderr)
	}
	usd := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(usd, []byte(`{"format": "`+eval.ReportFormat+`", "currency": "USD"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--baseline", usd, "--max-cost-rise", "0.1", "--prices", "testdata/eval/prices.yaml"); r.code != exitUsage ||
		!strings.Contains(r.stderr, `the baseline's costs are in "USD", this eval's prices in EUR`) {
		t.Errorf("a cost gate across currencies: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml", "--baseline", usd, "--max-pass-drop", "-1"); r.code != exitUsage || !strings.Contains(r.stderr, "--max-pass-drop -1") {
		t.Errorf("a negative threshold: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/missing.yaml"); r.code != exitUsage || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("a missing file: exit %d, %q", r.code, r.stderr)
	}
	if r := rath(t, url, "eval", "testdata/eval/tasks.yaml"); r.code != exitUnavailable {
		t.Errorf("no deployment: exit %d, %q", r.code, r.stderr)
	}
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
