package retail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A task directory (tasks/<id>/ of the example) holds:
const (
	// FileInstruction is what the simulated customer wants, in their
	// words: the customer agent's system prompt.
	FileInstruction = "instruction.md"
	// FileCustomer and FileAssistant are the scripts of the two scripted
	// agents.
	FileCustomer  = "customer.yaml"
	FileAssistant = "assistant.yaml"
	// FileExpected is the database the run must end with.
	FileExpected = "expected.json"
)

// FileDB and FilePolicy are the workspace's files: the shop's database
// at the start, and the written policy.
const (
	FileDB     = "db.json"
	FilePolicy = "POLICY.md"
)

// LabelTask names, in a session's labels, the task the session runs.
const LabelTask = "support_task"

// Task is one task of the support example.
type Task struct {
	ID          string
	Dir         string
	Instruction string
	// Expected is the database the run must end with (JSON).
	Expected []byte
}

var taskID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// LoadTask reads task id from dir/tasks/id.
func LoadTask(example, id string) (Task, error) {
	if !taskID.MatchString(id) {
		return Task{}, fmt.Errorf("task %q: want 1-64 of a-z 0-9 - (tasks: %s)", id, strings.Join(ListTasks(example), ", "))
	}
	dir := filepath.Join(example, "tasks", id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return Task{}, fmt.Errorf("task %q: no such task in %s (tasks: %s)", id, filepath.Join(example, "tasks"), strings.Join(ListTasks(example), ", "))
	}
	t := Task{ID: id, Dir: dir}
	var errs []error
	for _, f := range []string{FileCustomer, FileAssistant} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", id, err))
		}
	}
	instr, err := os.ReadFile(filepath.Join(dir, FileInstruction))
	if err != nil {
		errs = append(errs, fmt.Errorf("task %s: %w", id, err))
	}
	t.Instruction = strings.TrimSpace(string(instr))
	if t.Expected, err = os.ReadFile(filepath.Join(dir, FileExpected)); err != nil {
		errs = append(errs, fmt.Errorf("task %s: %w", id, err))
	} else if _, err := ParseDB(t.Expected); err != nil {
		errs = append(errs, fmt.Errorf("task %s: %s: %w", id, FileExpected, err))
	}
	if err := errors.Join(errs...); err != nil {
		return Task{}, err
	}
	return t, nil
}

// ListTasks names the tasks of an example directory.
func ListTasks(example string) []string {
	entries, err := os.ReadDir(filepath.Join(example, "tasks"))
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && taskID.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	slices.Sort(ids)
	return ids
}

// Grade is the verdict of the shop on a finished conversation: the final
// database against the task's, and the policy over every call.
type Grade struct {
	Task        string           `json:"task"`
	Differences []DifferenceText `json:"differences,omitempty"`
	Policy      []PolicyDecision `json:"policy_decisions"`
	Violations  []string         `json:"violations,omitempty"`
	Final       json.RawMessage  `json:"final_state,omitempty"`
}

// DifferenceText is a domainstate.Difference with its sentence.
type DifferenceText struct {
	Path     string          `json:"path"`
	Expected json.RawMessage `json:"expected,omitempty"`
	Actual   json.RawMessage `json:"actual,omitempty"`
	Text     string          `json:"text"`
}

// PolicyDecision is what the policy decided about one call of the shop's
// tools: allowed (it ran), refused by a rule, or held by a gate.
type PolicyDecision struct {
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Seq      uint64 `json:"seq"`
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Policy decisions.
const (
	DecisionAllowed = "allowed"
	DecisionRefused = "refused"
	// DecisionNotApproved: a gate held the call and its approval was
	// rejected or expired.
	DecisionNotApproved = "not approved"
)
