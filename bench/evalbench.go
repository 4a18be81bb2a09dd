package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

// sectionEval measures rath eval (issue 31, target E1) against the same
// sessions started directly. It is optional: it starts a selector and an
// agent worker of its own, in this process.
const sectionEval = "eval"

// evalWorkflow is the section's workflow, under bench/testdata.
const evalWorkflow = "testdata/eval/answers.yaml"

// runEval is section E1: 20 tasks × k=5 of a scripted three-turn workflow
// through eval.Execute at concurrency 8 (each run started, followed to its
// close, graded, its state read and its head verified, as rath eval does),
// against the same 100 sessions started directly 8 at a time and followed
// to their close (5b-style: completed sessions per second); then the
// report of those 100 runs rendered as the terminal table, report.json,
// report.md and report.html.
func (h *harness) runEval(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	wfPath := filepath.Join(root, "bench", evalWorkflow)
	tasks, k, conc := h.cfg.n(20, 4), 5, 8
	var file strings.Builder
	file.WriteString("tasks:\n")
	for i := range tasks {
		fmt.Fprintf(&file, "  - {id: task-%02d, task: answer three times, workflow: %q, grader: {outcome: succeeded, cel: 'state.turns == 3'}}\n", i+1, wfPath)
	}
	set, err := eval.Parse([]byte(file.String()), filepath.Join(h.dir, "eval-tasks.yaml"))
	if err != nil {
		return err
	}
	wf, err := workflow.Load(wfPath)
	if err != nil {
		return err
	}
	c, stop, err := h.startLoop("rath-bench-eval")
	if err != nil {
		return err
	}
	defer stop()
	ref, err := workflow.Store(ctx, wf, c.PutBlob)
	if err != nil {
		return err
	}
	start := events.SessionStarted{Task: "answer three times", Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}
	wait := 10 * time.Minute
	n := tasks * k
	// Warm up: the bundle into the services' caches, one session.
	if _, err := runToClose(ctx, c, start, wait); err != nil {
		return fmt.Errorf("E1: warm-up: %w", err)
	}

	h.logf("E1: %d sessions started directly, %d at a time", n, conc)
	t0 := time.Now()
	if err := inParallel(n, conc, func(int) error {
		_, err := runToClose(ctx, c, start, wait)
		return err
	}); err != nil {
		return fmt.Errorf("E1: direct: %w", err)
	}
	direct := time.Since(t0)

	h.logf("E1: rath eval of %d tasks × %d runs, %d at a time", tasks, k, conc)
	t0 = time.Now()
	rep, err := eval.Execute(ctx, c, set, eval.Options{ID: "bench-e1", Runs: k, Concurrency: conc, Timeout: wait})
	if err != nil {
		return fmt.Errorf("E1: eval: %w", err)
	}
	evaled := time.Since(t0)
	if rep.Overall.Runs != n || rep.Overall.Passed != n {
		return fmt.Errorf("E1: %d of %d runs passed: %+v", rep.Overall.Passed, rep.Overall.Runs, rep.Overall.ByCause)
	}

	// The report of the 100 runs, in every form rath eval writes it.
	t0 = time.Now()
	if err := errors.Join(rep.WriteText(io.Discard), rep.WriteMarkdown(io.Discard), rep.WriteHTML(io.Discard)); err != nil {
		return err
	}
	if _, err := json.MarshalIndent(rep, "", "  "); err != nil {
		return err
	}
	render := time.Since(t0)

	perSec := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	x := perSec(evaled) / perSec(direct)
	h.rep.add(row{id: "E1",
		what: fmt.Sprintf("rath eval: %d scripted tasks × k=%d at concurrency %d (each run started, followed, graded by outcome and CEL, its state read and head verified), sessions/s", tasks, k, conc),
		rath: fmt.Sprintf("%.1f/s (%s)", perSec(evaled), fmtDur(evaled)), rawWhat: fmt.Sprintf("the same %d sessions started directly, %d at a time, followed to their close", n, conc),
		raw: fmt.Sprintf("%.1f/s (%s)", perSec(direct), fmtDur(direct)), ratio: fmtRatio(x),
		target: fmt.Sprintf("≥ 0.8×: %s", verdict(x >= 0.8))})
	h.rep.add(row{id: "E1r",
		what: fmt.Sprintf("the report of those %d runs rendered: terminal table, report.md, report.html and report.json", n),
		rath: fmtDur(render), target: fmt.Sprintf("≤ 1 s: %s", verdict(render <= time.Second))})
	return nil
}
