package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/eval"
)

func (a *app) evalCmd() *cobra.Command {
	o := eval.Options{Runs: 1, Concurrency: 4, Timeout: 10 * time.Minute}
	var out, prices, baseline string
	var maxPassDrop, maxCostRise float64
	cmd := &cobra.Command{
		Use:   "eval TASKS.yaml",
		Short: "Run a task set k times against the deployment and report pass@1, pass^k, pass@k, tokens and latency",
		Long: `eval runs every task of a task file (docs/eval.md) --runs times, each run a
session started as "rath start" starts one (the task's workflow, its
workspace seeded from the task's directory) and labelled eval=<eval ID>,
eval_task=<task ID>, eval_try=<n>. It waits for each session to close, at
most --run-timeout (then closes it, outcome eval_timeout), grades it with
the task's grader (the close outcome, a CEL expression over the final
state, or both), and reports per task and overall: pass@1 (the mean
success of the tries), pass^k (every try passed), pass@k (at least one
did), tokens in and out, cost (each session's usage by provider/model
at the prices of --prices, a YAML file of price per million input and
output tokens in a currency; scripted models are free, and a model without
a price is reported as "no price", not 0), latency p50/p95 (first to last
event of the runs that closed), failures by cause (outcome, grader,
timeout, error), and every run's session with its signed head.

--baseline REPORT compares the eval, task by task, with an earlier one's
report.json (rath eval --out): pass@1, pass^k (when both ran the same k)
and cost per run. It names the tasks that flipped, with a run of each eval
and the rath diff that compares them, and exits 11 when a task's pass@1 or
pass^k dropped by more than --max-pass-drop (default 0: any drop) or, with
--max-cost-rise, its cost per run rose by more than that fraction: a CI
step.

--out DIR writes the report as report.json and report.md. The exit status
is 0 when the eval ran, whatever its pass rate (with --baseline: and no
task regressed); 11 when a task regressed; 2 for a task file, price table
or baseline with a problem (each named: no session starts), 6 when the
deployment does not answer; interrupted, it closes the sessions of the
runs in flight (outcome eval_interrupted) and prints no report. --timeout
is how long each request to the ledger may take, as for every command;
--run-timeout bounds a whole run.`,
		Example: `  rath eval examples/eval/tasks.yaml --runs 3                 # each task 3 times: pass@1, pass^3, pass@3
  rath eval examples/eval/tasks.yaml --runs 5 --concurrency 8 --out eval-report   # report.json, report.md
  rath eval examples/eval/tasks.yaml --json --run-timeout 2m
  rath eval examples/eval/tasks.yaml --prices examples/eval/prices.yaml        # cost in the table's currency
  rath eval examples/eval/tasks.yaml --baseline main-eval/report.json --max-cost-rise 0.10   # exit 11 on a regression`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Runs < 1 || o.Concurrency < 1 || o.Timeout <= 0 {
				return usageError{fmt.Errorf("--runs %d, --concurrency %d and --run-timeout %s must be positive", o.Runs, o.Concurrency, o.Timeout)}
			}
			set, err := eval.Load(args[0])
			if err != nil {
				return usageError{err}
			}
			o.Prices = eval.DefaultPrices()
			if prices != "" {
				if o.Prices, err = eval.LoadPrices(prices); err != nil {
					return usageError{err}
				}
			}
			base, th, err := gateOptions(cmd, o.Prices, baseline, maxPassDrop, maxCostRise)
			if err != nil {
				return usageError{err}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			for _, t := range set.Tasks {
				if err := a.checkTools(cmd.Context(), c, t.WorkflowPath, t.Workflow()); err != nil {
					return fmt.Errorf("task %s: %w", t.ID, err)
				}
			}
			o.Done = func(t eval.TaskReport, r eval.Run) {
				verdict := "pass"
				if !r.Passed {
					verdict = "fail"
					if r.Failure != nil {
						verdict += ": " + r.Failure.String()
					}
				}
				fmt.Fprintf(a.Stderr, "rath eval: %s try %d: %s (session %s)\n", t.ID, r.Try, verdict, r.Session)
			}
			rep, err := eval.Execute(cmd.Context(), c, set, o)
			if err != nil {
				return err
			}
			if base != nil {
				rep.Gate = eval.Compare(base, baseline, rep, th)
			}
			if out != "" {
				if err := rep.WriteDir(out); err != nil {
					return err
				}
			}
			if a.json {
				err = a.printJSON(rep)
			} else {
				err = rep.WriteText(a.Stdout)
				if err == nil && rep.Gate != nil {
					err = rep.Gate.WriteText(a.Stdout, rep)
				}
				if err == nil && out != "" {
					_, err = fmt.Fprintf(a.Stdout, "\nreport: %s, %s\n", filepath.Join(out, "report.md"), filepath.Join(out, "report.json"))
				}
			}
			if err == nil && rep.Gate != nil && len(rep.Gate.Regressed) > 0 {
				err = &regressedError{baseline: rep.Gate.Baseline, tasks: rep.Gate.Regressed}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Runs, "runs", o.Runs, "k: how many times each task runs")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "how many runs are in flight at once")
	f.DurationVar(&o.Timeout, "run-timeout", o.Timeout, "how long a run may take to close before it counts as a timeout")
	f.StringVar(&o.ID, "id", "", "the eval run's ID, the value of every run's eval label (default: a new one)")
	f.StringVar(&out, "out", "", "directory to write report.json and report.md into")
	f.StringVar(&baseline, "baseline", "", "an earlier eval's report.json (or its --out directory) to compare with, task by task: exit 11 when a task regressed")
	f.Float64Var(&maxPassDrop, "max-pass-drop", 0, "with --baseline: how much a task's pass@1 (and pass^k, same k) may drop; 0: any drop regresses")
	f.Float64Var(&maxCostRise, "max-cost-rise", 0, "with --baseline: how much a task's cost per run may rise, as a fraction (0.10: 10%); unset: cost is not gated")
	f.StringVar(&prices, "prices", "", "price table: per provider and model, the price per million input and output tokens in a currency (docs/eval.md; default: scripted models free, others no price)")
	return cmd
}

// gateOptions checks the gate's flags and loads the baseline: nil when
// there is none. A threshold without a baseline, a negative one, or a cost
// gate across two currencies is refused before any session starts.
func gateOptions(cmd *cobra.Command, prices *eval.Prices, baseline string, maxPassDrop, maxCostRise float64) (*eval.Report, eval.Thresholds, error) {
	th := eval.Thresholds{MaxPassDrop: maxPassDrop}
	costGated := cmd.Flags().Changed("max-cost-rise")
	if costGated {
		th.MaxCostRise = &maxCostRise
	}
	if baseline == "" {
		if costGated || cmd.Flags().Changed("max-pass-drop") {
			return nil, th, errors.New("--max-pass-drop and --max-cost-rise need --baseline, the report to compare with")
		}
		return nil, th, nil
	}
	for _, v := range []struct {
		flag string
		v    float64
	}{{"--max-pass-drop", maxPassDrop}, {"--max-cost-rise", maxCostRise}} {
		if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			return nil, th, fmt.Errorf("%s %v: want a fraction from 0 up, such as 0.10", v.flag, v.v)
		}
	}
	base, err := eval.LoadReport(baseline)
	if err != nil {
		return nil, th, err
	}
	if costGated && base.Currency != prices.Currency {
		return nil, th, fmt.Errorf("--max-cost-rise: the baseline's costs are in %q, this eval's prices in %s: give a --prices table in the baseline's currency", base.Currency, prices.Currency)
	}
	return base, th, nil
}
