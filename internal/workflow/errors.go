package workflow

import (
	"fmt"
	"strings"

	"github.com/openrath/rath/internal/workflow/parse"
)

// Problem is one thing wrong with a workflow file: where (Line, 1-based; 0
// when the problem has no place, such as an empty file), which field (a path
// like "rules[2].route.agent") and what.
type Problem struct {
	Line    int
	Field   string
	Message string
}

func problems(ps []parse.Problem) []Problem {
	out := make([]Problem, len(ps))
	for i, p := range ps {
		out[i] = Problem(p)
	}
	return out
}

// SpecError is returned by Parse and Load for a workflow file that is not
// valid. It lists every problem found, ordered by line, so one run of
// `rath workflow check` shows them all.
type SpecError struct {
	// Path is the file name as given to Parse; it prefixes every problem.
	Path     string
	Problems []Problem
}

func (e *SpecError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(parse.Problem(p).In(e.Path))
	}
	return b.String()
}

// RuleError is returned by Decide and Stopped when a rule's or stop
// condition's expression fails to evaluate or does not yield a bool. It is a
// defect of the workflow, not of the event: retrying the same event fails the
// same way.
type RuleError struct {
	// Rule names the rule (or stop condition) whose expression failed.
	Rule string
	// Field is the expression that failed: "when", "route.fork.at" or
	// "route.memory.content".
	Field string
	Err   error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("workflow rule %q: %s: %v", e.Rule, e.Field, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }
