package worker

import (
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// RecordedAnswers rebuilds, from a session's log, every model answer the
// agent worker recorded, by agent and in order: the text, the tool calls,
// the usage and the stop reason of each turn's model call. Fed to
// provider.FromRecorded, they let a re-execution of the session get the
// model's original answers instead of new ones.
func RecordedAnswers(log []events.Stored) map[string][]provider.Response {
	type answer struct {
		agent string
		resp  provider.Response
		done  bool
	}
	byTurn := map[string]*answer{} // by the turn request's event ID
	var order []string
	for _, ev := range log {
		if ev.Source != Source || ev.Causation == "" {
			continue
		}
		d, err := ev.Decode()
		if err != nil {
			continue
		}
		a := byTurn[ev.Causation]
		if a == nil {
			a = &answer{}
			byTurn[ev.Causation] = a
			order = append(order, ev.Causation)
		}
		switch d := d.(type) {
		case *events.ChunkAppended:
			a.agent, a.resp.Content = d.Agent, d.Content
		case *events.ToolRequested:
			a.agent = d.Agent
			a.resp.ToolCalls = append(a.resp.ToolCalls, provider.ToolCall{ID: d.CallID, Name: d.Tool, Arguments: d.Arguments})
		case *events.ModelCalled:
			a.agent, a.done = d.Agent, true
			a.resp.StopReason, a.resp.TokensIn, a.resp.TokensOut, a.resp.Model = d.StopReason, d.TokensIn, d.TokensOut, d.Model
			if c := d.Choice; c != nil {
				a.resp.Choice = &provider.Choice{Turn: c.Turn, Alternative: c.Alternative, Of: c.Of, Seed: c.Seed}
			}
		}
	}
	out := map[string][]provider.Response{}
	for _, id := range order {
		if a := byTurn[id]; a.done {
			out[a.agent] = append(out[a.agent], a.resp)
		}
	}
	return out
}
