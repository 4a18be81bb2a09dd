package workflow_test

import (
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
)

func TestExceeded(t *testing.T) {
	w := mustParse(t, base+`budgets:
  max_turns: 3
  max_tokens: 500
  max_tool_calls: 2
  wall_time: 30m
`)
	tool := func(id string) any { return &events.ToolRequested{CallID: id, Tool: "shell"} }
	failed := []any{&events.TurnRequested{TurnID: "f", Agent: "coder"}, &events.TurnFailed{TurnID: "f", Agent: "coder", Error: "x"}}
	tests := []struct {
		name    string
		given   []any
		elapsed time.Duration
		reason  string
	}{
		{"within every budget", concat(started, turn("t1", "coder"), []any{tool("c1")}), 29 * time.Minute, ""},
		{"turns reached", concat(started, turn("t1", "coder"), turn("t2", "coder"), turn("t3", "coder")), 0,
			"budget max_turns=3 reached (3 turns)"},
		{"failed turns count", concat(started, turn("t1", "coder"), turn("t2", "coder"), failed), 0,
			"budget max_turns=3 reached (3 turns)"},
		{"tokens reached", concat(started, []any{&events.ModelCalled{Agent: "coder", TokensIn: 450, TokensOut: 60}}), 0,
			"budget max_tokens=500 reached (510 tokens)"},
		{"tool calls reached", concat(started, []any{tool("c1"), tool("c2")}), 0,
			"budget max_tool_calls=2 reached (2 tool calls)"},
		{"wall time reached", started, 30*time.Minute + 2*time.Second, "budget wall_time=30m0s reached (30m2s elapsed)"},
		{"turns before tokens", concat(started, turn("t1", "coder"), turn("t2", "coder"), turn("t3", "coder"),
			[]any{&events.ModelCalled{Agent: "coder", TokensIn: 1000}}), 0, "budget max_turns=3 reached (3 turns)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reason, exceeded := w.Exceeded(fold(history(t, tc.given...)), t0, t0.Add(tc.elapsed))
			if reason != tc.reason || exceeded != (tc.reason != "") {
				t.Fatalf("got %q %v, want %q", reason, exceeded, tc.reason)
			}
		})
	}
}

func TestExceededUnlimitedAndDefaultStart(t *testing.T) {
	st := fold(history(t, concat(started, turn("t1", "coder"), turn("t2", "coder"))...))
	if reason, exceeded := mustParse(t, base).Exceeded(st, t0, t0.Add(1000*time.Hour)); exceeded {
		t.Fatalf("no budgets, yet %q", reason)
	}
	w := mustParse(t, base+"budgets: {wall_time: 1h}\n")
	// The session's first event is at t0+1s: with no start given, wall time
	// runs from there.
	if _, exceeded := w.Exceeded(st, time.Time{}, t0.Add(time.Hour)); exceeded {
		t.Fatal("exceeded one second early")
	}
	if reason, exceeded := w.Exceeded(st, time.Time{}, t0.Add(time.Hour+time.Second)); !exceeded || reason != "budget wall_time=1h0m0s reached (1h0m0s elapsed)" {
		t.Fatalf("got %q %v", reason, exceeded)
	}
}
