package workflow

import (
	"fmt"

	"github.com/openrath/rath/internal/workflow/expr"
)

// compile compiles every expression of w, reporting problems at the
// expression's line. It runs after validate, on whatever decoded.
func (p *parser) compile(w *Workflow) {
	for i := range w.Rules {
		r := &w.Rules[i]
		f := fmt.Sprintf("rules[%d]", i)
		if r.When != "" {
			r.when = p.compileExpr(f+".when", r.When, expr.Bool)
		}
		if r.Route.Fork != nil && r.Route.Fork.At != "" {
			r.at = p.compileExpr(f+".route.fork.at", r.Route.Fork.At, expr.Int)
		}
		if r.Route.Memory != nil && r.Route.Memory.Content != "" {
			r.content = p.compileExpr(f+".route.memory.content", r.Route.Memory.Content, expr.String)
		}
	}
	for i := range w.Agents {
		if rc := w.Agents[i].Recall; rc != nil && rc.Query != "" {
			rc.query = p.compileExpr(fmt.Sprintf("agents[%d].recall.query", i), rc.Query, expr.String)
		}
	}
	for i := range w.Gates {
		if g := &w.Gates[i]; g.When != "" {
			g.when = p.compileExpr(fmt.Sprintf("gates[%d].when", i), g.When, expr.Bool)
		}
	}
	for i := range w.Stop {
		if s := &w.Stop[i]; s.When != "" {
			s.when = p.compileExpr(fmt.Sprintf("stop[%d].when", i), s.When, expr.Bool)
		}
	}
}

// compileExpr compiles one expression, or returns nil after reporting why
// it does not compile at the field's line.
func (p *parser) compileExpr(field, src string, want expr.Kind) *expr.Program {
	prg, err := expr.Compile(src, want)
	if err != nil {
		p.Add(p.Line(field), field, "%v", err)
		return nil
	}
	return prg
}
