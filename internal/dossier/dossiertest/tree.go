// Package dossiertest appends a realistic session tree for dossier tests: a
// root whose patch a validation rejects, a fork from before the patch whose
// second attempt passes and closes the session, and a sibling fork merged
// into it. Every event goes through the ledger with the Go client.
package dossiertest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Session IDs of the tree.
const (
	Root     = "fix"     // rejected: its patch fails the tests
	Accepted = "fix-b"   // forked from Root at ForkSeq: passes, closed succeeded
	Sibling  = "fix-c"   // forked from Root at ForkSeq, merged into Accepted, left open
	ForkSeq  = 7         // Root's last event before the coder's turn
	File     = "calc.go" // the file both patches change
)

// BadDiff and GoodDiff are the two patches.
const (
	BadDiff  = "diff --git a/calc.go b/calc.go\nindex 1111111..2222222 100644\n--- a/calc.go\n+++ b/calc.go\n@@ -3,3 +3,3 @@\n func Add(a, b int) int {\n-\treturn a - b\n+\treturn a * b\n }\n"
	GoodDiff = "diff --git a/calc.go b/calc.go\nindex 1111111..3333333 100644\n--- a/calc.go\n+++ b/calc.go\n@@ -3,3 +3,3 @@\n func Add(a, b int) int {\n-\treturn a - b\n+\treturn a + b\n }\n"
)

// FailedOutput is the reason of the root's failed validation: go test's
// output, on several lines, with the characters that break a Markdown
// table or open emphasis and code (|, *, _, `, <).
const FailedOutput = "TestAdd still fails: got 6, want 5\n" +
	"--- FAIL: TestAdd (0.00s)\n" +
	"    calc_test.go:9: Add(2, 3) = 6 | want 5: `a * b` is *not* a sum <calc> __init__\n" +
	"FAIL\n" +
	"FAIL\texample/calc\t0.01s\n" +
	"FAIL"

// NoteText is the text of the memory item note-1 (written before the tree).
const NoteText = "Add must be commutative | see ADR-3\nRun `go test ./...` before handing over."

// Seqs of notable events (in the logical log of the session named).
const (
	RootRecallSeq     = 4  // Root: researcher's recall, turn 1
	RootValidationSeq = 16 // Root: tests failed
	AcceptedRecallSeq = 11 // Accepted: coder's recall, its turn 2 (turn-3)
	AcceptedTurnSeq   = 10 // Accepted: turn-3 requested
	AcceptedRouteSeq  = 9  // Accepted: decision agent:coder
	AcceptedCloseSeq  = 25 // Accepted: closed succeeded
)

// Tree appends the tree through c and returns the event IDs worth asserting
// on, by name.
func Tree(t testing.TB, c *client.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	emit := func(name, session string, data any, opts ...events.Option) api.Ack {
		t.Helper()
		ack, err := c.Emit(ctx, session, data, opts...)
		if err != nil {
			t.Fatalf("%s: emit %T: %v", session, data, err)
		}
		if name != "" {
			ids[name] = ack.ID
		}
		return ack
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	sandbox := &events.Sandbox{Backend: "local", SandboxID: "local-" + Root}

	start, err := c.Start(ctx, Root, events.SessionStarted{Workflow: "fix-calc", WorkflowHash: "3f2a9c", Task: "make TestAdd pass <calc & co>"})
	if err != nil {
		t.Fatal(err)
	}
	ids["start"] = start.ID
	// Root: research turn (seq 2-7), then the first patch (8-18).
	emit("decide-1", Root, &events.SelectorDecided{Rule: "start", Route: "agent:researcher", Reason: "a new session starts with research",
		Inputs: raw(`{"event.type":"rath.session.started","event.seq":1}`), Candidates: []string{"start"}, Agent: "researcher", TurnID: "turn-1"},
		events.WithCausation(start.ID))
	emit("", Root, &events.TurnRequested{TurnID: "turn-1", Agent: "researcher", Rule: "start"})
	emit("recall-1", Root, &events.MemoryRecalled{Query: "TestAdd fails", Agent: "researcher", TurnID: "turn-1",
		Scopes: []string{"project:calc"}, Items: []events.MemoryItemRef{{ItemID: "note-1", Version: 2, Score: 0.91}}})
	emit("", Root, &events.ChunkAppended{Role: events.RoleAssistant, Agent: "researcher", Content: "Add subtracts; it should add."})
	emit("", Root, &events.ModelCalled{Agent: "researcher", Provider: "scripted", Model: "m1", TokensIn: 100, TokensOut: 10, LatencyMS: 3})
	done1 := emit("", Root, &events.TurnCompleted{TurnID: "turn-1", Agent: "researcher", ToolCalls: 0})
	emit("", Root, &events.SelectorDecided{Rule: "code-after-research", Route: "agent:coder", Reason: "research done",
		Inputs: raw(`{"event.type":"rath.agent.turn.completed","event.data.agent":"researcher"}`), Agent: "coder", TurnID: "turn-2", Router: "triage"},
		events.WithCausation(done1.ID))
	emit("", Root, &events.TurnRequested{TurnID: "turn-2", Agent: "coder", Rule: "code-after-research"})
	emit("", Root, &events.ToolRequested{CallID: "c1", Tool: "write_file", Agent: "coder", Arguments: raw(`{"path":"calc.go","content":"…a * b…"}`)})
	emit("", Root, &events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m1", TokensIn: 200, TokensOut: 20, LatencyMS: 3})
	emit("", Root, &events.TurnCompleted{TurnID: "turn-2", Agent: "coder", ToolCalls: 1})
	emit("", Root, &events.SandboxPlaced{Backend: "local", SandboxID: "local-" + Root, Host: "ci-1", Workspace: "/ws/fix", Commit: "aaaa111", Reason: "first tool call"})
	emit("", Root, &events.ToolStarted{CallID: "c1", Tool: "write_file", Attempt: 1, Sandbox: sandbox})
	emit("", Root, &events.ToolCompleted{CallID: "c1", Tool: "write_file", Attempt: 1, Result: "wrote calc.go", ExitCode: 0, DurationMS: 4,
		Diff: BadDiff, CommitBefore: "aaaa111", CommitAfter: "bbbb222", Sandbox: sandbox})
	failed := emit("validation-failed", Root, &events.ValidationFailed{Validator: "tests", Target: "go test ./...", Reason: FailedOutput,
		Details: raw(`{"exit_code":1,"output":"--- FAIL: TestAdd"}`)})
	emit("memory-written", Root, &events.MemoryWritten{ItemID: "fail-1", Version: 1, Content: "a * b does not fix Add", Scope: "project:calc",
		Provenance: events.Provenance{Session: Root, EventIDs: []string{failed.ID}, Evidence: "failed_attempt"}})
	emit("", Root, &events.SelectorDecided{Rule: "retry", Route: "fork:coder@7", Reason: "validation failed: try again from before the patch"})
	if _, err := c.Fork(ctx, api.ForkRequest{Parent: Root, At: ForkSeq, ID: Accepted, Reason: "retry from before the rejected patch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, api.ForkRequest{Parent: Root, At: ForkSeq, ID: Sibling, Reason: "explore a lint fix"}); err != nil {
		t.Fatal(err)
	}
	emit("", Root, &events.SessionClosed{Outcome: "superseded", Reason: "forked to fix-b at 7"})

	// Sibling: one model call and a passing lint, merged into Accepted.
	emit("", Sibling, &events.ModelCalled{Agent: "explorer", Provider: "scripted", Model: "m2", TokensIn: 50, TokensOut: 5, LatencyMS: 3})
	emit("", Sibling, &events.ValidationPassed{Validator: "lint"})

	// Accepted: the second attempt (seq 8 is the fork).
	emit("decide-coder", Accepted, &events.SelectorDecided{Rule: "retry", Route: "agent:coder", Reason: "validation failed: try again from before the patch",
		Inputs: raw(`{"event.type":"rath.validation.failed","counts.validations_failed":1}`), Candidates: []string{"retry", "give-up"}, Agent: "coder", TurnID: "turn-3"},
		events.WithCausation(failed.ID))
	emit("", Accepted, &events.TurnRequested{TurnID: "turn-3", Agent: "coder", Rule: "retry"})
	emit("recall-3", Accepted, &events.MemoryRecalled{Query: "how not to fix Add", Agent: "coder", TurnID: "turn-3",
		Items: []events.MemoryItemRef{{ItemID: "fail-1", Version: 1, Score: 0.8, Content: "a * b does not fix Add"}, {ItemID: "note-1", Version: 2, Score: 0.5, Content: NoteText}}})
	emit("", Accepted, &events.ToolRequested{CallID: "c2", Tool: "write_file", Agent: "coder", Arguments: raw(`{"path":"calc.go","content":"…a + b…"}`)})
	emit("", Accepted, &events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m1", TokensIn: 300, TokensOut: 30, LatencyMS: 3})
	emit("", Accepted, &events.TurnCompleted{TurnID: "turn-3", Agent: "coder", ToolCalls: 1})
	sandboxB := &events.Sandbox{Backend: "local", SandboxID: "local-" + Accepted}
	emit("", Accepted, &events.SandboxPlaced{Backend: "local", SandboxID: "local-" + Accepted, Host: "ci-1", Workspace: "/ws/fix-b", Commit: "aaaa111", Reason: "fork of fix at commit aaaa111"})
	emit("", Accepted, &events.ToolStarted{CallID: "c2", Tool: "write_file", Attempt: 1, Sandbox: sandboxB})
	emit("c2-done", Accepted, &events.ToolCompleted{CallID: "c2", Tool: "write_file", Attempt: 1, Result: "wrote calc.go", Diff: GoodDiff,
		CommitBefore: "aaaa111", CommitAfter: "cccc333", Sandbox: sandboxB})
	emit("", Accepted, &events.ToolRequested{CallID: "c3", Tool: "run", Agent: "coder", Arguments: raw(`{"cmd":"go test ./..."}`)})
	emit("", Accepted, &events.ToolStarted{CallID: "c3", Tool: "run", Attempt: 1, Sandbox: sandboxB})
	emit("", Accepted, &events.ToolCompleted{CallID: "c3", Tool: "run", Attempt: 1, Result: "ok  \texample/calc\t0.01s", ExitCode: 0,
		CommitBefore: "cccc333", CommitAfter: "cccc333", Sandbox: sandboxB})
	emit("", Accepted, &events.UsageRecorded{Agent: "coder", Model: "embed-1", TokensIn: 7})
	if _, err := c.Merge(ctx, api.MergeRequest{Target: Accepted, Source: Sibling, Reason: "take the lint check"}); err != nil {
		t.Fatal(err)
	}
	emit("validation-passed", Accepted, &events.ValidationPassed{Validator: "tests", Target: "go test ./...", Details: raw(`{"exit_code":0}`)})
	emit("", Accepted, &events.SelectorDecided{Rule: "done", Route: "close:succeeded", Reason: "the tests pass"})
	emit("close", Accepted, &events.SessionClosed{Outcome: "succeeded", Reason: "the tests pass"})
	return ids
}
