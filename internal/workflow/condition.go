package workflow

import "github.com/openrath/rath/internal/workflow/expr"

// Condition is a boolean CEL expression compiled outside a workflow file, in
// the environment of a rule's when: the variables event and state of
// Activation, with the same checks (a field state does not have is refused
// when it compiles). rath eval's graders are conditions, so a grader reads
// like the rule that closes the session it grades.
type Condition struct {
	src string
	prg *expr.Program
}

// CompileCondition compiles src, which must yield a bool. Its error says
// what is wrong and at which column, without a file or line: the caller
// knows where src came from.
func CompileCondition(src string) (*Condition, error) {
	prg, err := expr.Compile(src, expr.Bool)
	if err != nil {
		return nil, err
	}
	return &Condition{src: src, prg: prg}, nil
}

// String returns the expression as written.
func (c *Condition) String() string { return c.src }

// Holds evaluates the condition over an activation (see Activation). An
// expression that fails at run time (a missing key, a dynamic value that is
// not a bool) returns the error.
func (c *Condition) Holds(act map[string]any) (bool, error) {
	return c.prg.Bool(act)
}
