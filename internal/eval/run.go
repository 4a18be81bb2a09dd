package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Labels of every eval run's session: the eval run, the task and the try
// (1..k). rath ls --label eval=<id> lists an eval's sessions.
const (
	LabelEval = "eval"
	LabelTask = "eval_task"
	LabelTry  = "eval_try"
)

// Outcomes the eval closes a run's session with, so that its agents stop:
// OutcomeTimeout when it did not close within the run timeout,
// OutcomeInterrupted when the eval was interrupted while it ran.
const (
	OutcomeTimeout     = "eval_timeout"
	OutcomeInterrupted = "eval_interrupted"
)

// Options are how Run runs a set.
type Options struct {
	// ID names the eval run (the label eval); "" picks a new one.
	ID string
	// Runs is k, the tries of each task (at least 1).
	Runs int
	// Concurrency is how many runs are in flight at once (at least 1).
	Concurrency int
	// Timeout is how long a run may take to close.
	Timeout time.Duration
	// Done, when set, is called as each run ends, from the run's
	// goroutine, one call at a time.
	Done func(TaskReport, Run)
	// Now is the clock of the report's times (default time.Now).
	Now func() time.Time
	// Prices prices each run's usage (default DefaultPrices: scripted
	// models free, no price for any other).
	Prices *Prices
}

// Run is one try of a task: its session and how it went.
type Run struct {
	Try int `json:"try"`
	// Session is the session the run is graded on: the one the eval
	// started, or, when its workflow forked and went on on the fork (the
	// branch it forked closed superseded), the last such fork; Root is then
	// the session the eval started. Tokens and cost count every branch.
	Session string `json:"session,omitempty"`
	Root    string `json:"root,omitempty"`
	Passed  bool   `json:"passed"`
	// Closed says the session closed (within the run timeout, by its
	// workflow, not by the eval); Outcome and CloseReason are its close's.
	Closed      bool     `json:"closed"`
	Outcome     string   `json:"outcome,omitempty"`
	CloseReason string   `json:"close_reason,omitempty"`
	Failure     *Failure `json:"failure,omitempty"`
	// Grading is what a grader's command or expected state found on the
	// run's grading fork, when it has either.
	Grading   *Grading `json:"grading,omitempty"`
	TokensIn  int64    `json:"tokens_in"`
	TokensOut int64    `json:"tokens_out"`
	// Models is the session's usage by "provider/model"
	// (session.Usage.ByModel); Cost prices it in the report's currency,
	// absent when a model has no price: NoPrice names those.
	Models  map[string]session.Tokens `json:"models,omitempty"`
	Cost    *float64                  `json:"cost,omitempty"`
	NoPrice []string                  `json:"no_price,omitempty"`
	// LatencyMS is from the session's first event to its last, in
	// milliseconds.
	LatencyMS int64 `json:"latency_ms"`
	// Head, HeadHash, HeadSig and KeyID are the session's signed head as
	// the ledger's verify reported it after the run: the ledger's signature
	// of the hash that covers every event of the session, for checking the
	// record later (rath export, rath verify). Verified is whether the
	// chain held then; Fault, if not, says where it broke.
	Head     uint64 `json:"head,omitempty"`
	HeadHash string `json:"head_hash,omitempty"`
	HeadSig  string `json:"head_sig,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	Verified bool   `json:"verified"`
	Fault    string `json:"fault,omitempty"`

	// branches is the run's chain of superseding forks, the started
	// session first (nil: the session alone).
	branches []branch
}

// TaskReport is one task's runs and metrics.
type TaskReport struct {
	ID       string  `json:"id"`
	Task     string  `json:"task"`
	Workflow string  `json:"workflow"`
	Summary  Summary `json:"summary"`
	Runs     []Run   `json:"runs"`
}

// ReportFormat names the report's JSON shape; a change that is not an
// addition gets a new name.
const ReportFormat = "rath.eval.report.v1"

// Report is an eval run: every task's runs and the metrics over them.
type Report struct {
	Format      string `json:"format"`
	ID          string `json:"id"`
	File        string `json:"file"`
	K           int    `json:"k"`
	Concurrency int    `json:"concurrency"`
	TimeoutMS   int64  `json:"timeout_ms"`
	// Currency is the currency of every cost in the report; Prices the
	// price table's file (absent for the default table, in which only
	// scripted models have a price).
	Currency string       `json:"currency"`
	Prices   string       `json:"prices,omitempty"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Tasks    []TaskReport `json:"tasks"`
	Overall  Summary      `json:"overall"`
	// ConsoleURL, when set, is the console the report's page links each
	// run's session to (rath eval --console).
	ConsoleURL string `json:"console_url,omitempty"`
	// Gate is the comparison with a baseline eval (rath eval --baseline),
	// when there was one.
	Gate *Gate `json:"gate,omitempty"`
}

// Execute runs every task of set o.Runs times against the deployment c
// talks to, at most o.Concurrency at once, and grades each run. Each task's
// workflow (and workspace) is uploaded once, before any session starts: an
// error there (the deployment unreachable, a refused upload) returns with
// no session started. A run that cannot start, does not close in time or
// fails its grader is a failed run with its cause, not an error; Execute
// returns an error only for that preparation and when ctx ends; then the
// sessions of the runs in flight are closed (OutcomeInterrupted), and no
// more start.
func Execute(ctx context.Context, c *client.Client, set *Set, o Options) (*Report, error) {
	if o.Runs < 1 || o.Concurrency < 1 || o.Timeout <= 0 {
		return nil, fmt.Errorf("eval: runs %d, concurrency %d and timeout %s must be positive", o.Runs, o.Concurrency, o.Timeout)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	if o.ID == "" {
		o.ID = "eval-" + events.NewID()
	}
	if o.Prices == nil {
		o.Prices = DefaultPrices()
	}
	rep := &Report{Format: ReportFormat, ID: o.ID, File: set.Path, K: o.Runs, Concurrency: o.Concurrency,
		TimeoutMS: o.Timeout.Milliseconds(), Currency: o.Prices.Currency, Prices: o.Prices.File, Started: now().UTC()}

	starts := make([]events.SessionStarted, len(set.Tasks))
	for i, t := range set.Tasks {
		d, err := prepare(ctx, c, t)
		if err != nil {
			return nil, err
		}
		starts[i] = d
		rep.Tasks = append(rep.Tasks, TaskReport{ID: t.ID, Task: t.Text, Workflow: t.WorkflowPath, Runs: make([]Run, o.Runs)})
	}

	type job struct{ task, try int }
	jobs := make(chan job)
	var (
		wg sync.WaitGroup
		mu sync.Mutex // rep.Tasks[*].Runs and o.Done
	)
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r := runOnce(ctx, c, o, set.Tasks[j.task], starts[j.task], j.try)
				r.price(o.Prices)
				mu.Lock()
				rep.Tasks[j.task].Runs[j.try-1] = r
				if o.Done != nil {
					o.Done(rep.Tasks[j.task], r)
				}
				mu.Unlock()
			}
		}()
	}
	// Tries go round the tasks, so that with fewer slots than runs every
	// task gets its first try early.
feed:
	for try := 1; try <= o.Runs; try++ {
		for i := range set.Tasks {
			select {
			case jobs <- job{i, try}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eval %s interrupted: its runs still open were closed as %s: %w", o.ID, OutcomeInterrupted, err)
	}
	for i := range rep.Tasks {
		rep.Tasks[i].Summary = Summarize(rep.Tasks[i].Runs)
	}
	rep.Overall = Overall(rep.Tasks)
	rep.Finished = now().UTC()
	return rep, nil
}

// prepare uploads a task's workflow bundle and workspace seed, as rath
// start does, and returns the start every try of the task shares.
func prepare(ctx context.Context, c *client.Client, t *Task) (events.SessionStarted, error) {
	d := events.SessionStarted{Task: t.Text}
	ref, err := workflow.Store(ctx, t.wf, c.PutBlob)
	if err != nil {
		return d, fmt.Errorf("task %s: workflow %s: %w", t.ID, t.WorkflowPath, err)
	}
	d.Workflow, d.WorkflowHash, d.WorkflowRef = t.wf.Name, t.wf.Hash(), ref
	if t.WorkspacePath != "" {
		if err := c.SeedWorkspace(ctx, t.WorkspacePath, &d); err != nil {
			return d, fmt.Errorf("task %s: %w", t.ID, err)
		}
	}
	return d, nil
}

// errClosed ends a run's watch at its session's close.
var errClosed = errors.New("session closed")

// runOnce starts one try of a task, follows its session until it closes
// or the run timeout passes, and grades it.
func runOnce(ctx context.Context, c *client.Client, o Options, t *Task, start events.SessionStarted, try int) Run {
	r := Run{Try: try}
	start.Labels = maps.Clone(start.Labels)
	if start.Labels == nil {
		start.Labels = map[string]string{}
	}
	start.Labels[LabelEval], start.Labels[LabelTask], start.Labels[LabelTry] = o.ID, t.ID, fmt.Sprint(try)
	// Each try seeds its scripted agents' choices differently, and the
	// same way in every eval of the set, so that pass^k measures varied
	// runs and a baseline's try n draws as the candidate's try n does.
	start.Labels[events.LabelSeed] = fmt.Sprintf("%s/%d", t.ID, try)
	// The eval names the session, so that it can close one whose start
	// was interrupted before the ledger's answer came back.
	id := events.NewID()
	if _, err := c.Start(ctx, id, start); err != nil {
		r.Failure = &Failure{Cause: CauseError, Detail: fmt.Sprintf("start: %v", err)}
		if ctx.Err() != nil {
			interrupted(ctx, c, o, id)
		}
		return r
	}
	r.Session = id

	var first, last events.Stored
	bs := []branch{{ID: id}}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	var err error
	// A workflow that forks closes the branch it forks superseded and goes
	// on on the fork: the run is followed there, to the branch that closes
	// otherwise, and graded on it.
	for {
		var closed events.SessionClosed
		cur := bs[len(bs)-1]
		var opts []client.WatchOption
		if cur.Fork > 0 {
			opts = append(opts, client.From(cur.Fork+1))
		}
		err = c.Watch(wctx, cur.ID, func(ev events.Stored) error {
			if first.Seq == 0 {
				first = ev
			}
			last = ev
			if ev.Type == events.TypeSessionClosed {
				_ = json.Unmarshal(ev.Data, &closed)
				return errClosed
			}
			return nil
		}, opts...)
		if !errors.Is(err, errClosed) || closed.Outcome != OutcomeSuperseded || len(bs) >= maxBranches {
			break
		}
		next, at, serr := successor(wctx, c, cur.ID)
		if serr != nil || next == "" {
			break
		}
		bs = append(bs, branch{ID: next, Fork: at})
	}
	cancel()
	if len(bs) > 1 {
		r.Root, r.Session = id, bs[len(bs)-1].ID
	}
	switch {
	case errors.Is(err, errClosed):
		r.Closed = true
	case ctx.Err() != nil:
		r.Failure = &Failure{Cause: CauseError, Detail: "interrupted"}
		interrupted(ctx, c, o, r.Session)
		return r
	case errors.Is(err, context.DeadlineExceeded):
		r.Failure = &Failure{Cause: CauseTimeout, Detail: fmt.Sprintf("not closed within %s", o.Timeout)}
		// Stop its agents; a close that loses the race with the
		// workflow's own is refused, and the state below says which.
		_, _ = c.Close(ctx, r.Session, events.SessionClosed{Outcome: OutcomeTimeout, Reason: fmt.Sprintf("rath eval %s: not closed within %s", o.ID, o.Timeout)})
	default:
		r.Failure = &Failure{Cause: CauseError, Detail: fmt.Sprintf("watch: %v", err)}
	}
	r.branches = bs
	settle(ctx, c, o, t, &r, first, last)
	return r
}

// settle completes a run whose session is done with (closed, or given
// up on): its tokens and models from the session's state, its latency
// from first to last event, its grade when it closed, and its signed head.
// A ledger baseline (FromLedger) settles recorded sessions the same way.
func settle(ctx context.Context, c *client.Client, o Options, t *Task, r *Run, first, last events.Stored) {
	if r.Closed {
		r.LatencyMS = last.Time.Sub(first.Time).Milliseconds()
	}

	st, err := c.State(ctx, r.Session)
	if err != nil {
		if r.Failure == nil {
			r.Failure = &Failure{Cause: CauseError, Detail: fmt.Sprintf("state: %v", err)}
		}
		return
	}
	usage := st.Usage
	if extra, err := spent(ctx, c, r.branches); err != nil {
		if r.Failure == nil {
			r.Failure = &Failure{Cause: CauseError, Detail: err.Error()}
		}
	} else {
		usage.Merge(extra)
	}
	r.TokensIn, r.TokensOut = usage.Total.In, usage.Total.Out
	r.Models = usage.ByModel
	if st.Status == session.StatusClosed || st.Status == session.StatusArchived {
		r.Outcome, r.CloseReason = st.Outcome, st.CloseReason
	}
	if r.Closed {
		r.Failure = t.Grader.Grade(st, last)
		if r.Failure == nil && t.Grader.sandboxed() {
			gctx, cancel := context.WithTimeout(ctx, o.Timeout)
			r.Grading, r.Failure = gradeSandbox(gctx, c, o.ID, r.Session, last.Seq, t.Grader)
			cancel()
		}
		r.Passed = r.Failure == nil
	}
	verify(ctx, c, r)
}

// price sets the run's cost from its usage by model: absent, with the
// models named, when one of them has no price.
func (r *Run) price(p *Prices) {
	cost, noPrice := p.Cost(r.Models)
	r.Cost, r.NoPrice = &cost, noPrice
	if len(noPrice) > 0 {
		r.Cost = nil
	}
}

// interrupted closes the session of a run the eval's interruption cut
// short: the eval is ending, and its open runs must not go on spending. A
// session that closed meanwhile, or never started, refuses the close.
func interrupted(ctx context.Context, c *client.Client, o Options, id string) {
	_, _ = c.Close(context.WithoutCancel(ctx), id, events.SessionClosed{Outcome: OutcomeInterrupted, Reason: fmt.Sprintf("rath eval %s was interrupted", o.ID)})
}

// verify records the session's signed head, as the ledger's verify
// reports it.
func verify(ctx context.Context, c *client.Client, r *Run) {
	v, err := c.Verify(ctx, r.Session)
	if err != nil {
		r.Fault = err.Error()
		return
	}
	r.Head, r.HeadHash, r.HeadSig, r.KeyID, r.Verified = v.Head, v.HeadHash, v.HeadSig, v.KeyID, v.OK
	if v.Fault != nil {
		r.Fault = fmt.Sprintf("seq %d of %s: %s", v.Fault.Seq, v.Fault.Session, v.Fault.Reason)
	}
}
