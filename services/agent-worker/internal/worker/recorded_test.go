package worker_test

import (
	"encoding/json"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

func TestRecordedAnswersRebuildEachTurn(t *testing.T) {
	ev := func(cause string, seq uint64, data any) events.Stored {
		k, _ := events.KindOf(data)
		raw, _ := json.Marshal(data)
		return events.Stored{ID: events.NewID(), Source: worker.Source, Type: k.Type, Causation: cause, Seq: seq, Data: raw}
	}
	log := []events.Stored{
		ev("r1", 3, &events.ChunkAppended{Role: "assistant", Agent: "coder", Content: "fixing"}),
		ev("r1", 4, &events.ToolRequested{CallID: "c1", Tool: "write_file", Agent: "coder", Arguments: json.RawMessage(`{"path":"a"}`)}),
		ev("r1", 5, &events.ModelCalled{Agent: "coder", Provider: "p", Model: "m", TokensIn: 10, TokensOut: 2, StopReason: "tool_use"}),
		ev("r2", 8, &events.ChunkAppended{Role: "assistant", Agent: "reviewer", Content: "looks good"}),
		ev("r2", 9, &events.ModelCalled{Agent: "reviewer", Provider: "p", Model: "m", TokensIn: 5, TokensOut: 1, StopReason: "end_turn",
			Choice: &events.ScriptChoice{Turn: 2, Alternative: 1, Of: 3, Seed: "t/1"}}),
		ev("r3", 12, &events.ChunkAppended{Role: "assistant", Agent: "coder", Content: "half recorded"}), // no model call: not an answer
	}
	got := worker.RecordedAnswers(log)
	if len(got["coder"]) != 1 || len(got["reviewer"]) != 1 {
		t.Fatalf("answers %+v", got)
	}
	c := got["coder"][0]
	if c.Content != "fixing" || len(c.ToolCalls) != 1 || c.ToolCalls[0].ID != "c1" || c.StopReason != "tool_use" || c.TokensIn != 10 {
		t.Fatalf("coder %+v", c)
	}
	if c.Choice != nil {
		t.Errorf("coder's answer has a choice %+v it never drew", c.Choice)
	}
	if r := got["reviewer"][0].Choice; r == nil || r.Turn != 2 || r.Alternative != 1 || r.Of != 3 || r.Seed != "t/1" {
		t.Errorf("reviewer's recorded draw %+v, want turn 2, alternative 1 of 3, seed t/1", r)
	}
}
