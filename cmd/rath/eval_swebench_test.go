package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// The SWE-bench round trip, from an instance file: a local git repository
// (the fix-calc example's code, then a later commit) and an instance at
// its first commit; rath eval runs the fix-calc workflow on it, the
// instance's test command grades the run in its final workspace; rath
// export --swebench writes the prediction, whose patch applies at the
// base commit and makes the failing test pass.
func TestEvalSWEBenchInstances(t *testing.T) {
	rt, c := evalRuntime(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "calc")
	if err := os.CopyFS(repo, os.DirFS(filepath.Join("..", "..", "examples", "fix-calc", "repo"))); err != nil {
		t.Fatal(err)
	}
	run := func(wd, stdin, name string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Stdin = wd, strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil {
			t.Logf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return strings.TrimSpace(out.String()), err
	}
	git := func(wd string, args ...string) string {
		t.Helper()
		out, err := run(wd, "", "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	git(repo, "init", "-q")
	git(repo, "add", ".")
	git(repo, "commit", "-q", "-m", "base")
	base := git(repo, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("a later commit, not in the instance's workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(repo, "add", ".")
	git(repo, "commit", "-q", "-m", "later")

	instances := filepath.Join(dir, "instances.jsonl")
	if err := os.WriteFile(instances, []byte(`{"instance_id": "calc__calc-1", "repo": "calc", "base_commit": "`+base+`", "problem_statement": "make TestAdd pass", "FAIL_TO_PASS": "[\"TestAdd\"]", "PASS_TO_PASS": "[]", "test_commands": ["go test ./..."]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wf, err := filepath.Abs(filepath.Join("..", "..", "examples", "fix-calc", "workflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	// Without a workflow the file is refused, naming the line, and no
	// session starts; --workflow is refused for a task file.
	r := rath(t, rt.URL, "eval", instances)
	if r.code != exitUsage || !strings.Contains(r.stderr, "instances.jsonl:1: workflow: no workflow: name one for every instance (rath eval --workflow FILE) or in the instance") {
		t.Fatalf("an instance file without a workflow: exit %d, stderr %q", r.code, r.stderr)
	}
	if ss, err := c.List(context.Background(), api.ListRequest{}); err != nil || len(ss) != 0 {
		t.Fatalf("sessions after a refused instance file: %v, %v", ss, err)
	}
	if r = rath(t, rt.URL, "eval", "testdata/eval/tasks.yaml", "--workflow", wf); r.code != exitUsage || !strings.Contains(r.stderr, "--workflow is for a SWE-bench instance file") {
		t.Fatalf("--workflow with a task file: exit %d, stderr %q", r.code, r.stderr)
	}

	r = rath(t, rt.URL, "eval", instances, "--workflow", wf, "--runs", "1", "--run-timeout", "2m", "--id", "ev-swe", "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval of the instance file: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if len(rep.Tasks) != 1 || rep.Tasks[0].ID != "calc__calc-1" || rep.Tasks[0].Task != "make TestAdd pass" || len(rep.Tasks[0].Runs) != 1 {
		t.Fatalf("report: %+v", rep.Tasks)
	}
	if got := rep.Tasks[0].Runs[0]; !got.Passed || got.Grading == nil {
		t.Fatalf("the instance's run: passed %v, grading %+v, failure %+v; want passed by its test command", got.Passed, got.Grading, got.Failure)
	}

	// By label: the run, not its grading fork (which ran the test command
	// and inherits the run's labels).
	r = rath(t, rt.URL, "export", "--swebench", "--label", "eval=ev-swe")
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 1 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("rath export --swebench --label eval=ev-swe: exit %d, stdout %q, stderr %q; want the run's one prediction", r.code, r.stdout, r.stderr)
	}
	var p Prediction
	decode(t, r.stdout, &p)
	if p.InstanceID != "calc__calc-1" || p.Model != "scripted/scripted-1" || !strings.Contains(p.Patch, "+func Add(a, b int) int { return a + b }\n") || strings.Contains(p.Patch, "README") {
		t.Fatalf("prediction %+v", p)
	}

	// The patch applies to the repository checked out at the base commit
	// and turns its failing test into a passing one.
	clone := filepath.Join(dir, "check")
	git(dir, "clone", "-q", repo, clone)
	git(clone, "checkout", "-q", base)
	if _, err := run(clone, "", "go", "test", "./..."); err == nil {
		t.Fatal("go test passes at the base commit: the round trip would prove nothing")
	}
	if _, err := run(clone, p.Patch, "git", "apply", "-"); err != nil {
		t.Fatalf("git apply of the exported patch at the base commit: %v", err)
	}
	if _, err := run(clone, "", "go", "test", "./..."); err != nil {
		t.Fatalf("go test after the exported patch: %v", err)
	}
}
