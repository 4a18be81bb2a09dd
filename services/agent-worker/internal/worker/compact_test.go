package worker_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

func TestTranscriptHonoursCompactions(t *testing.T) {
	started := &events.SessionStarted{Task: "fix the build"}
	st := fold(t,
		started, // 1
		chunk(events.RoleUser, "", "old question"),         // 2
		chunk(events.RoleAssistant, "coder", "old answer"), // 3
		toolCall("coder", "c1", "run", `{}`),               // 4
		toolResult("coder", "c1", "old output"),            // 5
		chunk(events.RoleUser, "", "new question"),         // 6
		toolCall("coder", "c2", "run", `{"x":1}`),          // 7
		toolResult("coder", "c2", "new output"),            // 8
		&events.TranscriptCompacted{FromSeq: 2, ToSeq: 5, Summary: "- [seq 2] user: old question", TokensBefore: 40, TokensAfter: 20}, // 9
	)
	got := worker.Transcript(st, "coder")
	want := []provider.Message{
		user("Task: fix the build"),
		user(session.SummaryHeader(st.Compactions[0]) + "\n- [seq 2] user: old question"),
		user("new question"),
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("c2", "run", `{"x":1}`)}},
		{Role: provider.RoleTool, Content: "new output", ToolCallID: "c2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("transcript\n got %+v\nwant %+v", got, want)
	}
	for _, m := range got {
		if m.Role == provider.RoleSystem {
			t.Fatalf("a summary must never be a system message: %+v", m)
		}
	}
	// Earlier states (before the compaction) still show every chunk.
	if len(worker.Transcript(fold(t, started, chunk(events.RoleUser, "", "old question")), "coder")) != 2 {
		t.Fatal("earlier state lost chunks")
	}
	// A later compaction that covers an earlier one replaces it; a kept
	// result whose call was compacted reaches the agent as a user message.
	st2 := fold(t, started, chunk(events.RoleUser, "", "q"), toolCall("coder", "c1", "run", `{}`), toolResult("coder", "c1", "out"),
		&events.TranscriptCompacted{FromSeq: 2, ToSeq: 2, Summary: "first"},
		&events.TranscriptCompacted{FromSeq: 2, ToSeq: 3, Summary: "second"})
	got = worker.Transcript(st2, "coder")
	if len(got) != 3 || !strings.HasSuffix(got[1].Content, "second") || got[2].Role != provider.RoleUser || !strings.Contains(got[2].Content, "out") {
		t.Fatalf("transcript after two compactions: %+v", got)
	}
}

// A workflow's compaction threshold makes the worker compact before the
// model call: the model sees the summary and the kept chunks only, and the
// compaction is an event caused by the turn request.
func TestWorkerCompactsAboveTheThreshold(t *testing.T) {
	r := setup(t, "")
	src, err := os.ReadFile("testdata/coder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, []byte("compaction:\n  max_context_tokens: 300\n  keep_last: 2\n")...)
	if r.wf, err = workflow.Parse(src, "testdata/coder.yaml"); err != nil {
		t.Fatal(err)
	}
	r.ref = testrig.Bundle(t, r.store, r.wf)
	m := answering(provider.Response{Content: "done", StopReason: provider.StopEndTurn, TokensIn: 1, TokensOut: 1})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)

	r.start(t, "big")
	for i := range 6 {
		r.emit(t, "big", &events.ChunkAppended{Role: events.RoleUser, Content: strings.Repeat(string(rune('a'+i)), 400)})
	}
	req := r.request(t, "big", "turn-1", "coder")
	r.end(t, req)

	got := caused(r.log(t, "big"), req)
	if len(got) == 0 || got[0].Type != events.TypeTranscriptCompacted || got[0].ID != events.DerivedID(worker.Durable, req.ID, "compacted") {
		t.Fatalf("events caused by the request: %v", typesOf(got))
	}
	c := decode[events.TranscriptCompacted](t, got[0])
	if c.FromSeq != 2 || c.ToSeq != 5 || c.TokensAfter >= c.TokensBefore || c.TokensBefore <= 300 {
		t.Fatalf("compaction %+v", c)
	}
	msgs := m.requests()[0].Messages
	if len(msgs) != 4 || !strings.HasPrefix(msgs[1].Content, "[summary of the conversation from seq 2 to 5") ||
		msgs[2].Content != strings.Repeat("e", 400) || msgs[3].Content != strings.Repeat("f", 400) {
		var roles []string
		for _, m := range msgs {
			roles = append(roles, string(m.Role)+":"+m.Content[:min(len(m.Content), 40)])
		}
		t.Fatalf("model saw %v", roles)
	}
	st, err := r.c.StateAt(context.Background(), "big", 7)
	if err != nil || len(st.Chunks) != 6 || len(st.Compactions) != 0 {
		t.Fatalf("state before the compaction: %+v %v", st, err)
	}
}
