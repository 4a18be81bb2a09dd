package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/internal/workflow"
)

func (a *app) evalCmd() *cobra.Command {
	o := eval.Options{Runs: 1, Concurrency: 4, Timeout: 10 * time.Minute}
	var out, prices, baseline, console string
	var maxPassDrop, maxCostRise float64
	var instWorkflow string // --workflow, for a SWE-bench instance file
	cmd := &cobra.Command{
		Use:   "eval TASKS.yaml|INSTANCES.jsonl",
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

The grader checks the close outcome, a CEL expression over the final
state, a command run in the sandbox on the run's final workspace (exit 0
passes), the JSON of a workspace file against an expected state, or
several: a command or state grader runs on a grading fork of the run
(labelled eval_grades=<session>, closed eval_graded) through the tool
runner.

A SWE-bench instance file (.jsonl, or .json holding a list) runs as a task
set: each instance (instance_id, repo: a local git repository,
base_commit, problem_statement, test_commands) is a task whose workspace
is the repository's tree at base_commit and whose grader runs the test
commands; --workflow names the workflow the instances run. A problem in
the file (a repo that is not a git repository, an unknown commit, an ID
used twice, a malformed line) is named at its line, and nothing starts.

Scripted agents whose scripts draw among answers (choose) draw by the
session's rath.seed label, which eval sets to <task ID>/<try>: tries
differ, and the same try draws alike in every eval.

--baseline compares the eval, task by task, with another: an earlier
eval's report.json (or its --out directory); an earlier eval run's ID,
its report recomputed from its sessions in the ledger and graded again
with this task file's graders; or a workflow (a .yaml file), with which
the same tasks run first, as eval <id>-baseline. It compares pass@1,
pass^k (when both ran the same k) and cost per run, names the tasks that
flipped with a run of each eval and the rath diff that compares them, and
exits 11 when a task's pass@1 or pass^k dropped by more than
--max-pass-drop (default 0: any drop) or, with --max-cost-rise, its cost
per run rose by more than that fraction: a CI step.

--out DIR writes the report as report.json, report.md and report.html (a
page with a chart; --console URL links each run to its console page). The
exit status
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
  rath eval examples/eval/tasks.yaml --baseline main-eval/report.json --max-cost-rise 0.10   # exit 11 on a regression
  rath eval examples/eval/tasks.yaml --baseline ev-main                   # an earlier eval run, from the ledger
  rath eval examples/eval/tasks.yaml --baseline examples/fix-calc/workflow.yaml   # the tasks with another workflow, then as written
  rath eval examples/eval/varied.yaml --runs 5                 # a scripted coder that draws the right fix 3 times in 4
  rath eval instances.jsonl --workflow examples/fix-calc/workflow.yaml   # SWE-bench instances on local repositories`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Runs < 1 || o.Concurrency < 1 || o.Timeout <= 0 {
				return usageError{fmt.Errorf("--runs %d, --concurrency %d and --run-timeout %s must be positive", o.Runs, o.Concurrency, o.Timeout)}
			}
			if console != "" {
				if err := eval.CheckConsoleURL(console); err != nil {
					return usageError{fmt.Errorf("--console: %w", err)}
				}
			}
			set, done, err := loadEvalSet(cmd.Context(), args[0], instWorkflow)
			if err != nil {
				return usageError{err}
			}
			defer done()
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
			var baseSet *eval.Set
			if base.kind == eval.BaselineWorkflow {
				if baseSet, err = set.WithWorkflow(baseline, base.wf); err != nil {
					return usageError{fmt.Errorf("--baseline %s: %w", baseline, err)}
				}
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
			progress := func(prefix string) func(eval.TaskReport, eval.Run) {
				return func(t eval.TaskReport, r eval.Run) {
					verdict := "pass"
					if !r.Passed {
						verdict = "fail"
						if r.Failure != nil {
							verdict += ": " + r.Failure.String()
						}
					}
					fmt.Fprintf(a.Stderr, "rath eval: %s%s try %d: %s (session %s)\n", prefix, t.ID, r.Try, verdict, r.Session)
				}
			}
			o.Done = progress("")
			switch base.kind {
			case eval.BaselineEval:
				// Before the candidate runs: an ID with no sessions is
				// refused with nothing started.
				if base.report, err = eval.FromLedger(cmd.Context(), c, set, baseline, o); errors.Is(err, eval.ErrNoEval) {
					return usageError{err}
				} else if err != nil {
					return err
				}
			case eval.BaselineWorkflow:
				if err := a.checkTools(cmd.Context(), c, baseline, base.wf); err != nil {
					return fmt.Errorf("--baseline %s: %w", baseline, err)
				}
				bo := o
				bo.ID, bo.Done = "", progress("baseline ")
				if o.ID != "" {
					bo.ID = o.ID + "-baseline"
				}
				if base.report, err = eval.Execute(cmd.Context(), c, baseSet, bo); err != nil {
					return fmt.Errorf("the baseline's eval: %w", err)
				}
			}
			rep, err := eval.Execute(cmd.Context(), c, set, o)
			if err != nil {
				return err
			}
			rep.ConsoleURL = console
			if base.report != nil {
				file := baseline
				if base.kind == eval.BaselineEval {
					file = ""
				}
				rep.Gate = eval.Compare(base.report, file, rep, th)
				rep.Gate.BaselineKind = base.kind
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
					_, err = fmt.Fprintf(a.Stdout, "\nreport: %s, %s, %s\n", filepath.Join(out, "report.html"), filepath.Join(out, "report.md"), filepath.Join(out, "report.json"))
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
	f.StringVar(&out, "out", "", "directory to write report.json, report.md and report.html into")
	f.StringVar(&console, "console", "", "the console's URL (rath console), which report.html links each run's session to")
	f.StringVar(&baseline, "baseline", "", "what to compare with, task by task: an earlier eval's report.json (or its --out directory), an earlier eval run's ID (recomputed from the ledger), or a workflow .yaml (the tasks run with it first); exit 11 when a task regressed")
	f.Float64Var(&maxPassDrop, "max-pass-drop", 0, "with --baseline: how much a task's pass@1 (and pass^k, same k) may drop; 0: any drop regresses")
	f.Float64Var(&maxCostRise, "max-cost-rise", 0, "with --baseline: how much a task's cost per run may rise, as a fraction (0.10: 10%); unset: cost is not gated")
	f.StringVar(&prices, "prices", "", "price table: per provider and model, the price per million input and output tokens in a currency (docs/eval.md; default: scripted models free, others no price)")
	f.StringVar(&instWorkflow, "workflow", "", "with a SWE-bench instance file (.jsonl or .json, docs/eval.md): the workflow of every instance that names none")
	return cmd
}

// baselineArg is what --baseline named: a report (loaded), an eval run's
// ID (recomputed from the ledger once connected), or a workflow (run
// with the task file before the candidate).
type baselineArg struct {
	kind   string
	report *eval.Report
	wf     *workflow.Workflow
}

// gateOptions checks the gate's flags and reads the baseline: kind ""
// when there is none. A path that exists is a report (a report.json or
// the directory holding one) or, named .yaml or .yml, a workflow; any other
// value must be an eval run's ID. A threshold without a baseline, a
// negative one, or a cost gate across two currencies is refused before any
// session starts.
func gateOptions(cmd *cobra.Command, prices *eval.Prices, baseline string, maxPassDrop, maxCostRise float64) (baselineArg, eval.Thresholds, error) {
	var none baselineArg
	th := eval.Thresholds{MaxPassDrop: maxPassDrop}
	costGated := cmd.Flags().Changed("max-cost-rise")
	if costGated {
		th.MaxCostRise = &maxCostRise
	}
	if baseline == "" {
		if costGated || cmd.Flags().Changed("max-pass-drop") {
			return none, th, errors.New("--max-pass-drop and --max-cost-rise need --baseline, the eval to compare with")
		}
		return none, th, nil
	}
	for _, v := range []struct {
		flag string
		v    float64
	}{{"--max-pass-drop", maxPassDrop}, {"--max-cost-rise", maxCostRise}} {
		if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			return none, th, fmt.Errorf("%s %v: want a fraction from 0 up, such as 0.10", v.flag, v.v)
		}
	}
	fi, statErr := os.Stat(baseline)
	switch ext := filepath.Ext(baseline); {
	case statErr == nil && !fi.IsDir() && (ext == ".yaml" || ext == ".yml"):
		wf, err := workflow.Load(baseline)
		if err == nil {
			err = wf.CheckScripts()
		}
		if err != nil {
			return none, th, fmt.Errorf("--baseline %s: a workflow to run the tasks with: %w", baseline, err)
		}
		return baselineArg{kind: eval.BaselineWorkflow, wf: wf}, th, nil
	case statErr == nil:
		base, err := eval.LoadReport(baseline)
		if err != nil {
			return none, th, fmt.Errorf("--baseline: %w", err)
		}
		if costGated && base.Currency != prices.Currency {
			return none, th, fmt.Errorf("--max-cost-rise: the baseline's costs are in %q, this eval's prices in %s: give a --prices table in the baseline's currency", base.Currency, prices.Currency)
		}
		return baselineArg{kind: eval.BaselineReport, report: base}, th, nil
	case !errors.Is(statErr, os.ErrNotExist):
		return none, th, fmt.Errorf("--baseline: %w", statErr)
	case !eval.IsEvalID(baseline):
		return none, th, fmt.Errorf("--baseline %q: no such file, and not an eval run's ID (letters, digits, '.', '_' and '-', at most 64)", baseline)
	}
	return baselineArg{kind: eval.BaselineEval}, th, nil
}
