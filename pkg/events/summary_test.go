package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// Every registered kind says something in its line, even with no data, and
// the line is one line.
func TestSummaryOfEveryKind(t *testing.T) {
	for _, k := range events.Kinds() {
		raw, err := json.Marshal(k.New())
		if err != nil {
			t.Fatal(err)
		}
		got := events.Summary(events.Stored{Type: k.Type, Data: raw})
		if got == "" || got == string(raw) || strings.ContainsAny(got, "\n\r") {
			t.Errorf("summary of an empty %s = %q", k.Type, got)
		}
	}
}

func TestSummary(t *testing.T) {
	long := strings.Repeat("é", 70)
	for _, tc := range []struct {
		data any
		want string
	}{
		{&events.SessionStarted{Workflow: "fix-calc", Task: "fix\nthe test", Labels: map[string]string{"b": "2", "a": "1"}},
			"session started: workflow fix-calc, task “fix the test”, labels a=1 b=2"},
		{&events.SessionStarted{}, "session started"},
		{&events.SessionForked{Parent: "fix", AtSeq: 22, Reason: "retry"}, "fork of fix at 22: retry"},
		{&events.SessionMerged{Source: "fix-b", SourceHead: events.Position{Seq: 9}, Segments: []events.Segment{{From: 3, To: 5}, {From: 8, To: 9}}},
			"merged fix-b up to 9 (5 events)"},
		{&events.SessionPaused{}, "paused"},
		{&events.SessionClosed{Outcome: "accepted", Reason: "the tests pass"}, "closed: accepted (the tests pass)"},
		{&events.SessionClosed{Reason: "done"}, "closed (done)"},
		{&events.ChunkAppended{Role: "assistant", Agent: "coder", Content: "line one\nline two"}, "assistant/coder: line one line two"},
		{&events.ChunkAppended{Role: "user", Content: long}, "user: " + strings.Repeat("é", 59) + "…"},
		{&events.ModelCalled{Agent: "coder", Provider: "p", Model: "m", TokensIn: 3, TokensOut: 4, LatencyMS: 5, StopReason: "end_turn"},
			"coder on p/m: 3 tokens in, 4 out, 5 ms, stop end_turn"},
		{&events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "s", TokensIn: 3, TokensOut: 4, StopReason: "tool_use", Choice: &events.ScriptChoice{Turn: 0, Alternative: 1, Of: 2, Seed: "fix/2"}},
			`coder on scripted/s: 3 tokens in, 4 out, 0 ms, stop tool_use, drew 0b of 2 matching (seed "fix/2")`},
		{&events.ToolRequested{Agent: "coder", Tool: "shell", CallID: "c1", Arguments: json.RawMessage(`{"cmd":"ls"}`)}, `coder calls shell c1 {"cmd":"ls"}`},
		{&events.ToolRequested{Tool: "shell", CallID: "c1"}, "calls shell c1"},
		{&events.ToolCompleted{CallID: "c1", Tool: "shell", ExitCode: 1, DurationMS: 9, Result: "no\nsuch file"}, "shell c1 exit 1, 9 ms: no such file"},
		{&events.ToolFailed{CallID: "c1", Tool: "shell", Error: "timeout"}, "shell c1 failed: timeout"},
		{&events.ToolCleared{CallID: "c1", Tool: "run"}, "run c1 cleared: no gate holds it"},
		{&events.SandboxPlaced{Backend: "local", SandboxID: "local-s", Host: "h"}, "sandbox local/local-s (development backend: no isolation), host h"},
		{&events.SandboxPlaced{Backend: "bwrap", SandboxID: "bwrap-s", Isolation: "namespaces", From: &events.Sandbox{Backend: "local", SandboxID: "local-s"}},
			"sandbox bwrap/bwrap-s (isolation: namespaces), moved from local/local-s"},
		{&events.SandboxRequested{Backend: "bwrap", Reason: "isolate"}, "move to sandbox bwrap requested: isolate"},
		{&events.SandboxRefused{Backend: "docker", Reason: "unknown backend"}, "move to sandbox docker refused: unknown backend"},
		{&events.MemoryRecalled{Agent: "coder", Items: []events.MemoryItemRef{{ItemID: "m1"}}}, "memory recalled for coder: 1 item"},
		{&events.MemoryRecalled{Agent: "coder"}, "memory recalled for coder: 0 items"},
		{&events.MemoryWritten{ItemID: "m1", Version: 2, Scope: "project:x", Content: "run go test", Provenance: events.Provenance{Evidence: "validation_signal"}},
			"memory written: m1 v2 in project:x (validation_signal): run go test"},
		{&events.SelectorDecided{Rule: "retry", Route: "fork:coder@22", Reason: "rejected"}, "selector: retry → fork:coder@22: rejected"},
		{&events.SelectorDecided{Rule: "triage", Route: "agent:coder", Router: "triage", Reason: "a bug"}, "selector: triage → agent:coder (router triage): a bug"},
		{&events.ValidationPassed{Validator: "go test"}, "validation passed: go test"},
		{&events.ValidationPassed{Validator: "go test", Target: "65823b3c86241b0e128e3d4f0c1a2b3c4d5e6f70"}, "validation passed: go test (target 65823b3c8624)"},
		{&events.ValidationFailed{Validator: "go test", Reason: "exit code 1"}, "validation FAILED: go test: exit code 1"},
		{&events.TurnRequested{Agent: "coder", TurnID: "turn-1", Rule: "code"}, "turn of coder (turn-1, rule code)"},
		{&events.TurnCompleted{Agent: "coder", TurnID: "turn-1", ToolCalls: 1, StopReason: "tool_use"}, "turn of coder completed (turn-1): 1 tool call, stop tool_use"},
		{&events.TurnFailed{Agent: "coder", TurnID: "turn-1", Attempts: 3, Error: "429"}, "turn of coder failed (turn-1) after 3 attempts: 429"},
		{&events.HandlerFailed{Handler: "selector", EventID: "e1", EventType: "rath.x", Attempts: 1, Error: "boom"}, "selector gave up on e1 (rath.x) after 1 attempt: boom"},
	} {
		k, _ := events.KindOf(tc.data)
		raw, _ := json.Marshal(tc.data)
		if got := events.Summary(events.Stored{Type: k.Type, Data: raw}); got != tc.want {
			t.Errorf("Summary(%s) = %q, want %q", k.Type, got, tc.want)
		}
	}
	if got := events.Summary(events.Stored{Type: "rath.unknown", Data: json.RawMessage(`{"a":  1}`)}); got != `{"a": 1}` {
		t.Errorf("summary of an unknown type = %q", got)
	}
}
