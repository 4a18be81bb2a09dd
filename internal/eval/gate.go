package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// Thresholds are how far a candidate eval may fall behind its baseline
// before the gate says it regressed.
type Thresholds struct {
	// MaxPassDrop is how much a task's pass@1 (and pass^k, when both
	// evals ran the same k) may drop: 0 fails on any drop.
	MaxPassDrop float64
	// MaxCostRise, when set, is how much a task's cost per run may rise,
	// as a fraction of the baseline's (0.10: 10%); nil does not gate cost.
	MaxCostRise *float64
}

// Flips of a task's pass@1 between the baseline and the candidate.
const (
	FlipWorse  = "worse"
	FlipBetter = "better"
)

// TaskChange is one task of a gate: its metrics in the baseline and now,
// whether it flipped, and why it regressed, if it did.
type TaskChange struct {
	ID string `json:"id"`
	// Only is "baseline" or "candidate" for a task that is in one report
	// only: it is listed, not compared.
	Only string `json:"only,omitempty"`
	// BaselinePassAt1 and PassAt1 are the task's pass@1 then and now.
	BaselinePassAt1 float64 `json:"baseline_pass_at_1"`
	PassAt1         float64 `json:"pass_at_1"`
	// BaselinePassHatK and PassHatK are its pass^k, when both evals ran
	// the same k (else absent: pass^3 and pass^5 are not comparable).
	BaselinePassHatK *float64 `json:"baseline_pass_hat_k,omitempty"`
	PassHatK         *float64 `json:"pass_hat_k,omitempty"`
	// BaselineCost and Cost are its cost per run (Summary.CostPerRun),
	// absent when a model has no price.
	BaselineCost *float64 `json:"baseline_cost_per_run,omitempty"`
	Cost         *float64 `json:"cost_per_run,omitempty"`
	// Flip is FlipWorse when pass@1 dropped, FlipBetter when it rose;
	// BaselineSession and Session are then a run of each that went the
	// other way (a pass then and a failure now, for worse): the two
	// sessions rath diff compares.
	Flip            string `json:"flip,omitempty"`
	BaselineSession string `json:"baseline_session,omitempty"`
	Session         string `json:"session,omitempty"`
	// Regressions say why the task fails the gate; none when it passes.
	Regressions []string `json:"regressions,omitempty"`
}

// Gate is a candidate eval compared with a baseline, task by task.
type Gate struct {
	// Baseline is the baseline eval's ID. BaselineKind says what it was
	// given as (BaselineReport, BaselineEval, BaselineWorkflow; absent in
	// reports from before it, which were of a report); BaselineFile is the
	// report's file, or the workflow's.
	Baseline     string       `json:"baseline"`
	BaselineKind string       `json:"baseline_kind,omitempty"`
	BaselineFile string       `json:"baseline_file,omitempty"`
	MaxPassDrop  float64      `json:"max_pass_drop"`
	MaxCostRise  *float64     `json:"max_cost_rise,omitempty"`
	Tasks        []TaskChange `json:"tasks"`
	// Regressed names the tasks with a regression: the gate fails when
	// there is any.
	Regressed []string `json:"regressed,omitempty"`
}

// LoadReport reads a report an earlier rath eval --out wrote: the
// report.json file, or a directory that holds one.
func LoadReport(path string) (*Report, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load eval report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: not an eval report: %w", path, err)
	}
	if r.Format != ReportFormat {
		return nil, fmt.Errorf("%s: format %q, want %s (a report.json of rath eval --out)", path, r.Format, ReportFormat)
	}
	return &r, nil
}

// source says where the baseline's numbers came from, for people.
func (g *Gate) source() string {
	switch g.BaselineKind {
	case BaselineEval:
		return "its sessions in the ledger, graded again with this task file's graders"
	case BaselineWorkflow:
		return "this task file with workflow " + g.BaselineFile + ", run now"
	}
	return g.BaselineFile
}

// eps absorbs float rounding, so that 0.1 + 0.2 against 0.3 is no drop.
const eps = 1e-9

// Compare compares the candidate with the baseline (read from file) task
// by task, in the candidate's order then the baseline's tasks it lacks,
// and lists the regressions beyond th.
func Compare(base *Report, file string, cand *Report, th Thresholds) *Gate {
	g := &Gate{Baseline: base.ID, BaselineFile: file, MaxPassDrop: th.MaxPassDrop, MaxCostRise: th.MaxCostRise}
	byID := map[string]TaskReport{}
	for _, t := range base.Tasks {
		byID[t.ID] = t
	}
	for _, t := range cand.Tasks {
		b, ok := byID[t.ID]
		if !ok {
			g.Tasks = append(g.Tasks, TaskChange{ID: t.ID, Only: "candidate", PassAt1: t.Summary.PassAt1})
			continue
		}
		delete(byID, t.ID)
		c := compareTask(base, b, cand, t, th)
		if len(c.Regressions) > 0 {
			g.Regressed = append(g.Regressed, c.ID)
		}
		g.Tasks = append(g.Tasks, c)
	}
	for _, t := range base.Tasks {
		if _, left := byID[t.ID]; left {
			g.Tasks = append(g.Tasks, TaskChange{ID: t.ID, Only: "baseline", BaselinePassAt1: t.Summary.PassAt1})
		}
	}
	return g
}

func compareTask(base *Report, b TaskReport, cand *Report, t TaskReport, th Thresholds) TaskChange {
	c := TaskChange{ID: t.ID, BaselinePassAt1: b.Summary.PassAt1, PassAt1: t.Summary.PassAt1}
	regress := func(format string, args ...any) { c.Regressions = append(c.Regressions, fmt.Sprintf(format, args...)) }

	if drop := c.BaselinePassAt1 - c.PassAt1; drop > th.MaxPassDrop+eps {
		regress("pass@1 %.2f → %.2f: a drop of %.2f, more than %.2f", c.BaselinePassAt1, c.PassAt1, drop, th.MaxPassDrop)
	}
	if base.K == cand.K {
		bh, h := b.Summary.PassHatK, t.Summary.PassHatK
		c.BaselinePassHatK, c.PassHatK = &bh, &h
		if drop := bh - h; drop > th.MaxPassDrop+eps {
			regress("pass^%d %.2f → %.2f: a drop of %.2f, more than %.2f", cand.K, bh, h, drop, th.MaxPassDrop)
		}
	}

	switch {
	case c.PassAt1 < c.BaselinePassAt1-eps:
		c.Flip = FlipWorse
		c.BaselineSession, c.Session = firstRun(b.Runs, true), firstRun(t.Runs, false)
	case c.PassAt1 > c.BaselinePassAt1+eps:
		c.Flip = FlipBetter
		c.BaselineSession, c.Session = firstRun(b.Runs, false), firstRun(t.Runs, true)
	}

	bc, bok := b.Summary.CostPerRun()
	tc, tok := t.Summary.CostPerRun()
	if bok {
		c.BaselineCost = &bc
	}
	if tok {
		c.Cost = &tc
	}
	if th.MaxCostRise == nil {
		return c
	}
	switch {
	case base.Currency != cand.Currency:
		regress("cost not comparable: the baseline's is in %s, this eval's in %s", base.Currency, cand.Currency)
	case !bok || !tok:
		regress("cost not comparable: no price for %s", strings.Join(noPrice(b.Summary, t.Summary), ", "))
	case bc == 0 && tc > eps:
		regress("cost per run 0 → %.4f %s: the baseline's was free", tc, cand.Currency)
	case bc > 0 && (tc-bc)/bc > *th.MaxCostRise+eps:
		regress("cost per run %.4f → %.4f %s: a rise of %.0f%%, more than %.0f%%", bc, tc, cand.Currency, 100*(tc-bc)/bc, 100**th.MaxCostRise)
	}
	return c
}

// firstRun returns the session of the first run that passed (passed set)
// or failed and has a session.
func firstRun(runs []Run, passed bool) string {
	for _, r := range runs {
		if r.Passed == passed && r.Session != "" {
			return r.Session
		}
	}
	return ""
}

func noPrice(a, b Summary) []string {
	out := slices.Concat(a.NoPrice, b.NoPrice)
	slices.Sort(out)
	return slices.Compact(out)
}

// WriteText prints the gate for a terminal: its verdict, every task's
// pass@1, pass^k and cost then and now with its regressions, and the
// tasks that flipped with the rath diff of a run of each.
func (g *Gate) WriteText(w io.Writer, cand *Report) error {
	ew := &errWriter{w: w}
	verdict := "no task regressed"
	if len(g.Regressed) > 0 {
		verdict = fmt.Sprintf("REGRESSED: %s", strings.Join(g.Regressed, ", "))
	}
	cost := "cost not gated"
	if g.MaxCostRise != nil {
		cost = fmt.Sprintf("max cost rise %.0f%%", 100**g.MaxCostRise)
	}
	fmt.Fprintf(ew, "\nagainst baseline %s (%s; max pass drop %.2f, %s): %s\n\n", g.Baseline, g.source(), g.MaxPassDrop, cost, verdict)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TASK\tPASS@1\tPASS^%d\tCOST/RUN %s\tVERDICT\n", cand.K, cand.Currency)
	for _, c := range g.Tasks {
		if c.Only != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tonly in the %s: not compared\n", c.ID, c.Only)
			continue
		}
		hat := "-"
		if c.PassHatK != nil {
			hat = fmt.Sprintf("%.2f → %.2f", *c.BaselinePassHatK, *c.PassHatK)
		}
		v := "ok"
		if len(c.Regressions) > 0 {
			v = "REGRESSED: " + strings.Join(c.Regressions, "; ")
		}
		fmt.Fprintf(tw, "%s\t%.2f → %.2f\t%s\t%s → %s\t%s\n", c.ID, c.BaselinePassAt1, c.PassAt1, hat, Money(c.BaselineCost), Money(c.Cost), v)
	}
	tw.Flush()

	var flips []TaskChange
	for _, c := range g.Tasks {
		if c.Flip != "" {
			flips = append(flips, c)
		}
	}
	if len(flips) > 0 {
		fmt.Fprintf(ew, "\nflipped (a run of each way; rath diff BASELINE NOW shows where they part)\n")
		for _, c := range flips {
			then, now := "passed", "fails"
			if c.Flip == FlipBetter {
				then, now = "failed", "passes"
			}
			fmt.Fprintf(ew, "  %s %s: %s in %s (session %s), %s now (session %s)\n    rath diff %s %s\n",
				c.ID, c.Flip, then, g.Baseline, or(c.BaselineSession, "-"), now, or(c.Session, "-"), or(c.BaselineSession, "-"), or(c.Session, "-"))
		}
	}
	return ew.err
}

// writeMarkdown writes the gate's section of the report's page.
func (g *Gate) writeMarkdown(ew *errWriter, k int, currency string) {
	verdict := "no task regressed"
	if len(g.Regressed) > 0 {
		verdict = "**regressed**: " + md(strings.Join(g.Regressed, ", "))
	}
	fmt.Fprintf(ew, "\n## Against baseline %s\n\n%s, max pass drop %.2f", md(g.Baseline), md(g.source()), g.MaxPassDrop)
	if g.MaxCostRise != nil {
		fmt.Fprintf(ew, ", max cost rise %.0f%%", 100**g.MaxCostRise)
	}
	fmt.Fprintf(ew, ": %s.\n\n| task | pass@1 | pass^%d | cost/run (%s) | flipped | rath diff | regressions |\n|---|---|---|---|---|---|---|\n", verdict, k, md(currency))
	for _, c := range g.Tasks {
		if c.Only != "" {
			fmt.Fprintf(ew, "| %s | | | | | | only in the %s |\n", md(c.ID), c.Only)
			continue
		}
		hat, diff := "-", ""
		if c.PassHatK != nil {
			hat = fmt.Sprintf("%.2f → %.2f", *c.BaselinePassHatK, *c.PassHatK)
		}
		if c.Flip != "" {
			diff = fmt.Sprintf("`rath diff %s %s`", or(c.BaselineSession, "-"), or(c.Session, "-"))
		}
		fmt.Fprintf(ew, "| %s | %.2f → %.2f | %s | %s → %s | %s | %s | %s |\n", md(c.ID), c.BaselinePassAt1, c.PassAt1, hat,
			Money(c.BaselineCost), Money(c.Cost), c.Flip, diff, md(strings.Join(c.Regressions, "; ")))
	}
}
