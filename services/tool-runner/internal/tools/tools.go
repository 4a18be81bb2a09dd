// Package tools holds the built-in tools a model can call on a session's
// workspace (read, write, list, search, patch, run, validate, experiment) and todo, which
// keeps the session's pending work, each described by a JSON
// Schema that is both what the model is offered and what its arguments are
// checked against.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Names of the built-in tools, as models call them.
const (
	ReadFile   = "read_file"
	WriteFile  = "write_file"
	ListFiles  = "list_files"
	Search     = "search"
	ApplyPatch = "apply_patch"
	Run        = "run"
	Validate   = "validate"
)

// Spec describes a tool to a model.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema (draft 2020-12) of the arguments.
	Parameters json.RawMessage
}

// Output is what a tool call produced. A tool that ran but failed (a missing
// file, a command exiting non-zero, a patch that does not apply) is an
// Output with a non-zero ExitCode and Result saying why, for the model to
// read and act on.
type Output struct {
	// Result is the text for the model: valid UTF-8, bounded in size.
	Result string
	// ExitCode is 0 on success; for run, the command's exit code.
	ExitCode int
	// Stdout and Stderr are the command's output, for run and apply_patch.
	Stdout, Stderr string
	// Truncated is true if Result (or the command's output) was cut.
	Truncated bool
	// Duration is the wall-clock time of the call.
	Duration time.Duration
	// Limits are the limits the call's command ran under
	// (sandbox.Result.Limits), for its evidence; empty for a tool that ran
	// none.
	Limits string
}

// ErrUnknownTool is wrapped by Call's error for a tool name it does not know.
var ErrUnknownTool = errors.New("unknown tool")

// ErrEscape is wrapped by Call's error for a path argument outside the
// workspace or inside .git; it is sandbox.ErrEscape, and the error is a
// *sandbox.PathError.
var ErrEscape = sandbox.ErrEscape

// ArgError is an argument that does not match the tool's schema or
// constraints. Call returns one per problem, joined.
type ArgError struct {
	Tool string
	// Field names the argument, for example "path" or "command[0]"; it is
	// empty for the arguments as a whole.
	Field  string
	Reason string
}

// Error names the tool, the argument and the problem.
func (e *ArgError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: arguments: %s", e.Tool, e.Reason)
	}
	return fmt.Sprintf("%s: argument %s: %s", e.Tool, e.Field, e.Reason)
}

// tool is one built-in tool.
type tool struct {
	description string
	schema      string
	call        func(ctx context.Context, ws sandbox.Workspace, args json.RawMessage) (Output, error)
}

// order is the order Specs lists the tools in.
var order = []string{ReadFile, WriteFile, ListFiles, Search, ApplyPatch, Run, Validate, Experiment, Todo}

var builtins = map[string]tool{
	ReadFile:   {readFileDescription, readFileSchema, readFile},
	WriteFile:  {writeFileDescription, writeFileSchema, writeFile},
	ListFiles:  {listFilesDescription, listFilesSchema, listFiles},
	Search:     {searchDescription, searchSchema, search},
	ApplyPatch: {applyPatchDescription, applyPatchSchema, applyPatch},
	Run:        {runDescription, runSchema, runCommand},
	Validate:   {validateDescription, validateSchema, validateCommand},
	Experiment: {experimentDescription, experimentSchema, experiment},
	Todo:       {todoDescription, todoSchema, todoCall},
}

// Specs returns the built-in tools' specs, in a fixed order.
func Specs() []Spec {
	out := make([]Spec, 0, len(order))
	for _, name := range order {
		t := builtins[name]
		out = append(out, Spec{Name: name, Description: t.description, Parameters: json.RawMessage(t.schema)})
	}
	return out
}

// Call checks args against the tool's schema and runs the tool on ws. It
// returns a Go error only for a call that must not or cannot run: an unknown
// tool (ErrUnknownTool), bad arguments (*ArgError), a path outside the
// workspace (ErrEscape), or a failure of the sandbox itself. Everything else
// is an Output.
func Call(ctx context.Context, ws sandbox.Workspace, name string, args json.RawMessage) (Output, error) {
	t, ok := builtins[name]
	if !ok {
		return Output{}, fmt.Errorf("call %q: %w", name, ErrUnknownTool)
	}
	if err := validate(name, args); err != nil {
		return Output{}, err
	}
	start := time.Now()
	out, err := t.call(ctx, ws, args)
	var f *failure
	if errors.As(err, &f) {
		out, err = Output{Result: f.msg, ExitCode: 1}, nil
	}
	if err != nil {
		return Output{}, err
	}
	if out.Duration == 0 {
		out.Duration = time.Since(start)
	}
	out.Result = strings.ToValidUTF8(out.Result, "\uFFFD")
	return out, nil
}

// failure is a tool-level failure: a tool returns it as an error, and Call
// turns it into an Output with exit code 1 and the message as Result.
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, a ...any) error { return &failure{fmt.Sprintf(format, a...)} }

// openRoot resolves a path argument and opens the workspace as an os.Root,
// returning the path relative to it. Resolve gives the typed verdict on
// escapes; doing the I/O through os.Root keeps it inside the workspace even
// if a command swapped a directory for a link since.
//
// A path Resolve refuses is a Go error wrapping ErrEscape; one it cannot
// resolve for other reasons (a link loop) is a tool-level failure.
func openRoot(tool, field string, ws sandbox.Workspace, path string) (*os.Root, string, error) {
	abs, err := ws.Resolve(path)
	if errors.Is(err, sandbox.ErrEscape) {
		return nil, "", fmt.Errorf("%s: argument %s: %w", tool, field, err)
	}
	if err != nil {
		return nil, "", failf("%s %s: %s", tool, path, describe(err))
	}
	rel, err := filepath.Rel(ws.Dir(), abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, "", fmt.Errorf("%s: %q resolved outside %s", tool, path, ws.Dir())
	}
	root, err := os.OpenRoot(ws.Dir())
	if err != nil {
		return nil, "", fmt.Errorf("%s: open workspace: %w", tool, err)
	}
	return root, rel, nil
}

// describe words a file system error for the model, without the workspace's
// absolute path.
func describe(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err.Error()
}
