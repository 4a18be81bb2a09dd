package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Causes in the order reports list them.
var causes = []string{CauseOutcome, CauseGrader, CauseTimeout, CauseError}

// WriteText prints the report for a terminal: the metrics table (a row per
// task and one overall), the failures by cause, and every run's session.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "eval %s of %s: %d tasks × %d runs, concurrency %d, %s\n\n",
		r.ID, r.File, len(r.Tasks), r.K, r.Concurrency, r.Finished.Sub(r.Started).Round(time.Millisecond))
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TASK\tRUNS\tPASS@1\tPASS^%d\tPASS@%d\tTOKENS IN\tTOKENS OUT\tCOST %s\tP50\tP95\n", r.K, r.K, r.Currency)
	row := func(name string, s Summary) {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%d\t%d\t%s\t%s\t%s\n", name, s.Runs, s.PassAt1, s.PassHatK, s.PassAtK,
			s.TokensIn, s.TokensOut, Money(s.Cost), latency(s, s.LatencyP50), latency(s, s.LatencyP95))
	}
	for _, t := range r.Tasks {
		row(t.ID, t.Summary)
	}
	row("overall", r.Overall)
	tw.Flush()
	if len(r.Overall.NoPrice) > 0 {
		fmt.Fprintf(ew, "\nno price for %s in %s: add them to a --prices file (docs/eval.md)\n", strings.Join(r.Overall.NoPrice, ", "), or(r.Prices, "the default price table"))
	}

	if len(r.Overall.Failures) > 0 {
		fmt.Fprintf(ew, "\nfailures by cause: %s\n", byCause(r.Overall.ByCause))
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		for _, t := range r.Tasks {
			for _, f := range t.Summary.Failures {
				fmt.Fprintf(tw, "  %s\t%d×\t%s\n", t.ID, f.Count, f.Failure)
			}
		}
		tw.Flush()
	}

	fmt.Fprintf(ew, "\nruns (rath ls --label eval=%s; rath log, rath export, rath verify SESSION)\n", r.ID)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TASK\tTRY\tSESSION\tRESULT\tOUTCOME\tLATENCY\tHEAD")
	for _, t := range r.Tasks {
		for _, run := range t.Runs {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, run.Try, or(run.Session, "-"), result(run),
				or(run.Outcome, "-"), runLatency(run), head(run))
		}
	}
	tw.Flush()
	return ew.err
}

// WriteMarkdown writes the report as a page: the metrics table, the
// failures, and every run with its session's signed head.
func (r *Report) WriteMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "# Eval %s\n\n", r.ID)
	fmt.Fprintf(ew, "`%s`: %d tasks × %d runs, concurrency %d, run timeout %s; started %s, took %s.\n\n",
		r.File, len(r.Tasks), r.K, r.Concurrency, time.Duration(r.TimeoutMS)*time.Millisecond,
		r.Started.Format(time.RFC3339), r.Finished.Sub(r.Started).Round(time.Millisecond))
	fmt.Fprintf(ew, "| task | runs | pass@1 | pass^%d | pass@%d | tokens in | tokens out | cost (%s) | latency p50 | latency p95 |\n", r.K, r.K, md(r.Currency))
	fmt.Fprintln(ew, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	row := func(name string, s Summary) {
		fmt.Fprintf(ew, "| %s | %d | %.2f | %.2f | %.2f | %d | %d | %s | %s | %s |\n", name, s.Runs, s.PassAt1, s.PassHatK, s.PassAtK,
			s.TokensIn, s.TokensOut, Money(s.Cost), latency(s, s.LatencyP50), latency(s, s.LatencyP95))
	}
	for _, t := range r.Tasks {
		row(md(t.ID), t.Summary)
	}
	row("**overall**", r.Overall)
	if len(r.Overall.NoPrice) > 0 {
		fmt.Fprintf(ew, "\nNo price for %s in %s.\n", md(strings.Join(r.Overall.NoPrice, ", ")), md(or(r.Prices, "the default price table")))
	}

	if len(r.Overall.Failures) > 0 {
		fmt.Fprintf(ew, "\n## Failures\n\nBy cause: %s.\n\n| task | runs | cause | detail |\n|---|---:|---|---|\n", byCause(r.Overall.ByCause))
		for _, t := range r.Tasks {
			for _, f := range t.Summary.Failures {
				fmt.Fprintf(ew, "| %s | %d | %s | %s |\n", md(t.ID), f.Count, f.Cause, md(f.Detail))
			}
		}
	}

	if r.Gate != nil {
		r.Gate.writeMarkdown(ew, r.K, r.Currency)
	}

	fmt.Fprintln(ew, "\n## Runs\n\nEach run's session, with its head as the ledger signed it when the run ended "+
		"(`rath verify SESSION`, `rath export SESSION --out DIR` for its dossier).")
	fmt.Fprintln(ew, "\n| task | try | session | result | outcome | tokens in/out | cost | latency | head | head hash | head signature (key) |")
	fmt.Fprintln(ew, "|---|---:|---|---|---|---:|---:|---:|---:|---|---|")
	for _, t := range r.Tasks {
		for _, run := range t.Runs {
			sig := "-"
			if run.HeadSig != "" {
				sig = fmt.Sprintf("`%s` (%s)", run.HeadSig, run.KeyID)
			}
			fmt.Fprintf(ew, "| %s | %d | `%s` | %s | %s | %d/%d | %s | %s | %d | `%s` | %s |\n", md(t.ID), run.Try, or(run.Session, "-"),
				md(result(run)), md(or(run.Outcome, "-")), run.TokensIn, run.TokensOut, Money(run.Cost), runLatency(run), run.Head, or(run.HeadHash, "-"), sig)
		}
	}
	return ew.err
}

// WriteDir writes report.json, report.md and report.html into dir,
// creating it.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	var page, html strings.Builder
	if err := r.WriteMarkdown(&page); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	if err := r.WriteHTML(&html); err != nil {
		return fmt.Errorf("eval report: %w", err)
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, "report.md"), []byte(page.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "report.html"), []byte(html.String()), 0o644))
}

// result says how a run went: pass, or fail and the cause (the failures
// table has the detail).
func result(r Run) string {
	switch {
	case r.Passed:
		return "pass"
	case r.Failure != nil:
		return "fail (" + r.Failure.Cause + ")"
	}
	return "fail"
}

func runLatency(r Run) string {
	if !r.Closed {
		return "-"
	}
	return ms(r.LatencyMS)
}

func head(r Run) string {
	switch {
	case r.Head == 0:
		return "-"
	case r.Verified:
		return fmt.Sprintf("%d signed by %s", r.Head, or(r.KeyID, "-"))
	}
	return fmt.Sprintf("%d NOT VERIFIED: %s", r.Head, r.Fault)
}

func byCause(m map[string]int) string {
	var parts []string
	for _, c := range causes {
		if m[c] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, m[c]))
		}
	}
	return strings.Join(parts, ", ")
}

// latency prints a percentile of s, or "-" when no run of s closed.
func latency(s Summary, n int64) string {
	if s.Closed == 0 {
		return "-"
	}
	return ms(n)
}

// Money prints a cost in the report's currency to a hundredth of a cent
// (four decimals), or "no price" when there is none.
func Money(c *float64) string {
	if c == nil {
		return "no price"
	}
	return fmt.Sprintf("%.4f", *c)
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

// md keeps a table cell a cell: no pipe or newline ends it early.
func md(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// errWriter keeps the first write error, so a report is written with
// plain Fprintf calls and checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
