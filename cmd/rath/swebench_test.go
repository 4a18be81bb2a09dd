package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// The SWE-bench round trip, export half: rath eval runs the fix-calc
// example (a scripted coder rewrites calc.go) and a session without a
// workspace; rath export --swebench --label eval=ID writes one prediction
// per session, and the fix-calc patch, applied with git apply to a fresh
// copy of the example's repository, makes its failing test pass.
func TestExportSWEBench(t *testing.T) {
	rt, c := evalRuntime(t)
	r := rath(t, rt.URL, "eval", "testdata/eval/swebench.yaml", "--runs", "1", "--run-timeout", "2m", "--out", filepath.Join(t.TempDir(), "report"), "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	sessions := map[string]string{}
	for _, task := range rep.Tasks {
		if len(task.Runs) != 1 {
			t.Fatalf("task %s: %d runs", task.ID, len(task.Runs))
		}
		sessions[task.ID] = task.Runs[0].Session
	}

	r = rath(t, rt.URL, "export", "--swebench", "--label", "eval="+rep.ID)
	if r.code != exitOK {
		t.Fatalf("rath export --swebench: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Logf("predictions:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	preds := map[string]Prediction{}
	for line := range strings.Lines(r.stdout) {
		var p Prediction
		decode(t, line, &p)
		preds[p.InstanceID] = p
	}
	if len(preds) != 2 {
		t.Fatalf("predictions %q, want one per session of %v", r.stdout, sessions)
	}
	if p := preds["no-workspace"]; p.Patch != "" || p.Model != "scripted/scripted-1" {
		t.Errorf("the session without a workspace: %+v", p)
	}
	if want := "warning: session " + sessions["no-workspace"] + ": its workspace was never placed"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	fix := preds["fix-add"]
	if fix.Model != "scripted/scripted-1" || !strings.Contains(fix.Patch, "+func Add(a, b int) int { return a + b }\n") {
		t.Fatalf("the fix-calc prediction: %+v", fix)
	}

	// The patch, applied to a fresh copy of the repository the session was
	// seeded from, turns its failing test into a passing one.
	repo := t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(filepath.Join("..", "..", "examples", "fix-calc", "repo"))); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Stdin = repo, strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil {
			t.Logf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return err
	}
	if err := run("", "go", "test", "./..."); err == nil {
		t.Fatal("go test passes in the unpatched repository: the round trip would prove nothing")
	}
	if err := run(fix.Patch, "git", "apply", "-"); err != nil {
		t.Fatalf("git apply of the exported patch: %v", err)
	}
	if err := run("", "go", "test", "./..."); err != nil {
		t.Fatalf("go test after the exported patch: %v", err)
	}

	// --model names the model, --out writes a file, SESSION selects.
	file := filepath.Join(t.TempDir(), "preds.jsonl")
	r = rath(t, rt.URL, "export", "--swebench", "--model", "my-model", "--out", file, sessions["fix-add"])
	if r.code != exitOK || r.stdout != "wrote "+file+": 1 prediction\n" {
		t.Fatalf("export --out: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var p Prediction
	if err := json.Unmarshal(data, &p); err != nil || p.Model != "my-model" || p.InstanceID != "fix-add" || p.Patch != fix.Patch {
		t.Errorf("predictions file %q: %+v, %v", data, p, err)
	}

	// A fork after the write, told to run the tests: its coder runs them in the
	// fork's own workspace, placed at the parent's commit, and the fork's
	// patch is its workspace's, the inherited write included.
	log, err := c.Log(context.Background(), sessions["fix-add"], client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var at uint64
	for _, e := range log {
		if e.Type == events.TypeToolCompleted && strings.Contains(string(e.Data), `"write_file"`) {
			at = e.Seq
		}
	}
	if at == 0 {
		t.Fatalf("no write_file completion in %s", sessions["fix-add"])
	}
	forked, _, _ := strings.Cut(ok(t, rt.URL, "fork", sessions["fix-add"], "--at", fmt.Sprint(at), "--say", "run the tests"), "\n")
	waitClosed(t, c, forked)
	own, err := c.Log(context.Background(), forked, client.Range{From: at + 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(own, func(e events.Stored) bool { return e.Type == events.TypeSandboxPlaced }) {
		t.Fatalf("the fork %s was not placed in a workspace of its own", forked)
	}
	r = rath(t, rt.URL, "export", "--swebench", forked)
	decode(t, r.stdout, &p)
	if r.code != exitOK || p.Patch != fix.Patch || p.InstanceID != "fix-add" {
		t.Errorf("the fork's prediction: exit %d, %+v, stderr %q", r.code, p, r.stderr)
	}

	// Selected by label, the fork is a second fix-add: said on stderr.
	r = rath(t, rt.URL, "export", "--swebench", "--label", "eval="+rep.ID)
	if n := strings.Count(r.stdout, "\n"); r.code != exitOK || n != 3 || !strings.Contains(r.stderr, "warning: sessions "+sessions["fix-add"]+" and "+forked+" are both instance fix-add") {
		t.Errorf("the eval's sessions and the fork: exit %d, %d lines, stderr %q", r.code, n, r.stderr)
	}

	// Nothing selected is an error, not an empty file.
	if r = rath(t, rt.URL, "export", "--swebench", "--label", "eval=no-such-eval"); r.code == exitOK || !strings.Contains(r.stderr, "no session has the labels eval=no-such-eval") {
		t.Errorf("an empty selection: exit %d, stderr %q", r.code, r.stderr)
	}
}
