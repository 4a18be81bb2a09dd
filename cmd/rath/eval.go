package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/eval"
)

func (a *app) evalCmd() *cobra.Command {
	o := eval.Options{Runs: 1, Concurrency: 4, Timeout: 10 * time.Minute}
	var out, prices string
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
did), tokens in and out, cost (each session's usage by provider/model at the
prices of --prices, a YAML file of price per million input and output
tokens in a currency; scripted models are free, and a model without a price
is reported as "no price", not 0), latency p50/p95 (first to last event of the runs
that closed), failures by cause (outcome, grader, timeout, error), and
every run's session with its signed head.

--out DIR writes the report as report.json and report.md. The exit status
is 0 when the eval ran, whatever its pass rate; 2 for a task file with a
problem (each named with its line and field: no session starts), 6 when
the deployment does not answer; interrupted, it closes the sessions of the
runs in flight (outcome eval_interrupted) and prints no report. --timeout is how long each request to the
ledger may take, as for every command; --run-timeout bounds a whole run.`,
		Example: `  rath eval examples/eval/tasks.yaml --runs 3                 # each task 3 times: pass@1, pass^3, pass@3
  rath eval examples/eval/tasks.yaml --runs 5 --concurrency 8 --out eval-report   # report.json, report.md
  rath eval examples/eval/tasks.yaml --json --run-timeout 2m
  rath eval examples/eval/tasks.yaml --prices examples/eval/prices.yaml        # cost in the table's currency`,
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
			c, err := a.client()
			if err != nil {
				return err
			}
			for _, t := range set.Tasks {
				if err := a.checkTools(cmd.Context(), c, t.WorkflowPath); err != nil {
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
			if out != "" {
				if err := rep.WriteDir(out); err != nil {
					return err
				}
			}
			if a.json {
				return a.printJSON(rep)
			}
			if err := rep.WriteText(a.Stdout); err != nil {
				return err
			}
			if out != "" {
				_, err = fmt.Fprintf(a.Stdout, "\nreport: %s, %s\n", filepath.Join(out, "report.md"), filepath.Join(out, "report.json"))
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
	f.StringVar(&prices, "prices", "", "price table: per provider and model, the price per million input and output tokens in a currency (docs/eval.md; default: scripted models free, others no price)")
	return cmd
}
