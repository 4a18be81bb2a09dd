package eval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Kinds of baseline a gate compares with (Gate.BaselineKind).
const (
	// BaselineReport: an earlier eval's report.json.
	BaselineReport = "report"
	// BaselineEval: an earlier eval run, recomputed from its sessions in
	// the ledger (FromLedger).
	BaselineEval = "eval"
	// BaselineWorkflow: the same tasks run in the same invocation with
	// another workflow (WithWorkflow).
	BaselineWorkflow = "workflow"
)

// ErrNoEval is FromLedger's error for an ID no session of the ledger
// carries as its eval label, or none of whose tasks the task file has: a
// baseline that names nothing to compare with.
var ErrNoEval = errors.New("no such eval run")

// evalID is what an eval run's ID given as a baseline may be: a label
// value, so plain.
var evalID = taskID

// IsEvalID reports whether s can name an eval run (the value of its
// sessions' eval label).
func IsEvalID(s string) bool { return evalID.MatchString(s) }

// Runs lists the sessions of an eval run in the ledger, by its label,
// leaving out the runs' grading forks: the run sessions, oldest first.
func Runs(ctx context.Context, c *client.Client, id string) ([]api.Session, error) {
	all, err := c.List(ctx, api.ListRequest{Labels: map[string]string{LabelEval: id}})
	if err != nil {
		return nil, fmt.Errorf("sessions of eval %s: %w", id, err)
	}
	runs := all[:0]
	for _, s := range all {
		// Forks inherit their parent's labels: a grading fork, and a fork
		// the run's workflow made, are part of a run, not runs.
		if _, grading := s.Labels[LabelGrades]; !grading && s.Parent == "" {
			runs = append(runs, s)
		}
	}
	return runs, nil
}

// FromLedger recomputes the report of an earlier eval run from its
// sessions in the ledger (labelled eval=id), for the tasks of set: each
// recorded run is graded again with set's grader of its task (a command or
// expected-state grader on a new grading fork of the recorded session),
// priced with o.Prices, and its head verified now. The ledger does not keep
// a run's grade, and grading both evals with the same graders is what makes
// them comparable. Recorded tasks that set does not have cannot be graded
// and are left out; a task of set that the eval did not run is absent, as
// in a report of it. An ID with no sessions is an error.
func FromLedger(ctx context.Context, c *client.Client, set *Set, id string, o Options) (*Report, error) {
	sessions, err := Runs(ctx, c, id)
	if err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, fmt.Errorf("baseline %s: no session in the ledger is labelled %s=%s: not an eval run's ID here: %w", id, LabelEval, id, ErrNoEval)
	}
	if o.Prices == nil {
		o.Prices = DefaultPrices()
	}
	o.ID = id
	byTask := map[string][]api.Session{}
	k := 0
	for _, s := range sessions {
		t := s.Labels[LabelTask]
		byTask[t] = append(byTask[t], s)
		k = max(k, len(byTask[t]))
	}
	rep := &Report{Format: ReportFormat, ID: id, File: "(the ledger)", K: k, Currency: o.Prices.Currency, Prices: o.Prices.File}
	for _, t := range set.Tasks {
		ss := byTask[t.ID]
		if len(ss) == 0 {
			continue
		}
		slices.SortStableFunc(ss, func(a, b api.Session) int { return cmp.Compare(try(a), try(b)) })
		tr := TaskReport{ID: t.ID, Task: t.Text, Workflow: ss[0].Workflow}
		for i, s := range ss {
			if rep.Started.IsZero() || s.Created.Before(rep.Started) {
				rep.Started = s.Created
			}
			rep.Finished = later(rep.Finished, s.Updated)
			r, err := recorded(ctx, c, o, t, s, i+1)
			if err != nil {
				return nil, fmt.Errorf("baseline %s: %w", id, err)
			}
			tr.Runs = append(tr.Runs, r)
		}
		tr.Summary = Summarize(tr.Runs)
		rep.Tasks = append(rep.Tasks, tr)
	}
	if len(rep.Tasks) == 0 {
		return nil, fmt.Errorf("baseline %s: its sessions are of tasks this task file does not have: %w", id, ErrNoEval)
	}
	rep.Overall = Overall(rep.Tasks)
	return rep, nil
}

// recorded settles one recorded run: closed by its workflow, or by the
// eval that ran it (a timeout, an interruption), or still open.
func recorded(ctx context.Context, c *client.Client, o Options, t *Task, s api.Session, n int) (Run, error) {
	r := Run{Try: n, Session: s.ID}
	if v, err := strconv.Atoi(s.Labels[LabelTry]); err == nil {
		r.Try = v
	}
	// A run whose workflow forked is graded on the fork that went on.
	bs, err := chain(ctx, c, s.ID, s.Outcome)
	if err != nil {
		return r, fmt.Errorf("session %s: %w", s.ID, err)
	}
	if len(bs) > 1 {
		end := bs[len(bs)-1]
		cur, err := c.List(ctx, api.ListRequest{Labels: map[string]string{LabelEval: s.Labels[LabelEval], LabelTask: s.Labels[LabelTask], LabelTry: s.Labels[LabelTry]}})
		if err != nil {
			return r, fmt.Errorf("session %s: %w", s.ID, err)
		}
		i := slices.IndexFunc(cur, func(x api.Session) bool { return x.ID == end.ID })
		if i < 0 {
			return r, fmt.Errorf("session %s: its fork %s is not listed with its labels", s.ID, end.ID)
		}
		r.Root, r.Session, r.branches = s.ID, end.ID, bs
		s = cur[i]
	}
	first, err := c.Log(ctx, s.ID, client.Range{Limit: 1})
	if err != nil {
		return r, fmt.Errorf("session %s: %w", s.ID, err)
	}
	head, err := c.Log(ctx, s.ID, client.Range{From: s.Seq})
	if err != nil || len(first) == 0 || len(head) == 0 {
		return r, fmt.Errorf("session %s: its first and last events: %v", s.ID, err)
	}
	last := head[len(head)-1]
	switch {
	case last.Type != events.TypeSessionClosed:
		r.Failure = &Failure{Cause: CauseTimeout, Detail: "not closed"}
	case s.Outcome == OutcomeTimeout:
		r.Failure = &Failure{Cause: CauseTimeout, Detail: "closed by its eval: " + OutcomeTimeout}
	case s.Outcome == OutcomeInterrupted:
		r.Failure = &Failure{Cause: CauseError, Detail: "interrupted"}
	default:
		r.Closed = true
	}
	settle(ctx, c, o, t, &r, first[0], last)
	r.price(o.Prices)
	return r, nil
}

// WithWorkflow returns set with every task's workflow replaced by wf (read
// from path): the baseline a workflow names, run now. A sandboxed grader's
// agent is chosen again in wf, and a grader no agent of wf can make is an
// error.
func (set *Set) WithWorkflow(path string, wf *workflow.Workflow) (*Set, error) {
	out := &Set{Path: set.Path}
	for _, t := range set.Tasks {
		c := *t
		c.WorkflowPath, c.wf = path, wf
		if c.Grader.sandboxed() {
			// The task's agent if the baseline has it, else its own first.
			as := c.Grader.As
			if _, ok := wf.Agent(as); !ok {
				as = ""
			}
			if err := c.Grader.pickAgent(wf, as); err != nil {
				return nil, fmt.Errorf("task %s with workflow %s: %w", t.ID, path, err)
			}
		}
		out.Tasks = append(out.Tasks, &c)
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func try(s api.Session) int {
	n, err := strconv.Atoi(s.Labels[LabelTry])
	if err != nil {
		return 0
	}
	return n
}
