package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	researchex "github.com/openrath/rath/examples/research"
	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// TestDemoResearch runs `rath demo research` against a real embedded server
// and checks what it claims: the experiments ran and were recorded with
// their configuration, metrics and commit; each failed configuration went
// to memory with its experiment as provenance and was recalled on the fork,
// whose experiments avoid it; the root's choice missed the metric threshold
// and the fork's met it; the dossier shows it all and verifies offline, and
// an edited plot does not.
func TestDemoResearch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole agent loop with real go run calls")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run the example's program")
	}
	stdout := &syncBuffer{}
	a := &app{env: env{Stdout: stdout, Stderr: stdout}, timeout: 10 * time.Second}
	out := filepath.Join(t.TempDir(), "dossier")
	run, err := a.runResearch(context.Background(), demoOptions{out: out, wait: 3 * time.Minute})
	if run != nil {
		t.Cleanup(run.close)
	}
	if err != nil {
		t.Fatalf("demo research: %v\n%s", err, stdout.String())
	}
	ctx := context.Background()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Lineage(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	if g.Root == nil || len(g.Root.Children) != 1 {
		t.Fatalf("lineage %+v, want a root with one fork:\n%s", g.Root, stdout.String())
	}
	root, err := c.State(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := c.State(ctx, g.Root.Children[0].Session)
	if err != nil {
		t.Fatal(err)
	}
	if root.Outcome != "superseded" || lastValidation(root) == nil || lastValidation(root).Passed {
		t.Fatalf("root: outcome %q, validations %+v; want superseded after a failed validation", root.Outcome, root.Validations)
	}
	if fork.Outcome != "accepted" || lastValidation(fork) == nil || !lastValidation(fork).Passed || lastValidation(fork).Validator != "test_r2 >= 0.9" {
		t.Fatalf("fork: outcome %q, validations %+v; want accepted after the threshold passed", fork.Outcome, fork.Validations)
	}
	if x := firstDecision(root, "agent:experimenter"); x == nil || fork.Lineage.ForkSeq != x.Seq-1 {
		t.Fatalf("fork at %d, want just before the root's first experimenter decision (%+v)", fork.Lineage.ForkSeq, x)
	}

	// The experiments, as folded: the root's two failed, the fork's (after
	// the fork point) two passed, none of them a configuration that failed.
	var rootNames, forkNames []string
	failed := map[string]string{} // name → experiment event ID
	for _, x := range root.Experiments {
		rootNames = append(rootNames, x.Name)
		if x.Commit == "" || x.CallID == "" || len(x.Config) == 0 {
			t.Errorf("experiment %s lacks its commit, call or config: %+v", x.Name, x)
		}
		if !x.OK() || x.Metrics["val_r2"] < 0.9 {
			failed[x.Name] = x.EventID
		}
	}
	for _, x := range fork.Experiments {
		if x.Seq > fork.Lineage.ForkSeq {
			forkNames = append(forkNames, x.Name)
			if !x.OK() || x.Metrics["val_r2"] < 0.9 {
				t.Errorf("the fork's experiment %s did not pass: %+v", x.Name, x)
			}
		}
	}
	if !slices.Equal(rootNames, []string{"poly1-lr0.5", "poly7-lr3"}) || !slices.Equal(forkNames, []string{"poly5-lr0.5", "poly7-lr0.5"}) || len(failed) != 2 {
		t.Fatalf("experiments: root %v (failed %v), fork %v", rootNames, failed, forkNames)
	}
	if d := root.Experiments[1]; d.ExitCode == 0 || d.Metrics["diverged"] != 1 {
		t.Errorf("poly7-lr3 should have diverged: %+v", d)
	}
	// The failed validation carries the metric it judged.
	var details struct {
		Metrics map[string]float64 `json:"metrics"`
	}

	// Each failed configuration is in memory, justified by its experiment,
	// and the fork's first experimenter turn recalled both.
	log, err := c.Log(ctx, run.root, client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	items := map[string]string{} // item → the experiment event it names
	for _, ev := range log {
		switch ev.Type {
		case events.TypeMemoryWritten:
			var w events.MemoryWritten
			if err := json.Unmarshal(ev.Data, &w); err != nil {
				t.Fatal(err)
			}
			if w.Provenance.Evidence != "failed_attempt" || len(w.Provenance.EventIDs) != 1 || !strings.HasPrefix(w.Content, "Failed configuration ") {
				t.Errorf("memory %+v, want a failed configuration justified by one experiment", w)
				continue
			}
			items[w.ItemID] = w.Provenance.EventIDs[0]
		case events.TypeValidationFailed:
			var v events.ValidationFailed
			if err := json.Unmarshal(ev.Data, &v); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(v.Details, &details); err != nil || details.Metrics["test_r2"] >= 0.9 || details.Metrics["test_r2"] == 0 {
				t.Errorf("the failed validation's details %s, want test_r2 below 0.9", v.Details)
			}
		}
	}
	var named []string
	for _, ev := range items {
		named = append(named, ev)
	}
	want := []string{failed["poly1-lr0.5"], failed["poly7-lr3"]}
	slices.Sort(named)
	slices.Sort(want)
	if !slices.Equal(named, want) {
		t.Fatalf("memory items name %v, want the failed experiments %v", named, want)
	}
	var first []string
	for _, m := range fork.Memory {
		if m.Kind == "recalled" && m.Seq > fork.Lineage.ForkSeq {
			first = m.ItemIDs
			break
		}
	}
	for item := range items {
		if !slices.Contains(first, item) {
			t.Errorf("the fork's first recall %v lacks failed configuration %s", first, item)
		}
	}

	// The dossier: experiments, the plot, the best configuration with its
	// commit, the memory edges; verified offline.
	d, md := verified(t, out)
	if len(d.Experiments) != 4 {
		t.Fatalf("dossier experiments: %+v", d.Experiments)
	}
	obj, ok := dossier.ObjectiveOf(d.Experiments)
	best := dossier.Best(d.Experiments, obj)
	if !ok || obj.Metric != "val_r2" || best < 0 || d.Experiments[best].Name != "poly5-lr0.5" {
		t.Fatalf("objective %+v, best %d", obj, best)
	}
	text := dt.Text(t, md)
	for _, s := range []string{
		"Best configuration: poly5-lr0.5 on branch fork-1@",
		d.Experiments[best].Commit,
		"Memory the experiments left",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("dossier.md lacks %q", s)
		}
	}
	var table, edges *dt.Table
	for _, tb := range dt.Tables(t, md) {
		tb := tb
		switch {
		case tb.Column("experiment") >= 0 && tb.Column("config") >= 0:
			table = &tb
		case tb.Column("experiment") >= 0 && tb.Column("recalled") >= 0:
			edges = &tb
		}
	}
	if table == nil || len(table.Rows) != 4 || edges == nil || len(edges.Rows) != 2 {
		t.Fatalf("experiments table %+v, memory edges %+v", table, edges)
	}
	for _, row := range edges.Rows {
		if !strings.Contains(row[edges.Column("recalled")], "fork-1@") {
			t.Errorf("memory edge %q was not recalled on the fork", row)
		}
	}
	// Each experiment kept its result in the workspace (-out), so each has
	// a commit of its own, and the best one's commit holds its coefficients.
	commits := map[string]bool{}
	for _, x := range d.Experiments {
		commits[x.Commit] = true
	}
	if len(commits) != len(d.Experiments) {
		t.Errorf("experiments share commits: %v", commits)
	}
	if fork.Sandbox == nil || fork.Sandbox.Workspace == "" {
		t.Fatalf("the fork has no workspace: %+v", fork.Sandbox)
	}
	// The bwrap backend's workspaces belong to the sandbox's user: git
	// is told to read this one anyway.
	show := exec.Command("git", "-c", "safe.directory="+fork.Sandbox.Workspace, "show", d.Experiments[best].Commit+":runs/poly5-lr0.5.json")
	show.Dir = fork.Sandbox.Workspace
	artifact, err := show.CombinedOutput()
	if err != nil || !strings.Contains(string(artifact), `"coefficients"`) || !strings.Contains(string(artifact), `"val_r2": 0.97913`) {
		t.Errorf("the best experiment's commit does not hold its result: %v\n%s", err, artifact)
	}
	plot, err := os.ReadFile(filepath.Join(out, dossier.FileExperimentsSVG))
	if err != nil || !strings.Contains(string(plot), "<title>best: poly5-lr0.5</title>") {
		t.Fatalf("experiments.svg: %v\n%s", err, plot)
	}
	for _, s := range []string{"4 experiments:", "best by val_r2: poly5-lr0.5 on fork-1@"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, stdout.String())
		}
	}
	// An edited plot fails verification.
	edited := strings.Replace(string(plot), "poly1-lr0.5", "poly9-lr0.5", 1)
	if err := os.WriteFile(filepath.Join(out, dossier.FileExperimentsSVG), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if rep, err := dossier.Verify(out, nil); err != nil || rep.OK || !strings.Contains(rep.Fault.Reason, dossier.FileExperimentsSVG) {
		t.Fatalf("an edited experiments.svg: %+v, %v", rep, err)
	}
}

// Examples that are not the research example's shape are refused before
// anything starts, with a usage error saying what is missing.
func TestDemoResearchRefusesBadExamples(t *testing.T) {
	noTask := t.TempDir()
	if err := researchex.Write(noTask); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(noTask, researchex.Repo, "TASK.md")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, example, want string
	}{
		{"no workflow", t.TempDir(), "no workflow.yaml"},
		{"no task", noTask, "no repo/TASK.md"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{env: env{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}, timeout: 10 * time.Second}
			run, err := a.runResearch(context.Background(), demoOptions{example: tc.example, out: t.TempDir()})
			if run != nil {
				if run.rt != nil {
					t.Error("the runtime started")
				}
				run.close()
			}
			var usage usageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &usage) {
				t.Fatalf("error %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
}
