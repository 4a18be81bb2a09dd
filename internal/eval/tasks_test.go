package eval

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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
		{"two documents", "tasks: []\n---\ntasks: []\n", []string{"tasks.yaml:2: more than one YAML document; a task file holds one"}},
		{"a field given twice", "tasks:\n  - {id: a, id: b, task: t, workflow: close.yaml, grader: {outcome: succeeded}}\n",
			[]string{"tasks.yaml:2: tasks[0].id: given twice (first at line 2)"}},
		{"tasks that are not a list", "tasks: {a: 1}\n", []string{"tasks.yaml:1: tasks: expected a list, got a mapping"}},
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
`, []string{"tasks.yaml:5: tasks[0].grader: a grader needs outcome, cel, command or state"}},
		{"command graders that cannot run", `tasks:
  - {id: a, task: t, workflow: tools.yaml, grader: {command: []}}
  - {id: b, task: t, workflow: tools.yaml, grader: {command: "  "}}
  - {id: c, task: t, workflow: tools.yaml, grader: {command: ["", x]}}
  - {id: d, task: t, workflow: tools.yaml, grader: {command: {sh: x}}}
  - {id: e, task: t, workflow: tools.yaml, grader: {command: [go, [test]]}}
  - {id: f, task: t, workflow: close.yaml, grader: {command: [true]}}
  - {id: g, task: t, workflow: tools.yaml, grader: {command: [true], as: reader}}
  - {id: h, task: t, workflow: tools.yaml, grader: {command: [true], as: nobody}}
`, []string{"tasks.yaml:2: tasks[0].grader.command: expected a command: a list of strings",
			"tasks.yaml:3: tasks[1].grader.command: an empty command",
			"tasks.yaml:4: tasks[2].grader.command: the command's first item must name a program",
			"tasks.yaml:5: tasks[3].grader.command: expected a command",
			"tasks.yaml:6: tasks[4].grader.command[1]: expected a string",
			"tasks.yaml:7: tasks[5].grader: no agent of workflow eval-close may use run, which the grader calls in the sandbox as one of them",
			"tasks.yaml:8: tasks[6].grader.as: tool run is not allowed for agent reader (allowed: [read_file]): the grader's calls are made as reader",
			`tasks.yaml:9: tasks[7].grader.as: agent "nobody" is not in workflow eval-tools`}},
		{"expected-state graders that cannot compare", `tasks:
  - {id: a, task: t, workflow: tools.yaml, grader: {state: {expected: 1}}}
  - {id: b, task: t, workflow: tools.yaml, grader: {state: {file: x.json}}}
  - {id: c, task: t, workflow: tools.yaml, grader: {state: {file: x.json, expected: 1, expected_file: expected.json}}}
  - {id: d, task: t, workflow: tools.yaml, grader: {state: {file: ../../etc/passwd, expected: 1}}}
  - {id: e, task: t, workflow: tools.yaml, grader: {state: {file: /etc/passwd, expected: 1}}}
  - {id: f, task: t, workflow: tools.yaml, grader: {state: {file: x.json, expected_file: nowhere.json}}}
  - {id: g, task: t, workflow: tools.yaml, grader: {state: {file: x.json, expected_file: broken.json}}}
  - {id: h, task: t, workflow: tools.yaml, grader: {state: {file: x.json, expected: {1: one}}}}
  - {id: i, task: t, workflow: tools.yaml, grader: {state: {file: x.json, expected: 1, want: 2}}}
  - {id: j, task: t, workflow: tools.yaml, grader: {state: [x.json]}}
`, []string{"tasks.yaml:2: tasks[0].grader.state.file: required",
			"tasks.yaml:3: tasks[1].grader.state: give the expected state as expected (inline) or expected_file, one of them",
			"tasks.yaml:4: tasks[2].grader.state: give the expected state as expected (inline) or expected_file, one of them",
			`tasks.yaml:5: tasks[3].grader.state.file: "../../etc/passwd" is not a path inside the workspace`,
			`tasks.yaml:6: tasks[4].grader.state.file: "/etc/passwd" is not a path inside the workspace`,
			"tasks.yaml:7: tasks[5].grader.state.expected_file: open",
			"tasks.yaml:8: tasks[6].grader.state.expected_file: testdata/broken.json: not JSON: unexpected EOF",
			"tasks.yaml:9: tasks[7].grader.state.expected: not a JSON value: json: unsupported type",
			"tasks.yaml:10: tasks[8].grader.state.want: unknown field (fields: file, expected, expected_file)",
			"tasks.yaml:11: tasks[9].grader.state: expected a mapping with file, expected, expected_file"}},
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

// Sandboxed graders pick the first agent of the workflow allowed the tools
// they call, unless they name one.
func TestLoadSandboxGraders(t *testing.T) {
	set, err := Parse([]byte(`tasks:
  - {id: cmd, task: t, workflow: tools.yaml, grader: {command: "go test ./..."}}
  - {id: state, task: t, workflow: tools.yaml, grader: {state: {file: out/x.json, expected: {n: [1, 2.50, "x"]}}}}
  - {id: file, task: t, workflow: tools.yaml, grader: {as: runner, command: [go, vet], state: {file: x.json, expected_file: expected.json}}}
`), filepath.Join("testdata", "tasks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cmd, state, file := set.Tasks[0].Grader, set.Tasks[1].Grader, set.Tasks[2].Grader
	if !slices.Equal(cmd.Command, []string{"sh", "-c", "go test ./..."}) || cmd.As != "runner" || cmd.State != nil {
		t.Errorf("command grader: %+v", cmd)
	}
	if state.As != "reader" || state.State.File != "out/x.json" || !sameState(t, state.State.Expected, `{"n": [1, 2.5, "x"]}`) {
		t.Errorf("state grader: %+v %+v", state, state.State)
	}
	if file.As != "runner" || !slices.Equal(file.Command, []string{"go", "vet"}) || file.State.ExpectedFile != filepath.Join("testdata", "expected.json") ||
		!sameState(t, file.State.Expected, `{"count": 1.0}`) {
		t.Errorf("both: %+v %+v", file, file.State)
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

// The sandbox example of docs/eval.md stays a valid task file, its
// command grader made as the fix-calc coder.
func TestSandboxExampleLoads(t *testing.T) {
	set, err := Load(filepath.Join("..", "..", "examples", "eval", "sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if g := set.Tasks[0].Grader; len(set.Tasks) != 1 || g.As != "coder" || !slices.Equal(g.Command, []string{"go", "test", "./..."}) {
		t.Errorf("examples/eval/sandbox.yaml: %+v", set.Tasks[0])
	}
}
