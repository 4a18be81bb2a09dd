package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	researchex "github.com/openrath/rath/examples/research"
	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// researchExample is where the research demo's example lives in the
// repository; the rath binary embeds it.
const researchExample = "examples/research"

func (a *app) demoResearchCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "research",
		Short: "Run the research example (experiments on a small regression problem, scored by a metric threshold) and export its dossier",
		Long: `research starts an embedded NATS server and every Rath service in this process
and runs the research example built into this binary (examples/research of the
repository; --example DIR runs a directory laid out the same way), an
MLAgentBench-like task: a researcher reads the task's materials (TASK.md and
a small Go program that fits a polynomial to a generated data set by gradient
descent), an experimenter runs experiments with the experiment tool in the
session's sandbox (real training runs, each recorded as a
rath.experiment.recorded event with its configuration, metrics and workspace
commit), and a validator scores the chosen configuration on the held-out test
split against a metric threshold (test R² >= 0.9). Every failed configuration
(it diverged, or scored below the threshold on the validation split) goes to
memory with its experiment as provenance. The first attempt's best
configuration misses the threshold, so the workflow forks from before the
experiments; the experimenter recalls the failed configurations, tries others,
and the second attempt passes. It prints the events as they arrive, the
experiments and the best configuration, and writes the dossier (with the
experiments table and a plot of the metric, experiments.svg) to --out
(default ./rath-demo-research). Every agent is scripted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demoResearch(cmd.Context(), o)
		},
	}
	demoFlags(cmd, &o, "rath-demo-research", "the example directory: workflow.yaml, its scripts and the repository repo/ with TASK.md (default: "+researchExample+", built into this binary)")
	return cmd
}

func (a *app) demoResearch(ctx context.Context, o demoOptions) error {
	run, err := a.runResearch(ctx, o)
	return a.finishDemo(ctx, "rath demo research", o, run, err)
}

// runResearch runs the research example to its end, prints the report and
// the experiments, and writes the dossier. The runtime stays up until the
// returned run is closed, which the caller must do even when the error is
// not nil.
func (a *app) runResearch(ctx context.Context, o demoOptions) (*demoRun, error) {
	example, err := checkExample(o.example)
	if err != nil {
		return nil, usageError{err}
	}
	if example != "" {
		// The materials are checked before anything starts.
		if _, err := os.Stat(filepath.Join(example, researchex.Repo, "TASK.md")); err != nil {
			return nil, usageError{fmt.Errorf("--example %s: no %s/TASK.md: %w", o.example, researchex.Repo, err)}
		}
	}
	run, err := newDemoRun(o, "rath-demo-research")
	if err != nil {
		return run, err
	}
	if example == "" {
		example = filepath.Join(run.data, "example")
		if err := researchex.Write(example); err != nil {
			return run, err
		}
	}
	task, err := os.ReadFile(filepath.Join(example, researchex.Repo, "TASK.md"))
	if err != nil {
		return run, fmt.Errorf("research task: %w", err)
	}
	if err := a.startDemoRuntime(ctx, run, o, "rath demo research"); err != nil {
		return run, err
	}

	c, err := client.New(run.rt.Conn, client.WithRetryFor(30*time.Second), client.WithSource("rath/demo"))
	if err != nil {
		return run, err
	}
	progress, stop, err := a.followDemo(run, nil)
	if err != nil {
		return run, err
	}
	defer stop()

	start := time.Now()
	data := events.SessionStarted{
		Task:   strings.TrimSpace(string(task)),
		Labels: map[string]string{"example": "research"},
	}
	// The ledger creates the streams and buckets as it starts: its answer
	// (the client retries while no ledger listens) says it is up.
	if _, err := c.Keys(ctx); err != nil {
		return run, fmt.Errorf("demo: wait for the ledger: %w", err)
	}
	if err := uploadWorkflow(ctx, c, filepath.Join(example, "workflow.yaml"), &data); err != nil {
		return run, err
	}
	if err := c.SeedWorkspace(ctx, filepath.Join(example, researchex.Repo), &data); err != nil {
		return run, fmt.Errorf("demo: %w", err)
	}
	data.Labels[client.LabelWorkspaceFrom] = researchex.Repo // not this run's temporary directory
	ack, err := c.Start(ctx, "", data)
	if err != nil {
		return run, fmt.Errorf("demo: start session: %w", err)
	}
	run.root = ack.Session
	fmt.Fprintf(a.Stdout, "rath demo research: session %s started (root below; a fork is fork-N@SEQ: the Nth created, at sequence SEQ)\n", run.root)

	wctx, cancel := context.WithTimeout(ctx, o.wait)
	defer cancel()
	select {
	case <-progress.finished:
	case <-wctx.Done():
		return run, fmt.Errorf("demo: not finished after %s (%s still open; see %s)", o.wait, plural(progress.open(), "session", "sessions"), filepath.Join(run.data, "rath.log"))
	}
	fmt.Fprintf(a.Stdout, "\nrath demo research: finished in %s\n", time.Since(start).Round(10*time.Millisecond))
	err = a.demoReport(ctx, c, run.root, o.out, progress)
	if d, derr := dossier.Open(o.out); derr == nil {
		printExperiments(a, d, o.out)
	}
	return run, err
}

// printExperiments prints the dossier's experiments and the best
// configuration; out is the dossier's directory.
func printExperiments(a *app, d *dossier.Dossier, out string) {
	if len(d.Experiments) == 0 {
		fmt.Fprintf(a.Stdout, "no experiment was recorded\n")
		return
	}
	names := map[string]string{}
	for _, b := range d.Branches {
		names[b.ID] = b.Name
	}
	fmt.Fprintf(a.Stdout, "%s:\n", plural(len(d.Experiments), "experiment", "experiments"))
	for _, x := range d.Experiments {
		status := "ok"
		if !x.OK {
			status = fmt.Sprintf("FAILED (exit %d)", x.ExitCode)
		}
		fmt.Fprintf(a.Stdout, "  %-10s %4d  %-14s %-16s %s\n", names[x.Branch], x.Seq, events.Clip(x.Name, 14), status, events.MetricsText(x.Metrics))
	}
	obj, ok := dossier.ObjectiveOf(d.Experiments)
	if !ok {
		return
	}
	if i := dossier.Best(d.Experiments, obj); i >= 0 {
		x := d.Experiments[i]
		fmt.Fprintf(a.Stdout, "  best by %s: %s on %s (%s = %g, workspace commit %s) config %s\n", obj.Metric, x.Name, names[x.Branch],
			obj.Metric, x.Metrics[obj.Metric], events.Clip(x.Commit, 13), x.Config)
	}
	fmt.Fprintf(a.Stdout, "  the metric over the experiments: %s\n", filepath.Join(out, dossier.FileExperimentsSVG))
}
