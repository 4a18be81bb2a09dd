package eval

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	set, err := Load("testdata/tasks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Tasks) != 2 {
		t.Fatalf("%d tasks, want 2", len(set.Tasks))
	}
	a, b := set.Tasks[0], set.Tasks[1]
	if a.ID != "answers" || a.Text != "say done" || a.WorkflowPath != filepath.Join("testdata", "close.yaml") ||
		a.WorkspacePath != filepath.Join("testdata", "seed") || a.Workflow().Name != "eval-close" {
		t.Errorf("first task: %+v", a)
	}
	if a.Grader.Outcome != "succeeded" || a.Grader.CEL == nil || !strings.Contains(a.Grader.CEL.String(), "state.turns == 1") {
		t.Errorf("first grader: %+v", a.Grader)
	}
	if b.WorkspacePath != "" || b.Grader.CEL != nil || b.Grader.Outcome != "succeeded" {
		t.Errorf("second task: %+v", b)
	}
}

// A task file with problems is refused whole, each problem at its line and
// field, before anything runs.
func TestLoadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"empty", "", []string{"tasks.yaml: empty task file"}},
		{"no tasks", "tasks: []\n", []string{"tasks.yaml:1: tasks: no tasks"}},
		{"not YAML", "tasks: [\n", []string{"tasks.yaml:1: invalid YAML"}},
		{"unknown top-level field", "task:\n  - id: a\n", []string{"tasks.yaml:1: task: unknown field (fields: tasks)"}},
		{"a task that is not a mapping", "tasks:\n  - just text\n", []string{"tasks.yaml:2: tasks[0]: expected a task"}},
		{"missing fields", "tasks:\n  - id: a\n", []string{
			"tasks.yaml:2: tasks[0].task: required", "tasks.yaml:2: tasks[0].workflow: required", "tasks.yaml:2: tasks[0].grader: required"}},
		{"bad ID, unknown field, missing workflow and workspace", `tasks:
  - id: "a b"
    task: t
    workflow: nowhere.yaml
    workspace: nowhere
    grade: {outcome: succeeded}
`, []string{`tasks.yaml:2: tasks[0].id: "a b" is not a task ID`, "tasks.yaml:4: tasks[0].workflow: load workflow: open",
			"tasks.yaml:5: tasks[0].workspace: stat", "tasks.yaml:6: tasks[0].grade: unknown field", "tasks.yaml:2: tasks[0].grader: required"}},
		{"a grader that does not compile", `tasks:
  - id: a
    task: t
    workflow: close.yaml
    grader:
      outcome: succeeded
      cel: state.turns ==
`, []string{"tasks.yaml:7: tasks[0].grader.cel: invalid grader: invalid CEL: Syntax error"}},
		{"a grader over a field state does not have", `tasks:
  - id: a
    task: t
    workflow: close.yaml
    grader: {cel: state.turn > 1}
`, []string{`tasks.yaml:5: tasks[0].grader.cel: invalid grader: state has no field "turn"`}},
		{"a grader that is not a bool", `tasks:
  - id: a
    task: t
    workflow: close.yaml
    grader: {cel: size(state.task)}
`, []string{"tasks.yaml:5: tasks[0].grader.cel: invalid grader: must yield bool, not int"}},
		{"an empty grader", `tasks:
  - id: a
    task: t
    workflow: close.yaml
    grader: {}
`, []string{"tasks.yaml:5: tasks[0].grader: a grader needs outcome, cel or both"}},
		{"an ID used twice", `tasks:
  - {id: a, task: t, workflow: close.yaml, grader: {outcome: succeeded}}
  - {id: b, task: t, workflow: close.yaml, grader: {outcome: succeeded}}
  - {id: a, task: t, workflow: close.yaml, grader: {outcome: succeeded}}
`, []string{`tasks.yaml:4: task ID "a" is used twice (first at line 2)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file), filepath.Join("testdata", "tasks.yaml"))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FileError", err)
			}
			msg := strings.ReplaceAll(err.Error(), filepath.Join("testdata", "tasks.yaml"), "tasks.yaml")
			lines := strings.Split(msg, "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(lines), len(tc.want), msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("no problem %q in:\n%s", w, msg)
				}
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// The example of docs/eval.md stays a valid task file.
func TestExampleLoads(t *testing.T) {
	set, err := Load(filepath.Join("..", "..", "examples", "eval", "tasks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Tasks) != 2 || set.Tasks[0].Workflow().Name != "fix-calc" || set.Tasks[1].Grader.CEL == nil {
		t.Errorf("examples/eval/tasks.yaml: %+v", set.Tasks)
	}
}
