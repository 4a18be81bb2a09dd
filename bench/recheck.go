package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// sectionRecheck measures counterfactual evaluation (rath recheck, issue 31
// target E2). It is optional: it starts a selector and an agent worker of
// its own, in this process.
const sectionRecheck = "recheck"

// The section's workflows, under bench/testdata: the recorded one and the
// change, which affects only the last agent.
const (
	recheckRecorded = "testdata/recheck/long.yaml"
	recheckChanged  = "testdata/recheck/strict.yaml"
)

// runRecheck is section E2. It records n 30-turn sessions (29 turns of a
// worker, one of a finisher; not measured), then, measured one after the
// other at the same concurrency:
//
//   - re-running them from the start on the changed workflow (a new
//     session per recorded one, as an eval of the changed workflow would);
//   - rechecking them (rerun.Counterfactual): each forked before the
//     finisher's turn on the changed workflow, the 29 worker turns reused.
//
// The CPU compared is this process's (NATS server, selector, agent worker,
// clients, and the ledger unless it runs as a process of its own) plus the
// ledger's process when it does.
func (h *harness) runRecheck(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	load := func(p string) (*workflow.Workflow, error) { return workflow.Load(filepath.Join(root, "bench", p)) }
	recorded, err := load(recheckRecorded)
	if err != nil {
		return err
	}
	changed, err := load(recheckChanged)
	if err != nil {
		return err
	}
	bundle, err := workflow.NewBundle(changed)
	if err != nil {
		return err
	}
	c, stop, err := h.startLoop("rath-bench-recheck")
	if err != nil {
		return err
	}
	defer stop()
	starts := map[string]events.SessionStarted{}
	for name, wf := range map[string]*workflow.Workflow{"recorded": recorded, "changed": changed} {
		ref, err := workflow.Store(ctx, wf, c.PutBlob)
		if err != nil {
			return err
		}
		starts[name] = events.SessionStarted{Task: "bench recheck: 30 turns", Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}
	}
	n, conc := h.cfg.n(50, 4), 8
	wait := 10 * time.Minute
	grade := func(st *session.State, last events.Stored) string {
		if f := (eval.Grader{Outcome: "succeeded"}).Grade(st, last); f != nil {
			return f.String()
		}
		return ""
	}

	// Record the sessions (not measured), and warm the changed workflow's
	// bundle up in the services with one run of it.
	h.logf("E2: recording %d sessions of 30 turns", n)
	ids := make([]string, n)
	if err := inParallel(n, conc, func(i int) error {
		id, err := runToClose(ctx, c, starts["recorded"], wait)
		ids[i] = id
		return err
	}); err != nil {
		return fmt.Errorf("E2: record: %w", err)
	}
	if _, err := runToClose(ctx, c, starts["changed"], wait); err != nil {
		return fmt.Errorf("E2: warm-up: %w", err)
	}

	h.logf("E2: %d sessions from the start on the changed workflow, %d at a time", n, conc)
	cpu := h.cpuStart()
	if err := inParallel(n, conc, func(int) error {
		_, err := runToClose(ctx, c, starts["changed"], wait)
		return err
	}); err != nil {
		return fmt.Errorf("E2: from the start: %w", err)
	}
	full := cpu.stop()

	h.logf("E2: rechecking the %d sessions, %d at a time", n, conc)
	ref, err := workflow.Store(ctx, changed, c.PutBlob)
	if err != nil {
		return err
	}
	o := rerun.CounterfactualOptions{Workflow: changed, Bundle: bundle, Ref: ref, Grade: grade, Run: "bench-recheck", Wait: wait,
		Recorded: workflow.NewLibrary(c.GetBlob)}
	results := make([]*rerun.CounterfactualResult, n)
	cpu = h.cpuStart()
	if err := inParallel(n, conc, func(i int) error {
		r, err := rerun.Counterfactual(ctx, c, ids[i], o)
		results[i] = r
		return err
	}); err != nil {
		return fmt.Errorf("E2: recheck: %w", err)
	}
	re := cpu.stop()

	var reused, ran rerun.Cost
	changedN := 0
	for _, r := range results {
		if r.Verdict == rerun.VerdictChanged {
			changedN++
		}
		if r.FromStart || r.Point.Agent != "finisher" {
			return fmt.Errorf("E2: %s rechecked from %d (%s): want the finisher's turn", r.Session, r.Point.At, r.Point.Why)
		}
		reused, ran = reused.Add(r.Reused), ran.Add(r.Ran)
	}
	if changedN != n || ran.ModelCalls != int64(n) || reused.ModelCalls != int64(29*n) {
		return fmt.Errorf("E2: %d of %d changed, %d model calls run, %d reused: want %d, %d and %d", changedN, n, ran.ModelCalls, reused.ModelCalls, n, n, 29*n)
	}
	total := func(u cpuUse) time.Duration { return u.self + u.ledger + u.workers }
	x := total(re).Seconds() / total(full).Seconds()
	h.rep.add(row{id: "E2",
		what: fmt.Sprintf("rath recheck: %d recorded 30-turn sessions whose change affects only the last agent, %d at a time (each forked before it: %d model calls reused, %d run; all %d outcomes changed), CPU", n, conc, reused.ModelCalls, ran.ModelCalls, n),
		rath: fmt.Sprintf("%s CPU in %s", fmtDur(total(re)), fmtDur(re.wall)), rawWhat: "the same sessions run from the start on the changed workflow",
		raw: fmt.Sprintf("%s CPU in %s", fmtDur(total(full)), fmtDur(full.wall)), ratio: fmtRatio(x),
		target: fmt.Sprintf("≤ 0.3×: %s", verdict(x <= 0.3))})
	h.rep.note("E2: other processes used %.2f cores while the re-runs from the start ran, %.2f while the recheck ran", full.cores(full.others), re.cores(re.others))
	return nil
}

// startLoop runs a selector and an agent worker in this process and
// connects a client of the client role, named name, until the returned
// stop.
func (h *harness) startLoop(name string) (*client.Client, func(), error) {
	rt, err := h.startLoopServices("recheck")
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		if err := rt.Stop(); err != nil {
			h.rep.note("%s: the in-process services: %v", name, err)
		}
	}
	user, err := h.connect(auth.RoleClient, name, false)
	if err != nil {
		stop()
		return nil, nil, err
	}
	c, err := client.New(user, client.WithTimeout(30*time.Second))
	if err != nil {
		user.Close()
		stop()
		return nil, nil, err
	}
	return c, func() { user.Close(); stop() }, nil
}

// startLoopServices runs a selector and an agent worker in this process
// (internal/runtime), their data under the harness's directory in data.
func (h *harness) startLoopServices(data string) (*runtime.Runtime, error) {
	cfg := runtime.DefaultConfig()
	cfg.NATSURL, cfg.CredsDir, cfg.Data = h.ns.ClientURL(), filepath.Join(h.dir, "creds"), filepath.Join(h.dir, data)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := runtime.Start(context.Background(), cfg, runtime.WithServer(h.ns),
		runtime.WithRoles(auth.RoleSelector, auth.RoleAgentWorker), runtime.WithLogger(quiet))
	if err != nil {
		return nil, err
	}
	rt.StartLoop()
	return rt, nil
}

// errSessionClosed ends runToClose's watch.
var errSessionClosed = errors.New("closed")

// runToClose starts a session and waits until it closes.
func runToClose(ctx context.Context, c *client.Client, start events.SessionStarted, wait time.Duration) (string, error) {
	ack, err := c.Start(ctx, "", start)
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err = c.Watch(wctx, ack.Session, func(ev events.Stored) error {
		if ev.Type == events.TypeSessionClosed {
			return errSessionClosed
		}
		return nil
	})
	if !errors.Is(err, errSessionClosed) {
		return ack.Session, fmt.Errorf("session %s not closed: %w", ack.Session, err)
	}
	return ack.Session, nil
}

// inParallel calls fn(0..n-1), conc at a time, and joins their errors.
func inParallel(n, conc int, fn func(i int) error) error {
	errs := make([]error, n)
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
