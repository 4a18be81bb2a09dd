package eval

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/session"
)

func sampleReport() *Report {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	runs := []Run{
		{Try: 1, Session: "s1", Passed: true, Closed: true, Outcome: "succeeded", TokensIn: 10, TokensOut: 2, LatencyMS: 1500,
			Models: map[string]session.Tokens{"p/m": {In: 10, Out: 2, Calls: 1}},
			Head:   8, HeadHash: "h1", HeadSig: "k1:sig1", KeyID: "k1", Verified: true},
		{Try: 2, Session: "s2", Closed: true, Outcome: "succeeded", TokensIn: 10, TokensOut: 2, LatencyMS: 900,
			Models:  map[string]session.Tokens{"p/m": {In: 10, Out: 2, Calls: 1}},
			Failure: &Failure{Cause: CauseGrader, Detail: "state.turns == 1 || state.tokens > 5 is false"}, Head: 9, HeadHash: "h2", HeadSig: "k1:sig2", KeyID: "k1", Verified: true},
	}
	stuck := []Run{{Try: 1, Session: "s3", Failure: &Failure{Cause: CauseTimeout, Detail: "not closed within 1s"}, Head: 3, HeadHash: "h3", HeadSig: "k1:sig3", KeyID: "k1", Verified: true},
		{Try: 2, Failure: &Failure{Cause: CauseError, Detail: "start: refused"}}}
	// 10 in at 1000 and 2 out at 5000 per million tokens: 0.02 a run.
	prices := &Prices{Currency: "EUR", Prices: []Price{{"p", "m", 1000, 5000}}}
	for i := range runs {
		runs[i].price(prices)
	}
	for i := range stuck {
		stuck[i].price(prices)
	}
	r := &Report{Format: ReportFormat, ID: "ev-1", File: "tasks.yaml", Currency: "EUR", K: 2, Concurrency: 2, TimeoutMS: 1000, Started: start, Finished: start.Add(3 * time.Second),
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
		"TASK     RUNS  PASS@1  PASS^2  PASS@2  TOKENS IN  TOKENS OUT  COST EUR  P50    P95\n",
		"flaky    2     0.50    0.00    1.00    20         4           0.0400    900ms  1.5s\n",
		"stuck    2     0.00    0.00    0.00    0          0           0.0000    -      -\n", // no run closed: no latency
		"overall  4     0.25    0.00    0.50    20         4           0.0400    900ms  1.5s\n",
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
		"| task | runs | pass@1 | pass^2 | pass@2 | tokens in | tokens out | cost (EUR) | latency p50 | latency p95 |",
		"| flaky | 2 | 0.50 | 0.00 | 1.00 | 20 | 4 | 0.0400 | 900ms | 1.5s |",
		`| flaky | 1 | grader | state.turns == 1 \|\| state.tokens > 5 is false |`, // a pipe in a cell stays in it
		"| flaky | 2 | `s2` | fail (grader) | succeeded | 10/2 | 0.0200 | 900ms | 9 | `h2` | `k1:sig2` (k1) |",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.md lacks %q:\n%s", want, page)
		}
	}
}

// A report with a model without a price shows "no price", never a sum
// that leaves the model out, and names the model.
func TestWriteTextNoPrice(t *testing.T) {
	r := sampleReport()
	r.Prices = "prices.yaml"
	run := Run{Try: 1, Session: "s9", Models: map[string]session.Tokens{"openai/gpt-x": {In: 4}}}
	run.price(&Prices{Currency: "EUR", Prices: []Price{{"p", "m", 1, 1}}})
	r.Tasks = append(r.Tasks, TaskReport{ID: "live", Summary: Summarize([]Run{run}), Runs: []Run{run}})
	r.Overall = Overall(r.Tasks)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"flaky    2     0.50    0.00    1.00    20         4           0.0400    900ms  1.5s\n",
		"live     1     0.00    0.00    0.00    0          0           no price  -      -\n",
		"overall  5     0.17    0.00    0.33    20         4           no price  900ms  1.5s\n",
		"no price for openai/gpt-x in prices.yaml: add them to a --prices file (docs/eval.md)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// The HTML page: self-contained, every value escaped, a chart row per
// task, each run with its dossier's command line and, with a console URL,
// its console page.
func TestWriteHTML(t *testing.T) {
	r := sampleReport()
	evil := `<script>alert(1)</script>"'&`
	r.File = evil + ".yaml"
	r.Tasks[0].Runs[1].Failure.Detail = evil
	r.Tasks[0].Summary = Summarize(r.Tasks[0].Runs)
	r.Overall = Overall(r.Tasks)
	r.Tasks[0].Runs[0].Outcome = evil
	r.Tasks[0].Runs[0].HeadSig = evil
	r.ConsoleURL = "http://127.0.0.1:8470/"
	code := 3
	r.Tasks[0].Runs[1].Grading = &Grading{Fork: "f", As: "a", Command: []string{"sh", "-c", evil}, ExitCode: &code}
	var b strings.Builder
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "<script") || strings.Contains(page, evil) {
		t.Errorf("a value is not escaped:\n%s", page)
	}
	for _, want := range []string{
		"<title>Eval ev-1</title>",
		"&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;",
		`<svg role="img" aria-label="pass@1 and pass^2 per task"`,
		`<text x="172" y="44" text-anchor="end">flaky</text>`,
		`<rect x="180" y="30" width="200" height="18"`, // pass@1 0.5 of 400
		`<rect x="180" y="56" width="0" height="18"`,   // stuck: 0
		`<code>rath export s1 --out dossiers/s1</code> · <a href="http://127.0.0.1:8470/s/s1/dossier.md">dossier.md</a>`,
		`<a href="http://127.0.0.1:8470/s/s3"><code>s3</code></a>`,
		"exit 3: <code>sh -c ",
		"By cause: grader 1, timeout 1, error 1.",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	for _, external := range []string{"src=", "<link", "@import", "url("} {
		if strings.Contains(page, external) {
			t.Errorf("the page loads something (%s)", external)
		}
	}
	// A run without a session has no export line and no link.
	if strings.Contains(page, "rath export  --out") || strings.Contains(page, `/s/"`) {
		t.Errorf("a run without a session is linked")
	}
	// Without a console URL, nothing links out.
	r.ConsoleURL = ""
	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<a href") {
		t.Errorf("links without a console URL")
	}
}

func TestCheckConsoleURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8470", "https://console.example/rath/"} {
		if err := CheckConsoleURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "javascript:alert(1)", "127.0.0.1:8470", "ftp://h/", "http://", "http://h/?q=1", "http://h/#x", "http://u:p@h/", "http://h/\x7f"} {
		if err := CheckConsoleURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
