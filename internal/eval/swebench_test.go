package eval

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitFixture makes a git repository in dir with two commits: the base
// (calc.go with a bug, its test) and a later one (a fix and a README), and
// returns the base commit.
func gitFixture(t *testing.T, dir string) string {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	write("go.mod", "module calc\n\ngo 1.22\n")
	write("calc.go", "package calc\n\nfunc Add(a, b int) int { return a - b }\n")
	write("calc_test.go", "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n")
	git("add", ".")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	write("calc.go", "package calc\n\nfunc Add(a, b int) int { return a + b }\n")
	write("README", "fixed upstream\n")
	git("add", ".")
	git("commit", "-q", "-m", "later")
	return base
}

const sweWorkflow = `name: swe
description: one coder
agents:
  - name: reader
    provider: scripted
    model: scripted-1
    tools: [read_file]
    script: script.yaml
  - name: coder
    provider: scripted
    model: scripted-1
    tools: [read_file, write_file, run]
    script: script.yaml
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: coder}
`

// sweDir writes the fixture repository, the workflow and its script into
// a new directory and returns it with the base commit.
func sweDir(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	base := gitFixture(t, filepath.Join(dir, "repo"))
	for name, text := range map[string]string{"workflow.yaml": sweWorkflow, "script.yaml": "- content: done\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, base
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// An instance file loads as a task set: the instance's ID and problem
// statement, its repository at the base commit (not at its head) as the
// workspace, and its test commands as the grader, run as the workflow's
// agent that may run commands.
func TestLoadSWEBench(t *testing.T) {
	dir, base := sweDir(t)
	ctx := context.Background()
	for name, text := range map[string]string{
		"instances.jsonl": `{"instance_id": "calc__calc-1", "repo": "repo", "base_commit": "` + base + `", "problem_statement": "Add subtracts.", "FAIL_TO_PASS": "[\"TestAdd\"]", "PASS_TO_PASS": [], "test_commands": ["go vet ./...", "go test ./..."], "created_at": "2024-01-01", "version": "1.0"}

{"instance_id": "calc__calc-2", "repo": "repo", "base_commit": "` + base[:12] + `", "problem_statement": "Add is wrong.", "test_commands": ["go test -run TestAdd ./..."], "workflow": "workflow.yaml"}
`,
		"instances.json": `[
  {"instance_id": "calc__calc-1", "repo": "repo", "base_commit": "` + base + `", "problem_statement": "Add subtracts.", "test_commands": ["go vet ./...", "go test ./..."]},
  {"instance_id": "calc__calc-2", "repo": "repo", "base_commit": "` + base + `", "problem_statement": "Add is wrong.", "test_commands": ["go test -run TestAdd ./..."]}
]
`,
	} {
		t.Run(name, func(t *testing.T) {
			work := t.TempDir()
			set, err := LoadSWEBench(ctx, writeFile(t, filepath.Join(dir, name), text), SWEBenchOptions{Workflow: filepath.Join(dir, "workflow.yaml"), Dir: work})
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Tasks) != 2 {
				t.Fatalf("%d tasks, want 2", len(set.Tasks))
			}
			a, b := set.Tasks[0], set.Tasks[1]
			if a.ID != "calc__calc-1" || a.Text != "Add subtracts." || a.Workflow().Name != "swe" || a.WorkspacePath != filepath.Join(work, "calc__calc-1") {
				t.Errorf("first task: %+v", a)
			}
			if want := []string{"sh", "-c", "go vet ./... && go test ./..."}; !slices.Equal(a.Grader.Command, want) || a.Grader.As != "coder" {
				t.Errorf("first grader: command %q as %q, want %q as coder", a.Grader.Command, a.Grader.As, want)
			}
			if b.ID != "calc__calc-2" || b.Grader.Command[2] != "go test -run TestAdd ./..." {
				t.Errorf("second task: %+v", b)
			}
			calc, err := os.ReadFile(filepath.Join(a.WorkspacePath, "calc.go"))
			if err != nil || !strings.Contains(string(calc), "a - b") {
				t.Errorf("workspace calc.go %q (%v): want the base commit's", calc, err)
			}
			for _, absent := range []string{"README", ".git"} {
				if _, err := os.Stat(filepath.Join(a.WorkspacePath, absent)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("workspace has %s (%v): want the base commit's tree only", absent, err)
				}
			}
		})
	}
}

// A file with problems is refused whole, each problem at its line and
// field, and no workspace is written for it.
func TestLoadSWEBenchRefuses(t *testing.T) {
	dir, base := sweDir(t)
	ctx := context.Background()
	plain := filepath.Join(dir, "plain")
	if err := os.MkdirAll(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "noexec.yaml"), strings.Replace(sweWorkflow, "tools: [read_file, write_file, run]", "tools: [read_file]", 1))
	ok := func(id string) string {
		return `{"instance_id": "` + id + `", "repo": "repo", "base_commit": "` + base + `", "problem_statement": "p", "test_commands": ["true"]}`
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "\n\n", []string{"instances.jsonl: no instances"}},
		{"malformed line", ok("a") + "\n{\"instance_id\": \"b\",\n", []string{"instances.jsonl:2: not a JSON instance: unexpected EOF"}},
		{"two values on a line", ok("a") + " " + ok("b") + "\n", []string{"instances.jsonl:1: more than one JSON value on the line"}},
		{"wrong type", `{"instance_id": 7}` + "\n", []string{"instances.jsonl:1: not a JSON instance: json: cannot unmarshal number into Go struct field Instance.instance_id of type string"}},
		{"bad test list", `{"instance_id": "a", "FAIL_TO_PASS": "TestAdd"}` + "\n", []string{"instances.jsonl:1: not a JSON instance", "expected a list of test names"}},
		{"missing fields", "{}\n", []string{
			"instances.jsonl:1: instance_id: required", "instances.jsonl:1: problem_statement: required",
			"instances.jsonl:1: test_commands: required", "instances.jsonl:1: repo: required: a local git repository", "instances.jsonl:1: base_commit: required"}},
		{"duplicate", ok("a") + "\n" + ok("b") + "\n" + ok("a") + "\n", []string{`instances.jsonl:3: instance_id: "a" is used twice (first at line 1)`}},
		{"bad id", ok("../etc") + "\n", []string{`instances.jsonl:1: instance_id: "../etc" is not a task ID`}},
		{"repo missing", strings.Replace(ok("a"), `"repo": "repo"`, `"repo": "nowhere"`, 1) + "\n", []string{"instances.jsonl:1: repo: stat nowhere: no such file or directory"}},
		{"not a git repo", strings.Replace(ok("a"), `"repo": "repo"`, `"repo": "plain"`, 1) + "\n", []string{"instances.jsonl:1: repo: plain is not a git repository"}},
		{"unknown commit", strings.Replace(ok("a"), base, "0123456789abcdef0123456789abcdef01234567", 1) + "\n", []string{`instances.jsonl:1: base_commit: "0123456789abcdef0123456789abcdef01234567" is not a commit of repo`}},
		{"option as commit", strings.Replace(ok("a"), base, "--output=/tmp/x", 1) + "\n", []string{`instances.jsonl:1: base_commit: "--output=/tmp/x" is not a commit of`}},
		{"empty command", strings.Replace(ok("a"), `["true"]`, `["true", " "]`, 1) + "\n", []string{"instances.jsonl:1: test_commands[1]: an empty command"}},
		{"no agent may run", strings.Replace(ok("a"), `"problem_statement"`, `"workflow": "noexec.yaml", "problem_statement"`, 1) + "\n", []string{"instances.jsonl:1: workflow: no agent of workflow swe may use run"}},
		{"stray bracket", `{"instance_id": "a"}` + "\n]", []string{"instances.jsonl:2: not a JSON instance", "instances.jsonl:1: repo: required"}},
		{"line too long", ok("a") + "\n" + `{"problem_statement": "` + strings.Repeat("x", MaxInstanceBytes) + `"}` + "\n", []string{"instances.jsonl:2: a line over 4194304 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			path := writeFile(t, filepath.Join(dir, "instances.jsonl"), tc.text)
			_, err := LoadSWEBench(ctx, path, SWEBenchOptions{Workflow: filepath.Join(dir, "workflow.yaml"), Dir: work})
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a *FileError", err)
			}
			msg := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error:\n%s\nwant %q", msg, w)
				}
			}
			if entries, _ := os.ReadDir(work); len(entries) != 0 {
				t.Errorf("workspaces written for a refused file: %v", entries)
			}
		})
	}

	// Problems come in the order of their lines.
	path := writeFile(t, filepath.Join(dir, "instances.jsonl"), strings.Replace(ok("a"), base, "nope", 1)+"\n{\n")
	_, err := LoadSWEBench(ctx, path, SWEBenchOptions{Workflow: filepath.Join(dir, "workflow.yaml"), Dir: t.TempDir()})
	if err == nil || !strings.HasPrefix(err.Error(), path+":1: base_commit") || !strings.Contains(err.Error(), "\n"+path+":2: not a JSON instance") {
		t.Errorf("problems out of line order:\n%v", err)
	}

	// A JSON list with a syntax error names its line.
	path = writeFile(t, filepath.Join(dir, "instances.json"), "[\n"+ok("a")+",\n"+ok("b")+"\n")
	if _, err := LoadSWEBench(ctx, path, SWEBenchOptions{Workflow: filepath.Join(dir, "workflow.yaml"), Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "instances.json:4: not a JSON list of instances: unexpected end of JSON input") {
		t.Errorf("a JSON list cut short: %v", err)
	}
	// No workflow named anywhere.
	path = writeFile(t, filepath.Join(dir, "instances.jsonl"), ok("a")+"\n")
	if _, err := LoadSWEBench(ctx, path, SWEBenchOptions{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "workflow: no workflow") {
		t.Errorf("no workflow: %v", err)
	}
	// A file over the limit is refused before it is read.
	big := filepath.Join(dir, "big.jsonl")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxInstanceFileBytes+1); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSWEBench(ctx, big, SWEBenchOptions{Workflow: filepath.Join(dir, "workflow.yaml"), Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "big.jsonl: 67108865 bytes: an instance file is at most 67108864") {
		t.Errorf("an oversized file: %v", err)
	}
	if _, err := LoadSWEBench(ctx, filepath.Join(dir, "missing.jsonl"), SWEBenchOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
