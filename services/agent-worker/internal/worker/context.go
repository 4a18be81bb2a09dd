package worker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/openrath/rath/internal/lru"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// DefaultContextBytes bounds the contexts a Contexts keeps when it is given 0.
const DefaultContextBytes = 64 << 20

// Contexts keeps, for each session and agent, the messages of the model's
// context built so far and what of the session's state they cover, so that
// a turn costs the events since the agent's last turn, not the session
// (ADR 0018). The messages are those of Transcript with tool calls named as
// models are offered them (wireNames): Messages(id, st, agent) equals
// wireNames(Transcript(st, agent)) for every state, and the equivalence
// tests check it event by event.
//
// A state that does not continue what an entry covers (a lower sequence,
// another task, a merge, compactions that are not an extension of those
// seen, chunks or memory that differ) is built from scratch. A compaction
// that comes into force, or one it supersedes, rebuilds the messages from
// the first place it changes; so does a tool call whose request arrives
// after a result or another event of it was placed. Entries are dropped
// least recently used first beyond a bound in approximate bytes; a dropped
// entry is built from scratch on its next use. It is safe for concurrent
// use; calls for one session and agent are serialised.
type Contexts struct {
	entries *lru.Sized[contextKey, *agentContext]

	builds, splices, appends atomic.Int64
}

// ContextStats counts what a Contexts did since it was made.
type ContextStats struct {
	// Entries and Bytes are what it holds now.
	Entries int
	Bytes   int64
	// Builds counts contexts built from scratch (a first turn, a dropped
	// entry, a state that does not continue the entry's), Splices those
	// rebuilt from a place in the middle (compactions, a late tool
	// request) and Appends those that only took the messages of new events.
	Builds, Splices, Appends int64
}

// NewContexts returns contexts bounded to about maxBytes (0:
// DefaultContextBytes).
func NewContexts(maxBytes int64) *Contexts {
	if maxBytes <= 0 {
		maxBytes = DefaultContextBytes
	}
	return &Contexts{entries: lru.New[contextKey, *agentContext](maxBytes)}
}

// Stats returns the counters.
func (c *Contexts) Stats() ContextStats {
	return ContextStats{Entries: c.entries.Len(), Bytes: c.entries.Bytes(),
		Builds: c.builds.Load(), Splices: c.splices.Load(), Appends: c.appends.Load()}
}

// Messages returns the model's context of agent in session id at state st:
// wireNames(Transcript(st, agent)). The slice and what it refers to are the
// caller's to read and never change afterwards; the caller must not change
// them either. st is only read; the entry keeps a reference to its
// compactions, which Apply never changes in place (ADR 0016).
func (c *Contexts) Messages(id string, st *session.State, agent string) []provider.Message {
	slot, ok := c.entries.Lookup(contextKey{session: id, agent: agent})
	if !ok {
		// A new entry keys on copies: a session ID taken from a parsed
		// event is a substring of the message it came in
		// (events.ParseStored), which the entry would keep alive.
		slot = c.entries.Get(contextKey{session: strings.Clone(id), agent: strings.Clone(agent)}, newAgentContext)
	}
	e := slot.Value
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.update(st) {
	case changeBuild:
		c.builds.Add(1)
	case changeSplice:
		c.splices.Add(1)
	case changeAppend:
		c.appends.Add(1)
	}
	msgs := e.msgs[:len(e.msgs):len(e.msgs)]
	e.handed = len(e.msgs)
	// The least recently used contexts beyond the bound are dropped, never
	// this one; one dropped while in use is its holder's until it is done.
	c.entries.Account(slot, e.size())
	return msgs
}

func newAgentContext(k contextKey) *agentContext { return &agentContext{key: k} }

type contextKey struct{ session, agent string }

// agentContext is one agent's context in one session: the messages built from
// the state up to seq, with what the next update needs to tell the new
// from the known.
//
// Invariants: msgs is wireNames(Transcript(st, agent)) for the state st
// last given; spans[i] holds the sequences of the first and last item of
// msgs[i] (items are placed in order, so spans never decrease); msgs[:handed]
// were returned to a caller and are never written again (a write below
// handed copies the slice first).
type agentContext struct {
	key contextKey
	mu  sync.Mutex // serialises the session and agent's turns

	// What of the state the messages cover: the state's sequence and what
	// a later state of the same history can only have more of.
	built               bool
	id, task            string
	seq                 uint64
	chunks, memory      int    // len(st.Chunks), len(st.Memory)
	lastChunk, lastMem  uint64 // the sequences of their last elements
	toolCalls, tools    int    // st.Counts.ToolCalls, len(st.Tools)
	merged              int    // st.Counts.Merged
	compactions, active []session.Compaction

	// The messages, and where their items came from.
	msgs     []provider.Message
	spans    []span
	base     int                   // 1 when msgs[0] is the task, which no splice drops
	handed   int                   // msgs[:handed] are a caller's
	last     uint64                // the sequence of the last item placed
	calls    map[string]placedCall // the agent's tool calls placed, by call ID
	results  map[string]uint64     // tool results placed, by call ID: the first one's sequence
	msgBytes int64
	scratch  []item // reused between updates; holds nothing between them

}

// span is the sequences of a message's first and last item.
type span struct{ first, last uint64 }

// placedCall is a tool call as placed, to tell when a later request of the
// same call changes it.
type placedCall struct {
	seq  uint64
	tool string
	args json.RawMessage
}

// item is one thing of the state that makes a message or joins one.
type item struct {
	seq     uint64
	rank    int
	chunk   *session.Chunk
	tool    *session.Tool
	summary *session.Compaction
	recall  *session.MemoryEvent
}

// compareItems orders items as Transcript does: by sequence, then rank,
// tool calls by call ID.
func compareItems(a, b item) int {
	if c := cmp.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rank, b.rank); c != 0 || a.rank != rankTool {
		return c
	}
	return strings.Compare(a.tool.CallID, b.tool.CallID)
}

// change says what an update did.
type change int

const (
	changeNone change = iota
	changeAppend
	changeSplice
	changeBuild
)

// size approximates the bytes the entry holds: its messages and its indexes.
func (e *agentContext) size() int64 {
	return e.msgBytes + int64(cap(e.scratch))*56 + int64(len(e.spans))*16 + int64(len(e.calls)+len(e.results))*64 + int64(len(e.compactions)+len(e.active))*64
}

// update brings the messages up to st. What is new since the state covered
// is found without walking the session: chunks and memory past the lengths
// covered, and tool calls with events past the sequence covered (looked for
// only when a call was requested or a new one appeared). New items after the
// last one placed are appended. Anything that changes what was placed (a
// compaction in force, or one no longer in force; a call that becomes the
// agent's, stops being it or is requested again with other arguments; an
// item that sorts before the last placed, which only merged events do)
// gives a cut: the messages from the one holding the cut on are placed
// again from the state.
func (e *agentContext) update(st *session.State) change {
	if !e.continues(st) {
		e.build(st)
		return changeBuild
	}
	cut := uint64(noCut)
	// Compactions: the first place where the ones in force differ.
	if len(st.Compactions) > len(e.compactions) {
		active := st.ActiveCompactions()
		if p, ok := firstDifference(e.active, active); ok {
			cut = min(cut, p)
			// A result placed before p answers a call at or after p: whether
			// the call is compacted, so whether the result is a tool message,
			// may have changed.
			for id, r := range e.results {
				if r < cut {
					if t := st.Tools[id]; t != nil && len(t.Seqs) > 0 && t.Seqs[0] >= p {
						cut = r
					}
				}
			}
		}
		e.active = active
	}
	// New items, and places where tool calls changed.
	fresh := e.scratch[:0]
	for i := e.chunks; i < len(st.Chunks); i++ {
		if c := &st.Chunks[i]; !e.compacted(c.Seq) {
			fresh = append(fresh, item{seq: c.Seq, rank: rankChunk, chunk: c})
		}
	}
	if st.Counts.ToolCalls != e.toolCalls || len(st.Tools) != e.tools {
		for id, t := range st.Tools {
			if len(t.Seqs) == 0 {
				continue
			}
			first := t.Seqs[0]
			if first <= e.seq && t.Seqs[len(t.Seqs)-1] <= e.seq {
				continue // no event since: as placed
			}
			// A new call, or a known one with new events, of which a late
			// request (one after its start, or a second one) changes it.
			placed, was := e.calls[id]
			mine := e.mine(t)
			switch {
			case mine && !was:
				fresh = append(fresh, item{seq: first, rank: rankTool, tool: t})
			case mine != was, mine && (placed.tool != t.Tool || !bytes.Equal(placed.args, t.Arguments)):
				cut = min(cut, first)
			}
			if r, ok := e.results[id]; ok && mine != was {
				cut = min(cut, r) // its results become tool messages, or stop being ones
			}
		}
	}
	for i := e.memory; i < len(st.Memory); i++ {
		if m := &st.Memory[i]; e.ownRecall(m) {
			fresh = append(fresh, item{seq: m.Seq, rank: rankRecall, recall: m})
		}
	}
	slices.SortStableFunc(fresh, compareItems)
	if len(fresh) > 0 && fresh[0].seq <= e.last {
		cut = min(cut, fresh[0].seq) // not after everything placed (merged items)
	}
	what := changeNone
	switch {
	case cut != noCut:
		if len(fresh) > 0 {
			cut = min(cut, fresh[0].seq) // the splice places them too
		}
		clear(fresh)
		e.scratch = fresh[:0]
		e.splice(st, cut)
		what = changeSplice
	case len(fresh) > 0:
		for _, it := range fresh {
			e.place(st, it)
		}
		clear(fresh)
		e.scratch = fresh[:0]
		what = changeAppend
	}
	e.cover(st)
	return what
}

// noCut is a cut after everything.
const noCut = ^uint64(0)

// continues reports whether st is a later state of what the entry covers,
// or the same: the same session from the same history, only longer.
func (e *agentContext) continues(st *session.State) bool {
	switch {
	case !e.built, st.ID != e.id, st.Seq < e.seq, st.Task != e.task, st.Counts.Merged != e.merged,
		len(st.Chunks) < e.chunks, len(st.Memory) < e.memory, len(st.Compactions) < len(e.compactions),
		st.Counts.ToolCalls < e.toolCalls, len(st.Tools) < e.tools:
		return false
	case e.chunks > 0 && st.Chunks[e.chunks-1].Seq != e.lastChunk, e.memory > 0 && st.Memory[e.memory-1].Seq != e.lastMem:
		return false
	}
	for i := range e.compactions {
		if st.Compactions[i] != e.compactions[i] {
			return false // compact's state named one the log does not hold
		}
	}
	return true
}

// cover records what of st the messages now cover.
func (e *agentContext) cover(st *session.State) {
	e.built, e.id, e.seq, e.task, e.merged = true, st.ID, st.Seq, st.Task, st.Counts.Merged
	e.chunks, e.memory = len(st.Chunks), len(st.Memory)
	e.lastChunk, e.lastMem = 0, 0
	if e.chunks > 0 {
		e.lastChunk = st.Chunks[e.chunks-1].Seq
	}
	if e.memory > 0 {
		e.lastMem = st.Memory[e.memory-1].Seq
	}
	e.toolCalls, e.tools = st.Counts.ToolCalls, len(st.Tools)
	// Apply only appends to Compactions and never changes an element: the
	// prefix seen stays valid in the caller's state.
	e.compactions = slices.Clip(st.Compactions)
}

// build builds the messages from scratch.
func (e *agentContext) build(st *session.State) {
	if e.handed > 0 {
		e.msgs, e.handed = nil, 0 // the caller's; start a new slice
	}
	e.msgs, e.spans, e.msgBytes, e.base, e.last = e.msgs[:0], e.spans[:0], 0, 0, 0
	if e.calls == nil {
		e.calls, e.results = map[string]placedCall{}, map[string]uint64{}
	}
	clear(e.calls)
	clear(e.results)
	e.active = st.ActiveCompactions()
	if n := len(st.Chunks) + len(st.Tools) + len(st.Memory) + len(e.active) + 1; cap(e.msgs) < n {
		e.msgs = make([]provider.Message, 0, n+n/4+16) // and room for the next turns
	}
	if st.Task != "" {
		e.add(provider.Message{Role: provider.RoleUser, Content: "Task: " + st.Task}, span{})
		e.base = 1
	}
	e.placeFrom(st, 0)
	e.cover(st)
}

// splice drops the messages holding items at or after cut and places the
// items from there again. A message is dropped whole: the one it starts
// from is the first item placed again.
func (e *agentContext) splice(st *session.State, cut uint64) {
	k, from := len(e.msgs), cut
	for k > e.base && e.spans[k-1].last >= from {
		k--
		from = min(from, e.spans[k].first)
	}
	if k < e.handed {
		e.unshare()
	}
	for _, m := range e.msgs[k:] {
		e.msgBytes -= messageBytes(m)
	}
	clear(e.msgs[k:])
	e.msgs, e.spans = e.msgs[:k], e.spans[:k]
	for id, c := range e.calls {
		if c.seq >= from {
			delete(e.calls, id)
		}
	}
	for id, r := range e.results {
		if r >= from {
			delete(e.results, id)
		}
	}
	e.last = 0
	if k > e.base {
		e.last = e.spans[k-1].last
	}
	e.placeFrom(st, from)
}

// placeFrom places every item of st at or after sequence from, in order:
// the chunks as they are in st (in sequence order unless a merge took in
// events of higher sequences) merged with the few others, sorted.
func (e *agentContext) placeFrom(st *session.State, from uint64) {
	others := e.scratch[:0]
	for i := range e.active {
		if c := &e.active[i]; c.FromSeq >= from {
			others = append(others, item{seq: c.FromSeq, rank: rankSummary, summary: c})
		}
	}
	for _, t := range st.Tools {
		if len(t.Seqs) > 0 && t.Seqs[0] >= from && e.mine(t) {
			others = append(others, item{seq: t.Seqs[0], rank: rankTool, tool: t})
		}
	}
	for i := range st.Memory {
		if m := &st.Memory[i]; m.Seq >= from && e.ownRecall(m) {
			others = append(others, item{seq: m.Seq, rank: rankRecall, recall: m})
		}
	}
	chunks := st.Chunks
	bySeq := func(a, b session.Chunk) int { return cmp.Compare(a.Seq, b.Seq) }
	if st.Counts.Merged == 0 || slices.IsSortedFunc(chunks, bySeq) {
		chunks = chunks[sort.Search(len(chunks), func(i int) bool { return chunks[i].Seq >= from }):]
	} else {
		for i := range chunks {
			if chunks[i].Seq >= from && !e.compacted(chunks[i].Seq) {
				others = append(others, item{seq: chunks[i].Seq, rank: rankChunk, chunk: &chunks[i]})
			}
		}
		chunks = nil
	}
	slices.SortStableFunc(others, compareItems)
	all := others
	for len(chunks) > 0 || len(others) > 0 {
		if len(others) > 0 && (len(chunks) == 0 || compareItems(others[0], item{seq: chunks[0].Seq, rank: rankChunk}) < 0) {
			e.place(st, others[0])
			others = others[1:]
			continue
		}
		if c := &chunks[0]; !e.compacted(c.Seq) {
			e.place(st, item{seq: c.Seq, rank: rankChunk, chunk: c})
		}
		chunks = chunks[1:]
	}
	clear(all) // hold no state
	e.scratch = all[:0]
}

// compacted reports whether a compaction in force holds seq.
func (e *agentContext) compacted(seq uint64) bool {
	_, ok := session.CompactedBy(e.active, seq)
	return ok
}

// mine reports whether t is a call of the entry's agent that the model
// sees: its own, and not compacted.
func (e *agentContext) mine(t *session.Tool) bool {
	return t != nil && t.Agent == e.key.agent && len(t.Seqs) > 0 && !e.compacted(t.Seqs[0])
}

func (e *agentContext) ownRecall(m *session.MemoryEvent) bool {
	return m.Kind == "recalled" && m.Agent == e.key.agent && len(m.Items) > 0 && !e.compacted(m.Seq)
}

// place renders one item after the messages placed, as Transcript does.
func (e *agentContext) place(st *session.State, it item) {
	at := span{it.seq, it.seq}
	switch {
	case it.recall != nil:
		e.add(provider.Message{Role: provider.RoleUser, Content: recalledMessage(*it.recall)}, at)
	case it.summary != nil:
		e.add(provider.Message{Role: provider.RoleUser, Content: session.SummaryHeader(*it.summary) + "\n" + it.summary.Summary}, at)
	case it.tool != nil:
		t := it.tool
		e.calls[t.CallID] = placedCall{seq: it.seq, tool: t.Tool, args: t.Arguments}
		call := provider.ToolCall{ID: t.CallID, Name: wireName(t.Tool), Arguments: t.Arguments}
		if n := len(e.msgs); n > 0 && e.msgs[n-1].Role == provider.RoleAssistant {
			e.join(call, it.seq)
		} else {
			e.add(provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call}}, at)
		}
	default:
		c := it.chunk
		switch c.Role {
		case events.RoleSystem:
			e.add(provider.Message{Role: provider.RoleSystem, Content: c.Content}, at)
		case events.RoleUser:
			e.add(provider.Message{Role: provider.RoleUser, Content: c.Content}, at)
		case events.RoleAssistant:
			if c.Agent == e.key.agent {
				e.add(provider.Message{Role: provider.RoleAssistant, Content: c.Content}, at)
			} else {
				e.add(provider.Message{Role: provider.RoleUser, Content: "[" + c.Agent + "] " + c.Content}, at)
			}
		case events.RoleTool:
			if r, ok := e.results[c.ToolCallID]; !ok || c.Seq < r {
				e.results[c.ToolCallID] = c.Seq
			}
			if e.mine(st.Tools[c.ToolCallID]) {
				e.add(provider.Message{Role: provider.RoleTool, Content: c.Content, ToolCallID: c.ToolCallID}, at)
			} else {
				e.add(provider.Message{Role: provider.RoleUser, Content: "[tool result for " + c.Agent + "] " + c.Content}, at)
			}
		}
	}
	e.last = it.seq
}

// add appends a message.
func (e *agentContext) add(m provider.Message, at span) {
	if len(e.msgs) < e.handed {
		e.unshare()
	}
	e.msgs = append(e.msgs, m)
	e.spans = append(e.spans, at)
	e.msgBytes += messageBytes(m)
}

// join adds a tool call to the last message, an assistant message.
func (e *agentContext) join(call provider.ToolCall, seq uint64) {
	n := len(e.msgs)
	m := &e.msgs[n-1]
	calls := m.ToolCalls
	if n-1 < e.handed {
		e.unshare()
		m = &e.msgs[n-1]
		calls = slices.Clip(calls) // the caller's message keeps its own
	}
	e.msgBytes -= messageBytes(*m)
	m.ToolCalls = append(calls, call)
	e.msgBytes += messageBytes(*m)
	e.spans[n-1].last = seq
}

// unshare copies the messages into a slice no caller holds.
func (e *agentContext) unshare() {
	e.msgs = append(make([]provider.Message, 0, cap(e.msgs)), e.msgs...)
	e.handed = 0
}

// messageBytes approximates what a message holds.
func messageBytes(m provider.Message) int64 {
	n := int64(len(m.Content)+len(m.ToolCallID)) + 80
	for _, c := range m.ToolCalls {
		n += int64(len(c.ID)+len(c.Name)+len(c.Arguments)) + 56
	}
	return n
}

// firstDifference returns the smallest FromSeq of a compaction in force in
// one of old and now but not in the other.
func firstDifference(old, now []session.Compaction) (uint64, bool) {
	p, found := noCut, false
	for _, set := range [2][2][]session.Compaction{{old, now}, {now, old}} {
		for _, c := range set[0] {
			if !slices.Contains(set[1], c) {
				p, found = min(p, c.FromSeq), true
			}
		}
	}
	return p, found
}
