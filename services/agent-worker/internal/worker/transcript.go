package worker

import (
	"sort"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// Ranks order the items of one sequence in a transcript.
const (
	rankSummary = iota
	rankChunk
	rankTool
	rankRecall
)

// Transcript builds the conversation an agent sees from the folded session
// state: the task, then every chunk and tool call in log order. The agent's
// own words and tool calls are its assistant messages and their results its
// tool messages; other agents' words and tool results reach it as user
// messages naming their author.
//
// Compactions in force (session.State.ActiveCompactions) replace the chunks
// and tool calls of their range by one user message holding the summary,
// marked as such (session.SummaryHeader), at the place of the range: a
// summary is context, never a system instruction. A kept tool result whose
// request was compacted reaches the agent as a user message, since a tool
// message must answer a call the model can see.
//
// The agent's own recalls (rath.memory.recalled of its turns) are user
// messages at their place in the log, each item marked "[recalled memory]"
// with its ID, version, score and the content the event recorded: recalled
// memory is context, never a system instruction.
//
// Items of one sequence (only events a merge takes in share a sequence with
// others) come in a fixed order: a summary, chunks in fold order, the
// agent's tool calls by call ID, recalls in fold order.
func Transcript(st *session.State, agent string) []provider.Message {
	type item struct {
		seq     uint64
		rank    int // at one sequence: summary, chunk, tool call, recall
		chunk   *session.Chunk
		tool    *session.Tool
		summary *session.Compaction
		recall  *session.MemoryEvent
	}
	active := st.ActiveCompactions()
	compacted := func(seq uint64) bool {
		_, ok := session.CompactedBy(active, seq)
		return ok
	}
	items := make([]item, 0, len(st.Chunks)+len(st.Tools)+len(active))
	for i := range active {
		items = append(items, item{seq: active[i].FromSeq, rank: rankSummary, summary: &active[i]})
	}
	for i := range st.Chunks {
		if !compacted(st.Chunks[i].Seq) {
			items = append(items, item{seq: st.Chunks[i].Seq, rank: rankChunk, chunk: &st.Chunks[i]})
		}
	}
	for _, t := range st.Tools {
		if t.Agent == agent && len(t.Seqs) > 0 && !compacted(t.Seqs[0]) {
			items = append(items, item{seq: t.Seqs[0], rank: rankTool, tool: t})
		}
	}
	for i := range st.Memory {
		if m := &st.Memory[i]; m.Kind == "recalled" && m.Agent == agent && len(m.Items) > 0 && !compacted(m.Seq) {
			items = append(items, item{seq: m.Seq, rank: rankRecall, recall: m})
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.seq != b.seq {
			return a.seq < b.seq
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.rank == rankTool && a.tool.CallID < b.tool.CallID
	})

	var msgs []provider.Message
	if st.Task != "" {
		msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: "Task: " + st.Task})
	}
	for _, it := range items {
		if it.recall != nil {
			msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: recalledMessage(*it.recall)})
			continue
		}
		if it.summary != nil {
			msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: session.SummaryHeader(*it.summary) + "\n" + it.summary.Summary})
			continue
		}
		if it.tool != nil {
			call := provider.ToolCall{ID: it.tool.CallID, Name: it.tool.Tool, Arguments: it.tool.Arguments}
			if n := len(msgs); n > 0 && msgs[n-1].Role == provider.RoleAssistant {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			} else {
				msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call}})
			}
			continue
		}
		c := it.chunk
		switch c.Role {
		case events.RoleSystem:
			msgs = append(msgs, provider.Message{Role: provider.RoleSystem, Content: c.Content})
		case events.RoleUser:
			msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: c.Content})
		case events.RoleAssistant:
			if c.Agent == agent {
				msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, Content: c.Content})
			} else {
				msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: "[" + c.Agent + "] " + c.Content})
			}
		case events.RoleTool:
			if t := st.Tools[c.ToolCallID]; t != nil && t.Agent == agent && len(t.Seqs) > 0 && !compacted(t.Seqs[0]) {
				msgs = append(msgs, provider.Message{Role: provider.RoleTool, Content: c.Content, ToolCallID: c.ToolCallID})
			} else {
				msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: "[tool result for " + c.Agent + "] " + c.Content})
			}
		}
	}
	return msgs
}
