package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// recheckReport is what rath recheck prints (--json).
type recheckReport struct {
	Format   string                        `json:"format"`
	ID       string                        `json:"id"`
	Workflow string                        `json:"workflow"`
	Sessions []*rerun.CounterfactualResult `json:"sessions"`
	Verdicts map[string]int                `json:"verdicts"`
	// Reused and Ran add up the sessions' prefixes reused and what their
	// counterfactuals ran; Saved is the share of from-the-start runs that
	// reuse spared, over all of them.
	Reused rerun.Cost   `json:"reused"`
	Ran    rerun.Cost   `json:"ran"`
	Saved  rerun.Saving `json:"saved"`
}

const recheckFormat = "rath.recheck.report.v1"

func (a *app) recheckCmd() *cobra.Command {
	var (
		wfPath, evalID, tasksPath, outcome, celSrc, id string
		modelf, baseURL                                string
		labelf, agentf, closedAs                       []string
		concurrency                                    int
		wait                                           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "recheck --workflow CHANGED.yaml (--eval ID | --label KEY=VALUE… | SESSION…)",
		Short: "Re-run recorded sessions on a changed workflow from the first turn the change can affect, grade them and compare",
		Long: `recheck is counterfactual evaluation of recorded sessions (docs/eval.md):
for each closed session selected (the runs of an eval with --eval, sessions
with every --label, or the sessions named; --closed-as narrows the first two to
the sessions that closed with an outcome, such as failed), it finds the first point the
changed workflow can affect: the first turn of an agent defined differently
(its model, provider, system prompt, tools, script, recall…), or the first
routing decision the changed rules, stop conditions or budgets decide
differently, whichever comes first. It forks the session there with the
changed workflow, so the prefix is reused as recorded and never run again,
asks that agent for its turn, waits for the fork to close (at most
--run-timeout), grades both with the same grader, and reports per session:
unchanged or changed, the first event where the runs diverge, and the model
calls, tokens and time the reused prefix spared against a run from the
start. A change of the workflow as a whole (gates, compaction, memory,
sandbox, network, MCP servers), or a first difference that is not an
agent's turn, runs the session again from its start instead, and says so; a
change that affects nothing runs nothing ("unaffected").

The grader is the task's (--tasks: the task file of the eval, by each
session's eval_task label), else --outcome and --cel. Graders that run a
command or compare a state in the sandbox are not supported here. The
counterfactuals are sessions like any: labelled recheck=<ID> and
recheck_of=<session>, beside the labels they inherit; selecting by label
leaves them out, and only root sessions are selected by label.

Exit status: 0 when every session was rechecked (whatever the verdicts); 2
for a workflow, task file or selection with a problem; 6 when the
deployment does not answer.`,
		Example: `  rath recheck --workflow examples/eval/recheck/workflow.yaml --eval ev-fix-calc --tasks examples/eval/tasks.yaml
  rath recheck --workflow examples/eval/recheck/workflow.yaml --label team=payments --outcome succeeded --json
  rath recheck --workflow examples/eval/recheck/workflow.yaml SESSION_ID --cel 'state.tool_calls >= 3'
  rath recheck --workflow examples/fix-calc/workflow.yaml --model scripted/scripted-2 --agent coder --eval ev-fix-calc --tasks examples/eval/tasks.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if wfPath == "" {
				return usageError{errors.New("--workflow: the changed workflow file is required")}
			}
			if concurrency < 1 || wait <= 0 {
				return usageError{fmt.Errorf("--concurrency %d and --run-timeout %s must be positive", concurrency, wait)}
			}
			sel := 0
			for _, set := range []bool{evalID != "", len(labelf) > 0, len(args) > 0} {
				if set {
					sel++
				}
			}
			if sel != 1 {
				return usageError{errors.New("select the recorded sessions one way: --eval ID, --label KEY=VALUE (repeatable) or SESSION arguments")}
			}
			lbls, err := labels(labelf)
			if err != nil {
				return err
			}
			if len(closedAs) > 0 && len(args) > 0 {
				return usageError{errors.New("--closed-as selects among an eval's or a label's sessions: name sessions or select them, not both")}
			}
			wf, err := recheckWorkflow(wfPath, modelf, baseURL, agentf)
			if err != nil {
				return usageError{err}
			}
			bundle, err := workflow.NewBundle(wf)
			if err != nil {
				return usageError{err}
			}
			grade, err := recheckGrader(tasksPath, outcome, celSrc, cmd.Flags().Changed("outcome") || celSrc != "")
			if err != nil {
				return usageError{err}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := a.checkTools(ctx, c, wfPath, wf); err != nil {
				return err
			}
			ids := args
			if len(args) == 0 {
				if evalID != "" {
					lbls = map[string]string{eval.LabelEval: evalID}
				}
				if ids, err = recheckSelect(ctx, c, lbls, closedAs); err != nil {
					return err
				}
			}
			ref, err := workflow.Store(ctx, wf, c.PutBlob)
			if err != nil {
				return fmt.Errorf("store the changed workflow: %w", err)
			}
			if id == "" {
				id = "recheck-" + events.NewID()
			}
			rep, err := runRecheck(ctx, c, ids, concurrency, rerun.CounterfactualOptions{Workflow: wf, Bundle: bundle, Ref: ref,
				Grade: grade, Run: id, Wait: wait, Recorded: workflow.NewLibrary(c.GetBlob)}, a.Stderr)
			if err != nil {
				return err
			}
			rep.ID, rep.Workflow = id, wfPath
			if a.json {
				return a.printJSON(rep)
			}
			return rep.writeText(a.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&wfPath, "workflow", "", "the changed workflow file (required)")
	f.StringVar(&evalID, "eval", "", "recheck the runs of this eval (its sessions labelled eval=ID)")
	f.StringArrayVar(&labelf, "label", nil, "recheck the root sessions with label key=value (repeatable: all must hold)")
	f.StringVar(&modelf, "model", "", "run the changed agents on this model instead of the workflow's: PROVIDER/MODEL (the workflow file given is the recorded one, or a changed one)")
	f.StringArrayVar(&agentf, "agent", nil, "with --model: the agent to change (repeatable; default: every agent)")
	f.StringVar(&baseURL, "base-url", "", "with --model: the provider's API endpoint (the agent worker must allow it, as rath up --allow-base-url)")
	f.StringArrayVar(&closedAs, "closed-as", nil, "with --eval or --label: only the sessions that closed with this outcome (repeatable: any of them), such as failed")
	f.StringVar(&tasksPath, "tasks", "", "grade each session with its task's grader from this task file (by its eval_task label)")
	f.StringVar(&outcome, "outcome", "succeeded", "without --tasks: the outcome a session must close with to pass")
	f.StringVar(&celSrc, "cel", "", "without --tasks: a CEL expression over the final state that must hold to pass (as a task's grader.cel)")
	f.IntVar(&concurrency, "concurrency", 4, "how many counterfactuals run at once")
	f.DurationVar(&wait, "run-timeout", 10*time.Minute, "how long a counterfactual may take to close")
	f.StringVar(&id, "id", "", "the recheck's ID, the value of every counterfactual's recheck label (default: a new one)")
	return cmd
}

// recheckGrader is the grading function: the task's grader by each
// session's eval_task label (tasks), else the flags'.
func recheckGrader(tasksPath, outcome, celSrc string, flagsSet bool) (rerun.GradeFunc, error) {
	if tasksPath == "" {
		g := eval.Grader{Outcome: outcome}
		if celSrc != "" {
			cond, err := workflow.CompileCondition(celSrc)
			if err != nil {
				return nil, fmt.Errorf("--cel: %w", err)
			}
			g.CEL = cond
		}
		return gradeWith(func(*session.State) (eval.Grader, error) { return g, nil }), nil
	}
	if flagsSet {
		return nil, errors.New("--tasks grades with each task's grader: --outcome and --cel go without it")
	}
	set, err := eval.Load(tasksPath)
	if err != nil {
		return nil, err
	}
	byID := map[string]eval.Grader{}
	for _, t := range set.Tasks {
		if len(t.Grader.Command) > 0 || t.Grader.State != nil {
			return nil, fmt.Errorf("%s: task %s: its grader runs in the sandbox (command or state), which rath recheck does not support: grade by outcome and cel", tasksPath, t.ID)
		}
		byID[t.ID] = t.Grader
	}
	return gradeWith(func(st *session.State) (eval.Grader, error) {
		task := st.Labels[eval.LabelTask]
		g, ok := byID[task]
		if !ok {
			return eval.Grader{}, fmt.Errorf("no task %q in %s (the session's %s label)", task, tasksPath, eval.LabelTask)
		}
		return g, nil
	}), nil
}

func gradeWith(pick func(*session.State) (eval.Grader, error)) rerun.GradeFunc {
	return func(st *session.State, last events.Stored) string {
		g, err := pick(st)
		if err != nil {
			return "error: " + err.Error()
		}
		if f := g.Grade(st, last); f != nil {
			return f.String()
		}
		return ""
	}
}

// recheckSelect lists the closed root sessions with every label, leaving
// out counterfactuals of an earlier recheck.
func recheckSelect(ctx context.Context, c *client.Client, lbls map[string]string, closedAs []string) ([]string, error) {
	list, err := c.List(ctx, api.ListRequest{Labels: lbls, Status: "closed"})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range list {
		if s.Parent != "" || s.Labels[rerun.LabelRecheck] != "" || (len(closedAs) > 0 && !slices.Contains(closedAs, s.Outcome)) {
			continue
		}
		ids = append(ids, s.ID)
	}
	if len(ids) == 0 {
		if len(closedAs) > 0 {
			return nil, usageError{fmt.Errorf("no closed root session has the labels %s and closed as %s", joinLabels(lbls), strings.Join(closedAs, " or "))}
		}
		return nil, usageError{fmt.Errorf("no closed root session has the labels %s", joinLabels(lbls))}
	}
	return ids, nil
}

// runRecheck rechecks every session, concurrency at a time, in order in
// the report; a line per session goes to progress as each ends.
func runRecheck(ctx context.Context, c *client.Client, ids []string, concurrency int, o rerun.CounterfactualOptions, progress io.Writer) (*recheckReport, error) {
	rep := &recheckReport{Format: recheckFormat, Sessions: make([]*rerun.CounterfactualResult, len(ids)), Verdicts: map[string]int{}}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	var mu sync.Mutex
	slots := make(chan struct{}, concurrency)
	for i, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			r, err := rerun.Counterfactual(ctx, c, id, o)
			mu.Lock()
			defer mu.Unlock()
			rep.Sessions[i], errs[i] = r, err
			if err != nil {
				fmt.Fprintf(progress, "rath recheck: %s: %v\n", id, err)
				return
			}
			fmt.Fprintf(progress, "rath recheck: %s: %s\n", id, r.Verdict)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range rep.Sessions {
		rep.Verdicts[r.Verdict]++
		rep.Reused = rep.Reused.Add(r.Reused)
		rep.Ran = rep.Ran.Add(r.Ran)
	}
	rep.Saved = rerun.SavingOf(rep.Reused, rep.Ran)
	return rep, nil
}

func (r *recheckReport) writeText(w io.Writer) error {
	fmt.Fprintf(w, "recheck %s of %d sessions on %s: %d unchanged, %d changed, %d unaffected, %d not closed\n\n", r.ID, len(r.Sessions), r.Workflow,
		r.Verdicts[rerun.VerdictUnchanged], r.Verdicts[rerun.VerdictChanged], r.Verdicts[rerun.VerdictUnaffected], r.Verdicts[rerun.VerdictNotClosed])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tTASK\tFROM\tVERDICT\tORIGINAL\tCOUNTERFACTUAL\tDIVERGED AT\tREUSED CALLS\tRAN CALLS\tSAVED TOKENS\tSAVED TIME")
	for _, s := range r.Sessions {
		from := fmt.Sprintf("%d (%s)", s.Point.At, s.Point.Agent)
		if s.FromStart {
			from = "start"
		} else if s.Point.Agent == "" {
			from = "-"
		}
		cf, div := "-", "-"
		if s.Counterfactual != nil {
			cf = s.Counterfactual.Session + " " + grade(*s.Counterfactual)
		}
		if s.Diverged != nil {
			div = fmt.Sprintf("%d %s", s.Diverged.Seq, s.Diverged.Type)
			if s.Diverged.Type == "" {
				div = fmt.Sprintf("%d (past the original's end)", s.Diverged.CounterfactualSeq)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.0f%%\t%.0f%%\n", s.Session, orNone(s.Task), from, s.Verdict, grade(s.Original), cf, div,
			s.Reused.ModelCalls, s.Ran.ModelCalls, 100*s.Saved.Tokens, 100*s.Saved.Wall)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\noverall: reused %d model calls, %d tokens, %s of recorded time; ran %d model calls, %d tokens, %s: reuse saved %.0f%% of the tokens and %.0f%% of the time of running from the start\n",
		r.Reused.ModelCalls, r.Reused.TokensIn+r.Reused.TokensOut, time.Duration(r.Reused.WallMS)*time.Millisecond,
		r.Ran.ModelCalls, r.Ran.TokensIn+r.Ran.TokensOut, time.Duration(r.Ran.WallMS)*time.Millisecond, 100*r.Saved.Tokens, 100*r.Saved.Wall)
	for _, s := range r.Sessions {
		fmt.Fprintf(w, "  %s: %s (%s)\n", s.Session, s.Point.Why, s.Change)
		if s.Error != "" {
			fmt.Fprintf(w, "    %s\n", s.Error)
		}
	}
	return nil
}

// grade is a side's outcome and pass or fail.
func grade(s rerun.Side) string {
	v := "pass"
	if !s.Passed {
		v = "fail"
	}
	return orNone(s.Outcome) + "/" + v
}

// recheckWorkflow loads the changed workflow: the file, with --model's
// change made in its source when there is one (so the bundle the
// counterfactuals record holds the model they ran on).
func recheckWorkflow(path, model, baseURL string, agents []string) (*workflow.Workflow, error) {
	if model == "" {
		if len(agents) > 0 || baseURL != "" {
			return nil, errors.New("--agent and --base-url change an agent's model: they need --model PROVIDER/MODEL")
		}
		return loadWorkflow(path)
	}
	provider, name, err := parseModel(model)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load workflow: %w", err)
	}
	changed, err := modelChange{provider: provider, model: name, baseURL: baseURL, agents: agents}.rewrite(raw, path)
	if err != nil {
		return nil, err
	}
	wf, err := workflow.Parse(changed, path)
	if err != nil {
		return nil, fmt.Errorf("%s with --model %s: %w", path, model, err)
	}
	if err := wf.CheckScripts(); err != nil {
		return nil, err
	}
	return wf, nil
}
