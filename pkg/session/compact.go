package session

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/openrath/rath/pkg/events"
)

// Compaction is the transient tier of a session's state: the transcript the
// model sees. Chunks never leave State.Chunks (the durable tier keeps every
// fact: decisions, pending work, tool evidence, memory, validations); a
// compaction only says that, in the model's context, the chunks of its range
// are replaced by its summary.

// EstimateTokens approximates how many model tokens a text costs: one per
// four bytes, rounded up. It is deliberately provider independent, so a
// threshold decision is the same on every worker and in every replay.
func EstimateTokens(s string) int64 { return int64(len(s)+3) / 4 }

// ActiveCompactions returns the compactions in force, in log order: a later
// compaction replaces every earlier one whose range overlaps its own (the
// planner starts a new compaction at or before the ranges it takes over, so
// nothing earlier is uncovered by that).
func (s *State) ActiveCompactions() []Compaction {
	var out []Compaction
	for _, c := range s.Compactions {
		kept := out[:0]
		for _, o := range out {
			if o.ToSeq < c.FromSeq || o.FromSeq > c.ToSeq {
				kept = append(kept, o)
			}
		}
		out = append(kept, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FromSeq < out[j].FromSeq })
	return out
}

// CompactedBy returns the compaction in force whose range holds seq.
func CompactedBy(active []Compaction, seq uint64) (Compaction, bool) {
	for _, c := range active {
		if seq >= c.FromSeq && seq <= c.ToSeq {
			return c, true
		}
	}
	return Compaction{}, false
}

// SummaryHeader opens the text of a summary in the model's context, so that
// a model (and a reader of a request body) can tell it from a message.
func SummaryHeader(c Compaction) string {
	return fmt.Sprintf("[summary of the conversation from seq %d to %d, compacted at seq %d]", c.FromSeq, c.ToSeq, c.Seq)
}

// ContextTokens estimates the tokens of the context a model sees of s: the
// task, every chunk not compacted, every summary in force and the arguments
// of tool calls not compacted. Tool calls are counted once, for all agents.
func ContextTokens(s *State) int64 {
	active := s.ActiveCompactions()
	n := EstimateTokens(s.Task)
	for _, c := range active {
		n += EstimateTokens(SummaryHeader(c)) + EstimateTokens(c.Summary)
	}
	for _, ch := range s.Chunks {
		if _, ok := CompactedBy(active, ch.Seq); !ok {
			n += EstimateTokens(ch.Content)
		}
	}
	for _, t := range s.Tools {
		if len(t.Seqs) == 0 {
			continue
		}
		if _, ok := CompactedBy(active, t.Seqs[0]); !ok {
			n += EstimateTokens(t.Tool) + EstimateTokens(string(t.Arguments))
		}
	}
	return n
}

// summaryLine bounds one chunk's line in an extractive summary.
const summaryLine = 100

// PlanCompaction proposes the compaction of everything in the transcript but
// its last keepLast chunks. The summary is extractive and deterministic: the
// summaries it takes over, one clipped line per chunk it summarises, and the
// durable facts of the state (pending work, validations, tool evidence) so a
// model that sees only the summary still knows them. The boundary never
// separates a kept tool result from its request. It reports false when there
// is nothing new to compact.
func PlanCompaction(s *State, keepLast int) (events.TranscriptCompacted, bool) {
	keepLast = max(keepLast, 0)
	chunks := slices.Clone(s.Chunks)
	sort.SliceStable(chunks, func(i, j int) bool { return chunks[i].Seq < chunks[j].Seq })
	b := len(chunks) - keepLast
	// A kept tool result must keep its request (seq before it): move the
	// boundary back over tool results.
	for b > 0 && b < len(chunks) && chunks[b].Role == events.RoleTool {
		b--
	}
	if b <= 0 {
		return events.TranscriptCompacted{}, false
	}
	active := s.ActiveCompactions()
	from, to := chunks[0].Seq, chunks[b-1].Seq
	for _, c := range active {
		if c.FromSeq <= to {
			from = min(from, c.FromSeq)
		}
	}
	type line struct {
		seq  uint64
		text string
	}
	var parts []line
	for _, c := range active {
		if c.FromSeq >= from && c.ToSeq <= to {
			// The facts are listed anew below, as of now.
			text, _, _ := strings.Cut(c.Summary, "\n"+factsHeader)
			parts = append(parts, line{c.FromSeq, text})
		}
	}
	fresh := 0
	for _, ch := range chunks[:b] {
		if ch.Seq < from || ch.Seq > to {
			continue
		}
		if _, ok := CompactedBy(active, ch.Seq); ok {
			continue
		}
		fresh++
		parts = append(parts, line{ch.Seq, "- " + chunkLine(ch)})
	}
	if fresh == 0 {
		return events.TranscriptCompacted{}, false
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].seq < parts[j].seq })
	lines := make([]string, 0, len(parts)+4)
	for _, p := range parts {
		lines = append(lines, p.text)
	}
	lines = append(lines, durableFacts(s, from, to)...)
	summary := strings.Join(lines, "\n")
	before := ContextTokens(s)
	after := s.Clone()
	after.Compactions = append(after.Compactions, Compaction{Seq: s.Seq + 1, FromSeq: from, ToSeq: to, Summary: summary})
	tokensAfter := ContextTokens(after)
	if tokensAfter >= before {
		return events.TranscriptCompacted{}, false // the chunks are shorter than their summary
	}
	return events.TranscriptCompacted{FromSeq: from, ToSeq: to, Summary: summary, TokensBefore: before, TokensAfter: tokensAfter}, true
}

func chunkLine(ch Chunk) string {
	who := ch.Role
	switch {
	case ch.Role == events.RoleTool && ch.ToolCallID != "":
		who = "tool result " + ch.ToolCallID
		if ch.Agent != "" {
			who += " for " + ch.Agent
		}
	case ch.Agent != "":
		who = ch.Role + " " + ch.Agent
	}
	return fmt.Sprintf("[seq %d] %s: %s", ch.Seq, who, clip(strings.Join(strings.Fields(ch.Content), " "), summaryLine))
}

// factsHeader opens the durable facts part of a summary.
const factsHeader = "Durable facts:"

// durableFacts lists what the state holds for good about the summarised
// range: the tool calls requested in it with their outcome, and the session's
// open pending work and validations so far.
func durableFacts(s *State, from, to uint64) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(s.Tools)) {
		t := s.Tools[id]
		if len(t.Seqs) == 0 || t.Seqs[0] < from || t.Seqs[0] > to {
			continue
		}
		line := fmt.Sprintf("- tool %s %s by %s: %s", t.CallID, t.Tool, orDash(t.Agent), t.Status)
		if t.Status == ToolCompleted || t.Status == ToolFailed {
			line += fmt.Sprintf(" (exit %d)", t.ExitCode)
		}
		if t.Error != "" {
			line += ": " + clip(t.Error, summaryLine)
		}
		out = append(out, line)
	}
	for _, id := range slices.Sorted(maps.Keys(s.Pending)) {
		w := s.Pending[id]
		out = append(out, fmt.Sprintf("- pending work %s (%s): %s", id, w.Kind, clip(w.Description, summaryLine)))
	}
	for _, v := range s.Validations {
		if v.Seq < from || v.Seq > to {
			continue
		}
		outcome := "passed"
		if !v.Passed {
			outcome = "failed: " + clip(v.Reason, summaryLine)
		}
		out = append(out, fmt.Sprintf("- validation %s %s", v.Validator, outcome))
	}
	if len(out) > 0 {
		out = append([]string{factsHeader}, out...)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
