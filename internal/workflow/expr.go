package workflow

import (
	"fmt"
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

// compile compiles every expression of w, reporting problems at the
// expression's line. It runs after validate, on whatever decoded.
func (p *parser) compile(w *Workflow) {
	e, err := env()
	if err != nil {
		p.Add(0, "", "CEL environment: %v", err)
		return
	}
	for i := range w.Rules {
		r := &w.Rules[i]
		f := fmt.Sprintf("rules[%d]", i)
		if r.When != "" {
			r.when, r.inputs = p.compileExpr(e, f+".when", r.When, types.BoolType)
		}
		if r.Route.Fork != nil && r.Route.Fork.At != "" {
			r.at, _ = p.compileExpr(e, f+".route.fork.at", r.Route.Fork.At, types.IntType, types.UintType)
		}
		if r.Route.Memory != nil && r.Route.Memory.Content != "" {
			r.content, _ = p.compileExpr(e, f+".route.memory.content", r.Route.Memory.Content, types.StringType)
		}
	}
	for i := range w.Agents {
		if rc := w.Agents[i].Recall; rc != nil && rc.Query != "" {
			rc.query, _ = p.compileExpr(e, fmt.Sprintf("agents[%d].recall.query", i), rc.Query, types.StringType)
		}
	}
	p.compileGates(e, w)
	for i := range w.Stop {
		s := &w.Stop[i]
		if s.When != "" {
			s.when, _ = p.compileExpr(e, fmt.Sprintf("stop[%d].when", i), s.When, types.BoolType)
		}
	}
}

// compileExpr compiles one expression whose result must have one of the
// given types (or be dynamic, which is checked when it runs). It returns
// nil after reporting a problem.
func (p *parser) compileExpr(e *cel.Env, field, src string, want ...*types.Type) (cel.Program, []inputPath) {
	line := p.Line(field)
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
		p.Add(line, field, "invalid CEL: %s", strings.Join(msgs, "; "))
		return nil, nil
	}
	out := ast.OutputType()
	if !out.IsExactType(types.DynType) && !slices.ContainsFunc(want, out.IsExactType) {
		var names []string
		for _, t := range want {
			names = append(names, t.String())
		}
		p.Add(line, field, "must yield %s, not %s", strings.Join(names, " or "), out)
		return nil, nil
	}
	inputs := inputPaths(ast.NativeRep())
	for _, in := range inputs {
		if msg := in.unknownField(); msg != "" {
			p.Add(line, field, "%s", msg)
			return nil, nil
		}
	}
	prg, err := e.Program(ast)
	if err != nil {
		p.Add(line, field, "invalid CEL: %v", err)
		return nil, nil
	}
	return prg, inputs
}

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

// inputPath is a chain of field selections and constant indexes from one
// of the activation's variables: event.type, state.agent_turns.coder,
// event.data.files[0]. A decision records the value at each path its rule
// reads.
type inputPath []any // string keys and int64 indexes; [0] is "event" or "state"

func (ip inputPath) String() string {
	var b strings.Builder
	for i, step := range ip {
		switch s := step.(type) {
		case string:
			if i == 0 {
				b.WriteString(s)
			} else if identifier.re.MatchString(s) {
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

func (ip inputPath) unknownField() string {
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

// resolve returns the activation's value at the path, or nil if there is
// none (has(event.data.x) reads a path that may be absent).
func (ip inputPath) resolve(act map[string]any) any {
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

// inputPaths lists, in source order and without repeats, the longest paths
// from event or state that an expression selects. A variable index
// (state.agent_turns[state.last_agent]) ends its path, and the index's own
// paths are listed too.
func inputPaths(a *celast.AST) []inputPath {
	var out []inputPath
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
func chain(e celast.Expr) (path inputPath, rest []celast.Expr, ok bool) {
	switch e.Kind() {
	case celast.IdentKind:
		if n := e.AsIdent(); n == "event" || n == "state" {
			return inputPath{n}, nil, true
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
