// Package eval runs a task set against a Rath deployment many times and
// says how good the agent is: each run is a session, graded from its
// recorded final state, and the report's metrics (pass@1, pass^k, pass@k,
// tokens, latency, failures by cause) are computed from those sessions.
package eval

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/internal/workflow/parse"
)

// Set is a task file, loaded and checked: every workflow parses, every
// workspace is a directory, every grader compiles.
type Set struct {
	// Path is the file as named to Load.
	Path  string
	Tasks []*Task
}

// Task is one task of a set: what to ask, with which workflow and
// workspace, and how to grade a run.
type Task struct {
	ID   string
	Text string
	// WorkflowPath and WorkspacePath are the file's paths resolved against
	// the task file's directory (WorkspacePath "" when the task has none).
	WorkflowPath  string
	WorkspacePath string
	Grader        Grader

	wf *workflow.Workflow
}

// Workflow returns the task's workflow, parsed when the set was loaded.
func (t *Task) Workflow() *workflow.Workflow { return t.wf }

// Fields of the file's mappings; any other key is a problem, so a misspelt
// key never silently means "unset".
var (
	fileFields   = []string{"tasks"}
	taskFields   = []string{"id", "task", "workflow", "workspace", "grader"}
	graderFields = []string{"outcome", "cel", "command", "state", "as"}
	stateFields  = []string{"file", "expected", "expected_file"}
)

// taskID is what a task ID may be: it is a label value and a name in the
// report, so it stays plain.
var taskID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Problem is one thing wrong with a task file, at a line (0: unknown) and a
// field path such as tasks[1].grader.cel.
type Problem = parse.Problem

// FileError is Load's error for a task file that is not valid: every
// problem found, ordered by line, each as "path:line: field: message".
type FileError struct {
	Path     string
	Problems []Problem
}

func (e *FileError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.In(e.Path)
	}
	return strings.Join(lines, "\n")
}

// Load reads and checks a task file (docs/eval.md). Workflow and workspace
// paths are relative to the file's directory. Any problem fails the whole
// file with a *FileError listing all of them, so that no session starts
// for a set that cannot be graded.
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load task file: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load on the file's contents; path names the file in problems
// and anchors the relative paths, which Parse opens.
func Parse(data []byte, path string) (*Set, error) {
	p := &parser{Decoder: parse.New(), dir: filepath.Dir(path)}
	set := &Set{Path: path}
	if root := p.Document(data, "task file"); root != nil {
		p.mapping(root, "", fileFields, func(key string, v *yaml.Node, f string) {
			p.List(v, f, func(v *yaml.Node, f string) {
				if t := p.task(v, f); t != nil {
					set.Tasks = append(set.Tasks, t)
				}
			})
		})
		if len(set.Tasks) == 0 && len(p.Problems) == 0 {
			p.Add(root.Line, "tasks", "no tasks: the file needs a tasks list with at least one task")
		}
		p.unique(set.Tasks)
	}
	if len(p.Problems) > 0 {
		return nil, &FileError{Path: path, Problems: p.Sorted()}
	}
	return set, nil
}

type parser struct {
	*parse.Decoder
	dir string
	// idLines are the lines of the task IDs, for the duplicate check.
	idLines map[*Task]int
}

// mapping is the Decoder's, with a message naming the fields for a node
// that is not a mapping.
func (p *parser) mapping(n *yaml.Node, field string, fields []string, fn func(key string, v *yaml.Node, f string)) {
	if n.Kind != yaml.MappingNode {
		p.Add(n.Line, field, "expected a mapping with %s", strings.Join(fields, ", "))
		return
	}
	p.Mapping(n, field, fields, fn)
}

// task parses one task; it returns nil for an entry that is not a mapping.
func (p *parser) task(n *yaml.Node, field string) *Task {
	if n.Kind != yaml.MappingNode {
		p.Add(n.Line, field, "expected a task: a mapping with %s", strings.Join(taskFields, ", "))
		return nil
	}
	t := &Task{}
	var graderSeen bool
	var graderNode *yaml.Node
	var graderField string
	p.mapping(n, field, taskFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "id":
			if t.ID = p.Str(v, f); t.ID != "" && !taskID.MatchString(t.ID) {
				p.Add(v.Line, f, "%q is not a task ID: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64", t.ID)
			}
			if p.idLines == nil {
				p.idLines = map[*Task]int{}
			}
			p.idLines[t] = v.Line
		case "task":
			t.Text = p.Str(v, f)
		case "workflow":
			if rel := p.Str(v, f); rel != "" {
				t.WorkflowPath = p.path(rel)
				wf, err := workflow.Load(t.WorkflowPath)
				if err == nil {
					err = wf.CheckScripts()
				}
				if err != nil {
					p.Add(v.Line, f, "%v", err)
				}
				t.wf = wf
			}
		case "workspace":
			if rel := p.Str(v, f); rel != "" {
				t.WorkspacePath = p.path(rel)
				if info, err := os.Stat(t.WorkspacePath); err != nil {
					p.Add(v.Line, f, "%v", err)
				} else if !info.IsDir() {
					p.Add(v.Line, f, "%s is not a directory", t.WorkspacePath)
				}
			}
		case "grader":
			graderSeen = true
			t.Grader = p.grader(v, f)
			graderNode, graderField = v, f
		}
	})
	if graderNode != nil && !p.ReportedUnder(graderField) {
		p.agent(t, graderNode, graderField)
	}
	for _, req := range []struct {
		name  string
		empty bool
	}{{"id", t.ID == ""}, {"task", t.Text == ""}, {"workflow", t.WorkflowPath == ""}, {"grader", !graderSeen}} {
		if req.empty && !p.Reported(field+"."+req.name) {
			p.Add(n.Line, field+"."+req.name, "required")
		}
	}
	return t
}

func (p *parser) grader(n *yaml.Node, field string) Grader {
	var g Grader
	p.mapping(n, field, graderFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "outcome":
			g.Outcome = p.Str(v, f)
		case "cel":
			src := p.Str(v, f)
			if src == "" {
				return
			}
			cond, err := workflow.CompileCondition(src)
			if err != nil {
				p.Add(v.Line, f, "invalid grader: %v", err)
				return
			}
			g.CEL = cond
		case "command":
			g.Command = p.command(v, f)
		case "state":
			g.State = p.state(v, f)
		case "as":
			g.As = p.Str(v, f)
		}
	})
	if n.Kind == yaml.MappingNode && g.Outcome == "" && g.CEL == nil && !g.sandboxed() && !p.ReportedUnder(field) {
		p.Add(n.Line, field, "a grader needs outcome, cel, command or state")
	}
	return g
}

// command parses a grader's command: a list of strings (the argv), or one
// string, run with sh -c.
func (p *parser) command(n *yaml.Node, field string) []string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		if strings.TrimSpace(n.Value) == "" {
			p.Add(n.Line, field, "an empty command")
			return nil
		}
		return []string{"sh", "-c", n.Value}
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.Add(n.Line, field, "expected a command: a list of strings (the program and its arguments) or one string (run with sh -c)")
		return nil
	}
	var argv []string
	p.List(n, field, func(v *yaml.Node, f string) { argv = append(argv, p.Str(v, f)) })
	if len(argv) > 0 && argv[0] == "" && !p.ReportedUnder(field) {
		p.Add(n.Line, field, "the command's first item must name a program")
	}
	return argv
}

// state parses an expected-state grader.
func (p *parser) state(n *yaml.Node, field string) *StateCheck {
	sc := &StateCheck{}
	var inline, fromFile bool
	p.mapping(n, field, stateFields, func(key string, v *yaml.Node, f string) {
		switch key {
		case "file":
			sc.File = p.Str(v, f)
			if sc.File != "" && (filepath.IsAbs(sc.File) || !filepath.IsLocal(sc.File)) {
				p.Add(v.Line, f, "%q is not a path inside the workspace: give it relative to the workspace's root, without ..", sc.File)
			}
		case "expected":
			inline = true
			var val any
			if err := v.Decode(&val); err != nil {
				p.Add(v.Line, f, "%v", err)
				return
			}
			doc, err := canonicalJSON(val)
			if err != nil {
				p.Add(v.Line, f, "not a JSON value: %v", err)
				return
			}
			sc.Expected = doc
		case "expected_file":
			fromFile = true
			rel := p.Str(v, f)
			if rel == "" {
				return
			}
			sc.ExpectedFile = p.path(rel)
			data, err := os.ReadFile(sc.ExpectedFile)
			if err != nil {
				p.Add(v.Line, f, "%v", err)
				return
			}
			if _, err := parseJSON(data); err != nil {
				p.Add(v.Line, f, "%s: %v", sc.ExpectedFile, err)
				return
			}
			sc.Expected = data
		}
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	switch {
	case sc.File == "" && !p.Reported(field+".file"):
		p.Add(n.Line, field+".file", "required: the JSON file of the final workspace to compare")
	case inline == fromFile:
		p.Add(n.Line, field, "give the expected state as expected (inline) or expected_file, one of them")
	}
	return sc
}

// agent picks who a sandboxed grader's calls are made as (pickAgent),
// reporting a problem at the grader.
func (p *parser) agent(t *Task, n *yaml.Node, field string) {
	g := &t.Grader
	if !g.sandboxed() || t.wf == nil {
		return
	}
	if err := g.pickAgent(t.wf, g.As); err != nil {
		if g.As != "" {
			field += ".as"
		}
		p.Add(n.Line, field, "%v", err)
	}
}

// pickAgent sets who a sandboxed grader's calls are made as in workflow
// wf: as, which must be allowed every tool the grader calls (the tool
// runner checks it), or, when as is "", the first agent of wf that is.
func (g *Grader) pickAgent(wf *workflow.Workflow, as string) error {
	var need []string
	if len(g.Command) > 0 {
		need = append(need, toolRun)
	}
	if g.State != nil {
		need = append(need, toolReadFile)
	}
	allowed := func(agent string) string {
		for _, tool := range need {
			if ok, why := wf.Allows(agent, tool); !ok {
				return why
			}
		}
		return ""
	}
	if as != "" {
		if why := allowed(as); why != "" {
			return fmt.Errorf("%s: the grader's calls are made as %s, which the tool runner checks", why, as)
		}
		g.As = as
		return nil
	}
	for _, a := range wf.Agents {
		if allowed(a.Name) == "" {
			g.As = a.Name
			return nil
		}
	}
	return fmt.Errorf("no agent of workflow %s may use %s, which the grader calls in the sandbox as one of them: give an agent the tools, or name one with as",
		wf.Name, strings.Join(need, " and "))
}

// path resolves a path of the file against the file's directory.
func (p *parser) path(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(p.dir, rel)
}

// unique reports a task ID used twice, at its second use.
func (p *parser) unique(tasks []*Task) {
	first := map[string]int{}
	for _, t := range tasks {
		if t.ID == "" {
			continue
		}
		if line, dup := first[t.ID]; dup {
			p.Add(p.idLines[t], "", "task ID %q is used twice (first at line %d)", t.ID, line)
			continue
		}
		first[t.ID] = p.idLines[t]
	}
}
