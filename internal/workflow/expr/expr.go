// Package expr compiles and evaluates the CEL expressions of a workflow
// (rules, gates, stop conditions, recall queries) and rath eval's graders,
// over an activation of two variables, event and state (see
// workflow.Activation). An expression is checked when it compiles: its
// syntax, the type it yields and the fields it reads of event and state, so
// a typo fails the file that holds it, not some later event.
package expr

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

// env is the CEL environment of every expression: the two variables of an
// activation (see Activation), optional values (event.data.?reason),
// comparisons between ints and doubles, since JSON numbers in event data may
// be either, and the string extensions (a gate joins a command's argv:
// command.join(" ")).
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("state", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
	)
})

// Kind is what an expression must yield.
type Kind int

// The kinds an expression may be compiled for.
const (
	Bool   Kind = iota
	String      // a text
	Int         // a whole number, int or uint
)

// yields are the types of each Kind, the first named in errors.
var yields = [...][]*types.Type{Bool: {types.BoolType}, String: {types.StringType}, Int: {types.IntType, types.UintType}}

// MaxCost bounds the work of one evaluation, in CEL's cost units (about one
// a comparison or a list element visited): a workflow's expressions are its
// author's, the data they read is agents', and a comprehension nested over
// a long list would otherwise hold the selector that every tenant shares.
// A rule's expression costs tens of units; one past the bound fails with
// an error that says so.
const MaxCost = 100_000

// Program is a compiled expression, safe for concurrent use. Its methods on
// a nil Program return ErrNotCompiled.
type Program struct {
	prg    cel.Program
	inputs []Path
}

// ErrNotCompiled is the error of evaluating an expression that was never
// compiled: a workflow built by hand rather than by Parse.
var ErrNotCompiled = errors.New("expression not compiled: workflows come from Parse or Load")

// Compile compiles src, which must yield want (or be dynamic, which is
// checked when it runs). Its error says what is wrong and where in src,
// without a file or line: the caller knows where src came from.
func Compile(src string, want Kind) (*Program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		var msgs []string
		multiline := strings.Contains(strings.TrimSpace(src), "\n")
		for _, ce := range iss.Errors() {
			loc := fmt.Sprintf("column %d", ce.Location.Column()+1)
			if multiline {
				loc = fmt.Sprintf("expression line %d, %s", ce.Location.Line(), loc)
			}
			msgs = append(msgs, fmt.Sprintf("%s (%s)", ce.Message, loc))
		}
		return nil, fmt.Errorf("invalid CEL: %s", strings.Join(msgs, "; "))
	}
	out, wants := ast.OutputType(), yields[want]
	if !out.IsExactType(types.DynType) && !slices.ContainsFunc(wants, out.IsExactType) {
		var names []string
		for _, t := range wants {
			names = append(names, t.String())
		}
		return nil, fmt.Errorf("must yield %s, not %s", strings.Join(names, " or "), out)
	}
	inputs := paths(ast.NativeRep())
	for _, in := range inputs {
		if msg := in.unknownField(); msg != "" {
			return nil, errors.New(msg)
		}
	}
	prg, err := e.Program(ast, cel.CostLimit(MaxCost))
	if err != nil {
		return nil, fmt.Errorf("invalid CEL: %w", err)
	}
	return &Program{prg: prg, inputs: inputs}, nil
}

// Inputs lists, in source order and without repeats, the paths of event and
// state the expression reads: what a decision records.
func (p *Program) Inputs() []Path {
	if p == nil {
		return nil
	}
	return p.inputs
}

// value evaluates the expression over act, which must yield want.
func (p *Program) value(act map[string]any, want Kind) (any, error) {
	if p == nil {
		return nil, ErrNotCompiled
	}
	out, _, err := p.prg.Eval(act)
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			return nil, fmt.Errorf("the expression did more work than one evaluation may (%d CEL cost units): %w", MaxCost, err)
		}
		return nil, err
	}
	for _, t := range yields[want] {
		if out.Type().TypeName() == t.TypeName() {
			return out.Value(), nil
		}
	}
	return nil, fmt.Errorf("yields %s, not %s", out.Type().TypeName(), yields[want][0])
}

// Bool evaluates an expression that must yield a bool. An expression that
// fails at run time (a missing key, a dynamic value of another type)
// returns the error.
func (p *Program) Bool(act map[string]any) (bool, error) {
	v, err := p.value(act, Bool)
	b, _ := v.(bool)
	return b, err
}

// String evaluates an expression that must yield a string.
func (p *Program) String(act map[string]any) (string, error) {
	v, err := p.value(act, String)
	s, _ := v.(string)
	return s, err
}

// Int evaluates an expression that must yield an int or a uint.
func (p *Program) Int(act map[string]any) (int64, error) {
	v, err := p.value(act, Int)
	if u, ok := v.(uint64); ok {
		return int64(u), err
	}
	n, _ := v.(int64)
	return n, err
}

// Identifier is the form of a name CEL can select as a field
// (state.agent_turns.coder).
var Identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// eventFields and stateFields are the keys Activation sets: an expression
// naming another is a typo, caught when the file is parsed rather than as
// "no such key" on some later event.
var (
	eventFields = []string{"type", "id", "seq", "session", "data"}
	stateFields = []string{
		"status", "turns", "turns_failed", "tool_calls", "model_calls", "events", "last_agent",
		"turn_in_flight", "tokens_in", "tokens_out", "tokens", "validations_failed",
		"validations_passed", "parent", "fork_seq", "fork_depth", "seq", "labels", "agent_turns", "decisions", "task",
		"open_work", "experiments",
	}
)

// Path is a chain of field selections and constant indexes from one
// of the activation's variables: event.type, state.agent_turns.coder,
// event.data.files[0]. A decision records the value at each path its rule
// reads.
type Path []any // string keys and int64 indexes; [0] is "event" or "state"

func (ip Path) String() string {
	var b strings.Builder
	for i, step := range ip {
		switch s := step.(type) {
		case string:
			if i == 0 {
				b.WriteString(s)
			} else if Identifier.MatchString(s) {
				b.WriteString("." + s)
			} else {
				b.WriteString("[" + strconv.Quote(s) + "]")
			}
		case int64:
			fmt.Fprintf(&b, "[%d]", s)
		}
	}
	return b.String()
}

func (ip Path) unknownField() string {
	if len(ip) < 2 {
		return ""
	}
	known := eventFields
	if ip[0] == "state" {
		known = stateFields
	}
	if f, ok := ip[1].(string); ok && !slices.Contains(known, f) {
		return fmt.Sprintf("%s has no field %q (fields: %s)", ip[0], f, strings.Join(known, ", "))
	}
	return ""
}

// Resolve returns the activation's value at the path, or nil if there is
// none (has(event.data.x) reads a path that may be absent).
func (ip Path) Resolve(act map[string]any) any {
	var v any = act
	for _, step := range ip {
		switch s := step.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			if v, ok = m[s]; !ok {
				return nil
			}
		case int64:
			l, ok := v.([]any)
			if !ok || s < 0 || s >= int64(len(l)) {
				return nil
			}
			v = l[s]
		}
	}
	return v
}

// paths lists, in source order and without repeats, the longest paths
// from event or state that an expression selects. A variable index
// (state.agent_turns[state.last_agent]) ends its path, and the index's own
// paths are listed too.
func paths(a *celast.AST) []Path {
	var out []Path
	seen := map[string]bool{}
	var walk func(e celast.Expr)
	walk = func(e celast.Expr) {
		if e == nil {
			return
		}
		if path, rest, ok := chain(e); ok {
			if k := path.String(); !seen[k] {
				seen[k] = true
				out = append(out, path)
			}
			for _, r := range rest {
				walk(r)
			}
			return
		}
		switch e.Kind() {
		case celast.SelectKind:
			walk(e.AsSelect().Operand())
		case celast.CallKind:
			c := e.AsCall()
			walk(c.Target())
			for _, arg := range c.Args() {
				walk(arg)
			}
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el)
			}
		case celast.MapKind:
			for _, en := range e.AsMap().Entries() {
				walk(en.AsMapEntry().Key())
				walk(en.AsMapEntry().Value())
			}
		case celast.StructKind:
			for _, fl := range e.AsStruct().Fields() {
				walk(fl.AsStructField().Value())
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			walk(c.IterRange())
			walk(c.AccuInit())
			walk(c.LoopCondition())
			walk(c.LoopStep())
			walk(c.Result())
		}
	}
	walk(a.Expr())
	return out
}

// chain returns the path e selects from a variable and the subexpressions
// that are not part of the path (variable indexes), or ok false when e does
// not select from event or state.
func chain(e celast.Expr) (path Path, rest []celast.Expr, ok bool) {
	switch e.Kind() {
	case celast.IdentKind:
		if n := e.AsIdent(); n == "event" || n == "state" {
			return Path{n}, nil, true
		}
	case celast.SelectKind:
		s := e.AsSelect()
		if path, rest, ok = chain(s.Operand()); ok && len(rest) == 0 {
			return append(path, s.FieldName()), nil, true
		}
		return path, rest, ok
	case celast.CallKind:
		c := e.AsCall()
		fn := c.FunctionName()
		if (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) || len(c.Args()) != 2 {
			return nil, nil, false
		}
		if path, rest, ok = chain(c.Args()[0]); !ok || len(rest) > 0 {
			return path, rest, ok
		}
		key := c.Args()[1]
		if key.Kind() == celast.LiteralKind {
			switch v := key.AsLiteral().(type) {
			case types.String:
				return append(path, string(v)), nil, true
			case types.Int:
				return append(path, int64(v)), nil, true
			}
		}
		return path, []celast.Expr{key}, true
	}
	return nil, nil, false
}
