package expr_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/workflow/expr"
)

func activation() map[string]any {
	return map[string]any{
		"event": map[string]any{"type": "rath.tool.call.requested", "seq": int64(7), "data": map[string]any{"files": []any{"a.go"}}},
		"state": map[string]any{"turns": int64(2), "task": "fix it", "agent_turns": map[string]any{"coder": int64(1)}, "last_agent": "coder"},
	}
}

// An expression that cannot run is refused when it compiles, with what is
// wrong and where in the expression.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      expr.Kind
		err       string
	}{
		{"syntax", "state.turns ==", expr.Bool, "invalid CEL: Syntax error"},
		{"syntax on a later line", "state.turns > 1 &&\n  )", expr.Bool, "(expression line 2, column 3)"},
		{"not a bool", "size(state.task)", expr.Bool, "must yield bool, not int"},
		{"not a whole number", `"x" + state.task`, expr.Int, "must yield int or uint, not string"},
		{"not a string", "state.turns > 1", expr.String, "must yield string, not bool"},
		{"a field state does not have", "state.turn > 1", expr.Bool, `state has no field "turn" (fields: status, turns,`},
		{"a field event does not have", "event.kind == 'x'", expr.Bool, `event has no field "kind"`},
		{"an undeclared variable", "session.turns > 1", expr.Bool, "undeclared reference to 'session'"},
		{"an unknown function", "frobnicate(state.task)", expr.Bool, "undeclared reference to 'frobnicate'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prg, err := expr.Compile(tc.src, tc.want)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Compile(%q) = %v, %v; want an error containing %q", tc.src, prg, err, tc.err)
			}
		})
	}
}

// A dynamic value is checked when it runs, and a missing key fails with the
// key named.
func TestEvalFails(t *testing.T) {
	act := activation()
	prg, err := expr.Compile("event.data.files", expr.Bool) // dyn: compiles
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prg.Bool(act); err == nil || err.Error() != "yields list, not bool" {
		t.Errorf("Bool of a list: %v", err)
	}
	prg, err = expr.Compile("event.data.reason == 'x'", expr.Bool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prg.Bool(act); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Errorf("Bool over a missing key: %v", err)
	}
	var none *expr.Program
	if _, err := none.Bool(act); !errors.Is(err, expr.ErrNotCompiled) {
		t.Errorf("nil Program: %v, want ErrNotCompiled", err)
	}
	if none.Inputs() != nil {
		t.Error("nil Program has inputs")
	}
}

// Each kind evaluates to its Go value, and the inputs are the paths read,
// in source order, without repeats, with a variable index ending its path.
func TestEvalAndInputs(t *testing.T) {
	act := activation()
	b, err := expr.Compile(`state.turns > 1 && event.type.startsWith("rath.") && state.agent_turns[state.last_agent] == 1 && state.turns < 9`, expr.Bool)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Bool(act); err != nil || !ok {
		t.Errorf("Bool = %v, %v", ok, err)
	}
	var got []string
	for _, in := range b.Inputs() {
		got = append(got, fmt.Sprintf("%s=%v", in, in.Resolve(act)))
	}
	want := "state.turns=2 event.type=rath.tool.call.requested state.agent_turns=map[coder:1] state.last_agent=coder"
	if strings.Join(got, " ") != want {
		t.Errorf("inputs %v\nwant %s", got, want)
	}
	s, err := expr.Compile(`state.task + "!"`, expr.String)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.String(act); err != nil || v != "fix it!" {
		t.Errorf("String = %q, %v", v, err)
	}
	n, err := expr.Compile(`event.seq - 1`, expr.Int)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := n.Int(act); err != nil || v != 6 {
		t.Errorf("Int = %d, %v", v, err)
	}
	u, err := expr.Compile(`uint(event.seq)`, expr.Int)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := u.Int(act); err != nil || v != 7 {
		t.Errorf("Int of a uint = %d, %v", v, err)
	}
}

// No source, however hostile, panics Compile, and whatever compiles
// evaluates to a value or an error.
func FuzzCompile(f *testing.F) {
	for _, src := range []string{
		"state.turns > 1", "event.data.?reason.orValue('') == 'x'", "state.agent_turns[state.last_agent]",
		"[1,2,3].all(x, [1,2,3].exists(y, x == y))", "'a' * 3", "event.data.files[99]", "))(", "\x00", "state." + strings.Repeat("a.", 200) + "b",
	} {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, k := range []expr.Kind{expr.Bool, expr.String, expr.Int} {
			prg, err := expr.Compile(src, k)
			if err != nil {
				continue
			}
			_, _ = prg.Bool(activation())
			_, _ = prg.String(activation())
			_, _ = prg.Int(activation())
		}
	})
}

// An expression nested over agents' data cannot run without end: past
// MaxCost its evaluation fails, saying so, while the same expression over
// a short list answers.
func TestEvalBoundsItsWork(t *testing.T) {
	prg, err := expr.Compile(`event.data.items.exists(a, event.data.items.exists(b, event.data.items.exists(c, a + b + c < 0)))`, expr.Bool)
	if err != nil {
		t.Fatal(err)
	}
	list := func(n int) map[string]any {
		items := make([]any, n)
		for i := range items {
			items[i] = int64(i)
		}
		return map[string]any{"event": map[string]any{"data": map[string]any{"items": items}}, "state": map[string]any{}}
	}
	if ok, err := prg.Bool(list(5)); err != nil || ok {
		t.Fatalf("over 5 items: %v, %v; want false, nil", ok, err)
	}
	_, err = prg.Bool(list(500)) // 125 million steps unbounded
	if err == nil || !strings.Contains(err.Error(), "more work than one evaluation may") {
		t.Fatalf("over 500 items: %v, want the cost bound's error", err)
	}
}
