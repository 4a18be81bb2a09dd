package eval

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	runs := []Run{
		{Try: 1, Session: "s1", Passed: true, Closed: true, Outcome: "succeeded", TokensIn: 10, TokensOut: 2, LatencyMS: 1500,
			Head: 8, HeadHash: "h1", HeadSig: "k1:sig1", KeyID: "k1", Verified: true},
		{Try: 2, Session: "s2", Closed: true, Outcome: "succeeded", TokensIn: 10, TokensOut: 2, LatencyMS: 900,
			Failure: &Failure{Cause: CauseGrader, Detail: "state.turns == 1 || state.tokens > 5 is false"}, Head: 9, HeadHash: "h2", HeadSig: "k1:sig2", KeyID: "k1", Verified: true},
	}
	stuck := []Run{{Try: 1, Session: "s3", Failure: &Failure{Cause: CauseTimeout, Detail: "not closed within 1s"}, Head: 3, HeadHash: "h3", HeadSig: "k1:sig3", KeyID: "k1", Verified: true},
		{Try: 2, Failure: &Failure{Cause: CauseError, Detail: "start: refused"}}}
	r := &Report{Format: ReportFormat, ID: "ev-1", File: "tasks.yaml", K: 2, Concurrency: 2, TimeoutMS: 1000, Started: start, Finished: start.Add(3 * time.Second),
		Tasks: []TaskReport{{ID: "flaky", Task: "t", Workflow: "w.yaml", Summary: Summarize(runs), Runs: runs},
			{ID: "stuck", Task: "t", Workflow: "w.yaml", Summary: Summarize(stuck), Runs: stuck}}}
	r.Overall = Overall(r.Tasks)
	return r
}

func TestWriteText(t *testing.T) {
	var b strings.Builder
	if err := sampleReport().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"eval ev-1 of tasks.yaml: 2 tasks × 2 runs, concurrency 2, 3s\n",
		"TASK     RUNS  PASS@1  PASS^2  PASS@2  TOKENS IN  TOKENS OUT  P50    P95\n",
		"flaky    2     0.50    0.00    1.00    20         4           900ms  1.5s\n",
		"stuck    2     0.00    0.00    0.00    0          0           -      -\n", // no run closed: no latency
		"overall  4     0.25    0.00    0.50    20         4           900ms  1.5s\n",
		"failures by cause: grader 1, timeout 1, error 1\n",
		"runs (rath ls --label eval=ev-1; rath log, rath export, rath verify SESSION)\n",
		"  flaky  1×  grader: state.turns == 1 || state.tokens > 5 is false\n",
		"  stuck  1×  timeout: not closed within 1s\n",
		"  stuck  2    -        fail (error)    -          -        -\n",
		"  stuck  1    s3       fail (timeout)  -          -        3 signed by k1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	rep := sampleReport()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, rep) {
		t.Errorf("report.json does not read back as the report:\n%s", js)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Eval ev-1\n",
		"| flaky | 2 | 0.50 | 0.00 | 1.00 | 20 | 4 | 900ms | 1.5s |",
		`| flaky | 1 | grader | state.turns == 1 \|\| state.tokens > 5 is false |`, // a pipe in a cell stays in it
		"| flaky | 2 | `s2` | fail (grader) | succeeded | 10/2 | 900ms | 9 | `h2` | `k1:sig2` (k1) |",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.md lacks %q:\n%s", want, page)
		}
	}
}
