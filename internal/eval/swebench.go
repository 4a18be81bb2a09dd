package eval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/internal/workflow/parse"
	"github.com/openrath/rath/pkg/client"
)

// Limits of a SWE-bench instance file: the file is read whole, each
// instance is one JSON object.
const (
	// MaxInstanceFileBytes bounds the instance file.
	MaxInstanceFileBytes = 64 << 20
	// MaxInstanceBytes bounds one instance (one line of a JSONL file).
	MaxInstanceBytes = 4 << 20
)

// Instance is one SWE-bench instance (the fields of the princeton-nlp
// datasets that rath eval uses), with Repo a local git repository instead
// of a GitHub name, and the commands that decide whether it is resolved.
type Instance struct {
	InstanceID       string `json:"instance_id"`
	Repo             string `json:"repo"`
	BaseCommit       string `json:"base_commit"`
	ProblemStatement string `json:"problem_statement"`
	// FailToPass and PassToPass name the tests that must go from failing
	// to passing and keep passing; SWE-bench stores each as a JSON list, or
	// as a string holding one. rath eval does not run tests by name: it
	// runs TestCommands, which should cover them.
	FailToPass testList `json:"FAIL_TO_PASS"`
	PassToPass testList `json:"PASS_TO_PASS"`
	// TestCommands are shell commands (run with sh -c in the run's final
	// workspace, one after the other) that must all exit 0 for the
	// instance to count as resolved. SWE-bench keeps these in its harness,
	// per repository; a local instance names them.
	TestCommands []string `json:"test_commands"`
	// Workflow, when set, is the workflow file this instance runs
	// (relative to the instance file), instead of the one rath eval names.
	Workflow string `json:"workflow"`
}

// testList is a SWE-bench test list: a JSON list of strings, or a string
// holding one.
type testList []string

func (l *testList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if strings.TrimSpace(s) == "" {
			*l = nil
			return nil
		}
		b = []byte(s)
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("expected a list of test names, or a string holding one as JSON")
	}
	*l = list
	return nil
}

// SWEBenchOptions are how LoadSWEBench turns instances into tasks.
type SWEBenchOptions struct {
	// Workflow is the workflow file of every instance that names none.
	Workflow string
	// Dir is where each instance's workspace (its repository at its base
	// commit) is written, one directory per instance; the caller removes
	// it after the eval.
	Dir string
}

// IsInstanceFile reports whether path names a SWE-bench instance file
// (.jsonl or .json) rather than a task file (YAML).
func IsInstanceFile(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	return ext == ".jsonl" || ext == ".json"
}

// LoadSWEBench reads a SWE-bench instance file — JSON lines, or one JSON
// list of instances — and makes a task set of it: per instance, a task
// with the instance ID as its ID, the problem statement as its text, its
// repository at the base commit as its workspace (git archive into
// o.Dir/<instance_id>) and a grader that runs its test commands in the
// run's final workspace. Every problem of the file is reported, each at
// its line, in a *FileError, and nothing is returned for a file with any:
// no session starts for a set that cannot be graded. git must be on the
// PATH.
func LoadSWEBench(ctx context.Context, path string, o SWEBenchOptions) (*Set, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load instance file: %w", err)
	}
	if info.Size() > MaxInstanceFileBytes {
		return nil, &FileError{Path: path, Problems: []Problem{{Message: fmt.Sprintf("%d bytes: an instance file is at most %d", info.Size(), MaxInstanceFileBytes)}}}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load instance file: %w", err)
	}
	p := &parser{Decoder: parse.New(), dir: filepath.Dir(path)}
	type located struct {
		line int
		in   Instance
	}
	var found []located
	decode := func(line int, raw []byte) {
		if len(raw) > MaxInstanceBytes {
			p.Add(line, "", "an instance of %d bytes: at most %d", len(raw), MaxInstanceBytes)
			return
		}
		var in Instance
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&in); err != nil {
			p.Add(line, "", "not a JSON instance: %v", err)
			return
		}
		if dec.More() {
			p.Add(line, "", "more than one JSON value on the line")
			return
		}
		found = append(found, located{line, in})
	}
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
		// One JSON list: each element's line is where it starts.
		start := len(data) - len(trimmed)
		var list []json.RawMessage
		if err := json.Unmarshal(trimmed, &list); err != nil {
			p.Add(lineAt(data, start+offsetOf(err)), "", "not a JSON list of instances: %v", err)
		}
		at := start
		for _, raw := range list {
			if i := bytes.Index(data[at:], raw); i >= 0 {
				at += i
			}
			decode(lineAt(data, at), raw)
			at += len(raw)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 64<<10), MaxInstanceBytes+1)
		n := 0
		for sc.Scan() {
			n++
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				decode(n, line)
			}
		}
		if err := sc.Err(); err != nil {
			p.Add(n+1, "", "a line over %d bytes: %v", MaxInstanceBytes, err)
		}
	}
	if len(found) == 0 && len(p.Problems) == 0 {
		p.Add(0, "", "no instances: the file needs one JSON instance per line, or a JSON list of them")
	}

	set := &Set{Path: path}
	first := map[string]int{}
	workflows := map[string]*workflow.Workflow{}
	var sources []source
	for _, f := range found {
		if t, src := p.instance(ctx, f.line, f.in, o, first, workflows); t != nil {
			set.Tasks = append(set.Tasks, t)
			sources = append(sources, src)
		}
	}
	if len(p.Problems) == 0 && o.Dir == "" {
		p.Add(0, "", "no directory for the instances' workspaces")
	}
	if len(p.Problems) > 0 {
		return nil, &FileError{Path: path, Problems: p.Sorted()}
	}
	// Only a file without problems writes workspaces.
	for i, t := range set.Tasks {
		t.WorkspacePath = filepath.Join(o.Dir, t.ID)
		if err := checkout(ctx, sources[i].repo, sources[i].commit, t.WorkspacePath); err != nil {
			p.Add(sources[i].line, "base_commit", "check out %s at %s: %v", sources[i].repo, sources[i].commit, err)
		}
	}
	if len(p.Problems) > 0 {
		return nil, &FileError{Path: path, Problems: p.Problems}
	}
	return set, nil
}

// source is where an instance's workspace comes from.
type source struct {
	line         int
	repo, commit string
}

// instance checks one instance and makes its task, but for its workspace,
// which comes from the source (nil when it has a problem).
func (p *parser) instance(ctx context.Context, line int, in Instance, o SWEBenchOptions, first map[string]int, workflows map[string]*workflow.Workflow) (*Task, source) {
	before := len(p.Problems)
	switch {
	case in.InstanceID == "":
		p.Add(line, "instance_id", "required")
	case !taskID.MatchString(in.InstanceID):
		p.Add(line, "instance_id", "%q is not a task ID: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64", in.InstanceID)
	default:
		if at, dup := first[in.InstanceID]; dup {
			p.Add(line, "instance_id", "%q is used twice (first at line %d)", in.InstanceID, at)
		} else {
			first[in.InstanceID] = line
		}
	}
	if strings.TrimSpace(in.ProblemStatement) == "" {
		p.Add(line, "problem_statement", "required")
	}
	if len(in.TestCommands) == 0 {
		p.Add(line, "test_commands", "required: the shell commands that must pass for the instance to be resolved (SWE-bench keeps them in its harness; a local instance names them)")
	}
	for i, c := range in.TestCommands {
		if strings.TrimSpace(c) == "" {
			p.Add(line, fmt.Sprintf("test_commands[%d]", i), "an empty command")
		}
	}
	wfPath := o.Workflow
	if in.Workflow != "" {
		wfPath = p.path(in.Workflow)
	}
	var wf *workflow.Workflow
	if wfPath == "" {
		p.Add(line, "workflow", "no workflow: name one for every instance (rath eval --workflow FILE) or in the instance")
	} else if wf = workflows[wfPath]; wf == nil {
		var err error
		if wf, err = workflow.Load(wfPath); err == nil {
			err = wf.CheckScripts()
		}
		if err != nil {
			p.Add(line, "workflow", "%v", err)
			wf = nil
		} else {
			workflows[wfPath] = wf
		}
	}
	repo := ""
	if in.Repo == "" {
		p.Add(line, "repo", "required: a local git repository")
	} else {
		repo = p.path(in.Repo)
		if err := isGitRepo(ctx, repo); err != nil {
			p.Add(line, "repo", "%v", err)
			repo = ""
		}
	}
	if in.BaseCommit == "" {
		p.Add(line, "base_commit", "required")
	} else if repo != "" {
		if err := gitRun(ctx, repo, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", in.BaseCommit+"^{commit}"); err != nil {
			p.Add(line, "base_commit", "%q is not a commit of %s", in.BaseCommit, repo)
			repo = ""
		}
	}
	if len(p.Problems) > before {
		return nil, source{}
	}
	t := &Task{ID: in.InstanceID, Text: in.ProblemStatement, WorkflowPath: wfPath, wf: wf}
	t.Grader.Command = []string{"sh", "-c", strings.Join(in.TestCommands, " && ")}
	if err := t.Grader.pickAgent(wf, ""); err != nil {
		p.Add(line, "workflow", "%v", err)
		return nil, source{}
	}
	return t, source{line: line, repo: repo, commit: in.BaseCommit}
}

// isGitRepo says why dir is not the top of a git repository, if it is not.
func isGitRepo(ctx context.Context, dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	var out bytes.Buffer
	if err := gitRun(ctx, dir, &out, "rev-parse", "--show-toplevel"); err != nil {
		return fmt.Errorf("%s is not a git repository", dir)
	}
	top, err1 := filepath.EvalSymlinks(strings.TrimSpace(out.String()))
	abs, err2 := filepath.Abs(dir)
	if err2 == nil {
		abs, err2 = filepath.EvalSymlinks(abs)
	}
	if err1 != nil || err2 != nil || top != abs {
		return fmt.Errorf("%s is not the top of a git repository (it is inside %s)", dir, strings.TrimSpace(out.String()))
	}
	return nil
}

// checkout writes the tree of commit in repo into the new directory dir:
// git archive of the commit's tree (a tree has no pax header naming the
// commit), unpacked as a workspace seed is, so a hostile repository's
// archive is held to the same limits.
func checkout(ctx context.Context, repo, commit, dir string) error {
	var archive bytes.Buffer
	if err := gitRun(ctx, repo, &archive, "archive", "--format=tar", "--end-of-options", commit+"^{tree}"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return client.UnpackWorkspace(archive.Bytes(), dir)
}

// gitRun runs git in dir, its stdout into out (nil: discarded); the error
// carries git's stderr.
func gitRun(ctx context.Context, dir string, out *bytes.Buffer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("git %s: %s", args[0], msg)
		}
		return fmt.Errorf("git %s: %w", args[0], err)
	}
	return nil
}

// lineAt is the 1-based line of byte offset off in data.
func lineAt(data []byte, off int) int {
	off = min(max(off, 0), len(data))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// offsetOf is the offset a JSON syntax error names, else 0.
func offsetOf(err error) int {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return int(se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return int(te.Offset)
	}
	return 0
}
