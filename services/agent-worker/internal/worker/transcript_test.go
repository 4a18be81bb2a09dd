package worker_test

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// fold builds a session state from event data, in order, with the real fold:
// given these events, the transcript is a function of the state alone.
func fold(t *testing.T, data ...any) *session.State {
	t.Helper()
	st := &session.State{}
	for i, d := range data {
		k, ok := events.KindOf(d)
		if !ok {
			t.Fatalf("%T is not an event kind", d)
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		session.Apply(st, events.Stored{ID: "e" + strconv.FormatUint(seq, 10), Type: k.Type, Session: "s", Seq: seq, Data: raw})
	}
	return st
}

func chunk(role, agent, content string) *events.ChunkAppended {
	return &events.ChunkAppended{Role: role, Agent: agent, Content: content}
}

func toolResult(agent, callID, content string) *events.ChunkAppended {
	return &events.ChunkAppended{Role: events.RoleTool, Agent: agent, Content: content, ToolCallID: callID}
}

func toolCall(agent, callID, tool, args string) *events.ToolRequested {
	return &events.ToolRequested{CallID: callID, Tool: tool, Agent: agent, Arguments: json.RawMessage(args)}
}

func call(id, tool, args string) provider.ToolCall {
	return provider.ToolCall{ID: id, Name: tool, Arguments: json.RawMessage(args)}
}

func user(s string) provider.Message { return provider.Message{Role: provider.RoleUser, Content: s} }

func TestTranscript(t *testing.T) {
	started := &events.SessionStarted{Workflow: "wf", Task: "fix the build"}
	task := user("Task: fix the build")
	tests := []struct {
		name  string
		agent string
		given []any
		want  []provider.Message
	}{
		{
			name:  "task only",
			agent: "coder",
			given: []any{started},
			want:  []provider.Message{task},
		},
		{
			name:  "no task, no task message",
			agent: "coder",
			given: []any{&events.SessionStarted{Workflow: "wf"}, chunk(events.RoleUser, "", "hello")},
			want:  []provider.Message{user("hello")},
		},
		{
			name:  "task comes first even when chunks are older",
			agent: "coder",
			// The task opens the conversation wherever the start is folded.
			given: []any{chunk(events.RoleUser, "", "earlier"), started},
			want:  []provider.Message{task, user("earlier")},
		},
		{
			name:  "system and user chunks",
			agent: "coder",
			given: []any{started, chunk(events.RoleSystem, "", "be brief"), chunk(events.RoleUser, "", "please hurry")},
			want: []provider.Message{task,
				{Role: provider.RoleSystem, Content: "be brief"},
				user("please hurry")},
		},
		{
			name:  "own words are assistant messages, other agents' are user messages naming them",
			agent: "coder",
			given: []any{started,
				chunk(events.RoleAssistant, "researcher", "calc.go subtracts"),
				chunk(events.RoleAssistant, "coder", "I will fix it"),
			},
			want: []provider.Message{task,
				user("[researcher] calc.go subtracts"),
				{Role: provider.RoleAssistant, Content: "I will fix it"}},
		},
		{
			name:  "the same log seen by the other agent",
			agent: "researcher",
			given: []any{started,
				chunk(events.RoleAssistant, "researcher", "calc.go subtracts"),
				chunk(events.RoleAssistant, "coder", "I will fix it"),
			},
			want: []provider.Message{task,
				{Role: provider.RoleAssistant, Content: "calc.go subtracts"},
				user("[coder] I will fix it")},
		},
		{
			name:  "tool calls join the preceding assistant message",
			agent: "coder",
			given: []any{started,
				chunk(events.RoleAssistant, "coder", "running the tests"),
				toolCall("coder", "c1", "run", `{"cmd":"go test"}`),
				toolCall("coder", "c2", "read_file", `{"path":"calc.go"}`),
			},
			want: []provider.Message{task,
				{Role: provider.RoleAssistant, Content: "running the tests", ToolCalls: []provider.ToolCall{
					call("c1", "run", `{"cmd":"go test"}`), call("c2", "read_file", `{"path":"calc.go"}`)}}},
		},
		{
			name:  "a tool call with no assistant message before it gets one",
			agent: "coder",
			given: []any{started, toolCall("coder", "c1", "run", `{}`)},
			want: []provider.Message{task,
				{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("c1", "run", `{}`)}}},
		},
		{
			name:  "a tool call after another agent's words gets its own assistant message",
			agent: "coder",
			given: []any{started,
				chunk(events.RoleAssistant, "coder", "looking"),
				chunk(events.RoleAssistant, "researcher", "try calc.go"),
				toolCall("coder", "c1", "read_file", `{"path":"calc.go"}`),
			},
			want: []provider.Message{task,
				{Role: provider.RoleAssistant, Content: "looking"},
				user("[researcher] try calc.go"),
				{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("c1", "read_file", `{"path":"calc.go"}`)}}},
		},
		{
			name:  "own tool results are tool messages, in log order",
			agent: "coder",
			given: []any{started,
				chunk(events.RoleAssistant, "coder", "running"),
				toolCall("coder", "c1", "run", `{}`),
				&events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 1},
				&events.ToolCompleted{CallID: "c1", Tool: "run"},
				toolResult("coder", "c1", "FAIL"),
				toolCall("coder", "c2", "run", `{}`),
				toolResult("coder", "c2", "ok"),
			},
			want: []provider.Message{task,
				{Role: provider.RoleAssistant, Content: "running", ToolCalls: []provider.ToolCall{call("c1", "run", `{}`)}},
				{Role: provider.RoleTool, Content: "FAIL", ToolCallID: "c1"},
				{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("c2", "run", `{}`)}},
				{Role: provider.RoleTool, Content: "ok", ToolCallID: "c2"}},
		},
		{
			name:  "other agents' tool calls are not shown, their results are user messages",
			agent: "coder",
			given: []any{started,
				chunk(events.RoleAssistant, "researcher", "reading"),
				toolCall("researcher", "r1", "read_file", `{"path":"calc.go"}`),
				toolResult("researcher", "r1", "func Add"),
			},
			want: []provider.Message{task,
				user("[researcher] reading"),
				user("[tool result for researcher] func Add")},
		},
		{
			name:  "a tool result for an unknown call is a user message",
			agent: "coder",
			given: []any{started, toolResult("coder", "ghost", "out")},
			want:  []provider.Message{task, user("[tool result for coder] out")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := worker.Transcript(fold(t, tt.given...), tt.agent)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("transcript for %s:\n got %s\nwant %s", tt.agent, dump(got), dump(tt.want))
			}
		})
	}
}

// Transcript reads the state; it must not change it (the worker folds once
// and builds requests from the same state).
func TestTranscriptLeavesTheStateAlone(t *testing.T) {
	st := fold(t, &events.SessionStarted{Task: "t"}, chunk(events.RoleAssistant, "coder", "a"),
		toolCall("coder", "c1", "run", `{}`), toolResult("coder", "c1", "ok"))
	before, _ := json.Marshal(st)
	worker.Transcript(st, "coder")
	worker.Transcript(st, "researcher")
	if after, _ := json.Marshal(st); string(after) != string(before) {
		t.Fatalf("state changed:\n got %s\nwant %s", after, before)
	}
}

func dump(msgs []provider.Message) string {
	b, _ := json.MarshalIndent(msgs, "", "  ")
	return string(b)
}

// An agent's recalls are user messages at their place in the log, each item
// marked as recalled memory; other agents' recalls and empty recalls are not
// in its context.
func TestTranscriptRecalledMemory(t *testing.T) {
	st := fold(t,
		&events.SessionStarted{Task: "fix slugs"},
		&events.MemoryRecalled{Query: "fix slugs", Agent: "coder", TurnID: "turn-1", Items: []events.MemoryItemRef{
			{ItemID: "mem-a", Version: 2, Score: 1.5, Content: "Failure pattern: capitals kept"},
			{ItemID: "mem-b", Version: 1, Score: 0.25, Content: "slugs use dashes"},
		}},
		&events.MemoryRecalled{Query: "fix slugs", Agent: "researcher", TurnID: "turn-0", Items: []events.MemoryItemRef{
			{ItemID: "mem-c", Version: 1, Score: 1, Content: "not for the coder"},
		}},
		&events.MemoryRecalled{Query: "nothing", Agent: "coder", TurnID: "turn-2"},
		chunk(events.RoleAssistant, "coder", "writing the full fix"),
	)
	want := []provider.Message{
		user("Task: fix slugs"),
		user("[recalled memory] mem-a v2 (score 1.50): Failure pattern: capitals kept\n" +
			"[recalled memory] mem-b v1 (score 0.25): slugs use dashes"),
		{Role: provider.RoleAssistant, Content: "writing the full fix"},
	}
	if got := worker.Transcript(st, "coder"); !reflect.DeepEqual(got, want) {
		t.Fatalf("transcript:\n got %s\nwant %s", dump(got), dump(want))
	}
}

// Events a merge takes in keep their source's sequences, so items of
// different sessions can share one; their order is fixed, not map order.
func TestTranscriptOrdersItemsOfOneSequence(t *testing.T) {
	st := fold(t, &events.SessionStarted{Task: "t"}, chunk(events.RoleAssistant, "coder", "mine"))
	merged := func(from string, seq uint64, d any) {
		k, _ := events.KindOf(d)
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		session.ApplyMerged(st, events.Stored{ID: from + strconv.FormatUint(seq, 10), Type: k.Type, Session: from, Seq: seq, Data: raw})
	}
	// Two merges took in events 2 of sessions o and p: "mine" is 2 as well.
	merged("o", 2, toolCall("coder", "z", "run", `{}`))
	merged("p", 2, toolCall("coder", "a", "run", `{}`))
	merged("p", 3, chunk(events.RoleUser, "", "from p"))
	want := []provider.Message{user("Task: t"),
		{Role: provider.RoleAssistant, Content: "mine", ToolCalls: []provider.ToolCall{call("a", "run", `{}`), call("z", "run", `{}`)}},
		user("from p")}
	for range 20 { // map order would differ from run to run
		if got := worker.Transcript(st, "coder"); !reflect.DeepEqual(got, want) {
			t.Fatalf("transcript:\n got %s\nwant %s", dump(got), dump(want))
		}
	}
}
