package session

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// OverviewFormat names the shape of an Overview. It changes when a field
// changes meaning or type; fields may be added without changing it.
const OverviewFormat = "rath.overview/1"

// Bounds of an Overview. Tail and Clip are chosen per request within
// [1, MaxTail] and [1, MaxClip]; every other bound is fixed. Together they
// keep the JSON of any overview under MaxOverviewBytes, whatever the
// session holds (TestOverviewBound builds the worst case).
const (
	// DefaultTail is how many of the last entries of each long list
	// (chunks, compactions, decisions, validations, memory events, tool
	// calls, decided approvals, merges) an overview carries by default.
	DefaultTail = 8
	// MaxTail is the most a request may ask for.
	MaxTail = 16
	// DefaultClip bounds, in JSON bytes, the content of each chunk and the
	// summary of each compaction an overview carries, by default.
	DefaultClip = 1 << 10
	// MaxClip is the most a request may ask for.
	MaxClip = 8 << 10
	// MaxOpen bounds the entries of each open set: tool calls requested or
	// running, approvals waiting, pending work (oldest first), and each map
	// of names (labels, usage and turns per agent or model).
	MaxOpen = 32
	// MaxOverviewBytes bounds the JSON of an overview with any options.
	MaxOverviewBytes = 900 << 10

	maxName      = 256  // an ID, a name, a hash, a label
	maxText      = 512  // a reason, a description, an error, a query
	maxTask      = 2048 // the task
	maxArguments = 1024 // a tool call's arguments, kept whole or left out
	maxItemIDs   = 8    // item IDs per memory event
	maxPath      = 32   // runs of the fork path (the last ones)
)

// OverviewOptions chooses how much of the long lists an overview carries.
// Zero values take the defaults; values above the maximum are lowered to it.
type OverviewOptions struct {
	Tail int // entries of each long list, 1..MaxTail
	Clip int // JSON bytes of each chunk content and compaction summary, 1..MaxClip
	// Calls names tool calls to report in Tools.Asked whatever their status
	// (the first MaxOpen of them): how a tool server asks whether the call
	// it was handed is still to run.
	Calls []string
}

func (o OverviewOptions) norm() OverviewOptions {
	if o.Tail <= 0 {
		o.Tail = DefaultTail
	}
	if o.Clip <= 0 {
		o.Clip = DefaultClip
	}
	o.Tail, o.Clip = min(o.Tail, MaxTail), min(o.Clip, MaxClip)
	o.Calls = o.Calls[:min(len(o.Calls), MaxOpen)]
	return o
}

// Overview is the bounded view of a State that the ledger's state
// operation answers: everything a reader decides on (status, tenant,
// lineage, usage, counters, pending work, approvals, the tool calls in
// flight, placement, head, turn in flight) and, for the lists that grow
// with the session, their counts and their last entries with sequences.
//
// Free text (task, reasons, descriptions, errors, queries) ends with "…"
// where it was clipped; names and IDs are clipped the same way past 256
// bytes. A chunk's content is clipped to the request's Clip and says its
// full Size: the whole chunk is the event at its Seq (the ledger's log
// operation with from = to = Seq). The whole State is the fold of the log
// (client.State, internal/fold).
type Overview struct {
	Format       string            `json:"format"`
	ID           string            `json:"id"`
	Tenant       string            `json:"tenant,omitempty"`
	Status       Status            `json:"status"`
	StatusBy     string            `json:"status_by,omitempty"`
	Workflow     string            `json:"workflow,omitempty"`
	WorkflowHash string            `json:"workflow_hash,omitempty"`
	WorkflowRef  string            `json:"workflow_ref,omitempty"`
	Task         string            `json:"task,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// LabelsOmitted counts labels left out past MaxOpen (by key order).
	LabelsOmitted int       `json:"labels_omitted,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
	CloseReason   string    `json:"close_reason,omitempty"`
	Outcome       string    `json:"outcome,omitempty"`

	Lineage LineageOverview `json:"lineage"`
	Archive *Archive        `json:"archive,omitempty"`
	Usage   UsageOverview   `json:"usage"`
	Counts  CountsOverview  `json:"counts"`

	// Pending is the work the session owes, oldest first (at most MaxOpen).
	Pending        []PendingEntry `json:"pending"`
	PendingOmitted int            `json:"pending_omitted,omitempty"`
	Approvals      Approvals      `json:"approvals"`
	Tools          Tools          `json:"tools"`
	Sandbox        *Placement     `json:"sandbox,omitempty"`
	Moving         *Move          `json:"moving,omitempty"`
	Turn           *Turn          `json:"turn,omitempty"`
	LastAgent      string         `json:"last_agent,omitempty"`

	Chunks      Chunks                 `json:"chunks"`
	Compactions List[CompactionEntry]  `json:"compactions"`
	Decisions   List[Decision]         `json:"decisions"`
	Validations List[Validation]       `json:"validations"`
	Memory      List[MemoryEventEntry] `json:"memory"`

	// Seq and Hash are the head of the session's logical log (State.Seq).
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash,omitempty"`
	LastID string `json:"last_id,omitempty"`
}

// List is a list that grows with the session: how many entries it has and
// the last ones (at most the request's Tail), oldest first.
type List[T any] struct {
	Count int `json:"count"`
	Last  []T `json:"last"`
}

// Chunks is the transcript: its length, the bytes of all its contents,
// and its last chunks.
type Chunks struct {
	Count int          `json:"count"`
	Bytes int64        `json:"bytes"`
	Last  []ChunkEntry `json:"last"`
}

// ChunkEntry is one chunk with its content clipped: Size is the content's
// full length in bytes, Clipped says Content is a prefix of it.
type ChunkEntry struct {
	Seq        uint64 `json:"seq"`
	Role       string `json:"role"`
	Agent      string `json:"agent,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Origin     string `json:"origin,omitempty"`
	Content    string `json:"content"`
	Size       int    `json:"size"`
	Clipped    bool   `json:"clipped,omitempty"`
}

// CompactionEntry is one compaction with its summary clipped like a chunk.
type CompactionEntry struct {
	Seq          uint64 `json:"seq"`
	FromSeq      uint64 `json:"from_seq"`
	ToSeq        uint64 `json:"to_seq"`
	Summary      string `json:"summary"`
	Size         int    `json:"size"`
	Clipped      bool   `json:"clipped,omitempty"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

// MemoryEventEntry is one memory event without the items' content: their
// count and at most eight of their IDs.
type MemoryEventEntry struct {
	Seq     uint64   `json:"seq"`
	Kind    string   `json:"kind"`
	Items   int      `json:"items"`
	ItemIDs []string `json:"item_ids,omitempty"`
	Query   string   `json:"query,omitempty"`
	EventID string   `json:"event_id"`
	Agent   string   `json:"agent,omitempty"`
	TurnID  string   `json:"turn_id,omitempty"`
	Actor   string   `json:"actor,omitempty"`
}

// LineageOverview is a session's lineage: where it was forked, its last
// merges, and the last runs of its fork path.
type LineageOverview struct {
	Parent     string        `json:"parent,omitempty"`
	ForkSeq    uint64        `json:"fork_seq,omitempty"`
	ForkHash   string        `json:"fork_hash,omitempty"`
	ForkReason string        `json:"fork_reason,omitempty"`
	Merges     List[Merge]   `json:"merges"`
	Path       List[PathRun] `json:"path"`
	// MergedRuns counts the runs of other sessions' events merges took in.
	MergedRuns int `json:"merged_runs,omitempty"`
}

// PathRun is one run of a session's own events in a logical log.
type PathRun struct {
	Session string `json:"session"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to,omitempty"`
}

// UsageOverview is token usage, by agent and by model at most MaxOpen
// names each (the largest by tokens in and out).
type UsageOverview struct {
	Total         Tokens            `json:"total"`
	ByAgent       map[string]Tokens `json:"by_agent,omitempty"`
	ByModel       map[string]Tokens `json:"by_model,omitempty"`
	AgentsOmitted int               `json:"agents_omitted,omitempty"`
	ModelsOmitted int               `json:"models_omitted,omitempty"`
}

// CountsOverview is Counts with TurnsByAgent bounded to MaxOpen agents
// (the most turns).
type CountsOverview struct {
	Counts
	TurnsAgentsOmitted int `json:"turns_agents_omitted,omitempty"`
}

// PendingEntry is one item of pending work with its ID.
type PendingEntry struct {
	ID string `json:"id"`
	Work
}

// Approvals are the session's approvals: how many, the ones waiting
// (oldest first, at most MaxOpen) and the last decided ones.
type Approvals struct {
	Count        int             `json:"count"`
	Waiting      []ApprovalEntry `json:"waiting"`
	WaitingCount int             `json:"waiting_count"`
	Decided      []ApprovalEntry `json:"decided"`
}

// ApprovalEntry is one approval with its ID.
type ApprovalEntry struct {
	ID string `json:"id"`
	Approval
}

// Tools is the tool-call index: how many calls by status, the calls in
// flight (requested or running, oldest first, at most MaxOpen), the last
// calls by their first sequence, and the calls the request named (Asked,
// in the request's order; a call the session does not have is left out).
// The rest of the index is in the log: each call's events (tool.requested,
// started, completed, failed), or the whole State folded from it.
type Tools struct {
	Count     int            `json:"count"`
	ByStatus  map[string]int `json:"by_status,omitempty"`
	Open      []ToolEntry    `json:"open"`
	OpenCount int            `json:"open_count"`
	Last      []ToolEntry    `json:"last"`
	Asked     []ToolEntry    `json:"asked,omitempty"`
}

// ToolEntry is one tool call of the index. Arguments are left out when
// longer than 1 KiB (ArgumentsSize says how long; they are in the event at
// Seq); Events counts the call's events, LastSeq is the last one's.
type ToolEntry struct {
	CallID        string          `json:"call_id"`
	Tool          string          `json:"tool"`
	Agent         string          `json:"agent,omitempty"`
	Status        string          `json:"status"`
	Attempts      int             `json:"attempts"`
	ExitCode      int             `json:"exit_code"`
	CommitBefore  string          `json:"commit_before,omitempty"`
	CommitAfter   string          `json:"commit_after,omitempty"`
	Error         string          `json:"error,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	ArgumentsSize int             `json:"arguments_size,omitempty"`
	Seq           uint64          `json:"seq"`
	LastSeq       uint64          `json:"last_seq"`
	Events        int             `json:"events"`
	Origin        string          `json:"origin,omitempty"`
	// Approval is the approval the call waits for, if a gate holds it.
	Approval string `json:"approval,omitempty"`
	// Runner is events.RunnerCaller for a call the program that recorded
	// it runs (open until it records the outcome), "" for a Rath runner.
	Runner string `json:"runner,omitempty"`
}

// Open reports whether the call is requested or running.
func (t *Tool) Open() bool { return t.Status == ToolRequested || t.Status == ToolRunning }

// Overview returns the bounded view of s. It reads s and never changes it;
// its cost is linear in the tool calls, approvals and pending work and in
// the number of chunks (for their total bytes), not in their contents.
func (s *State) Overview(o OverviewOptions) *Overview {
	o = o.norm()
	v := &Overview{
		Format: OverviewFormat, ID: s.ID, Tenant: name(s.Tenant), Status: Status(name(string(s.Status))), StatusBy: name(s.StatusBy),
		Workflow: name(s.Workflow), WorkflowHash: name(s.WorkflowHash), WorkflowRef: name(s.WorkflowRef),
		Task: text(s.Task, maxTask), Created: s.Created, Updated: s.Updated,
		CloseReason: text(s.CloseReason, maxText), Outcome: name(s.Outcome),
		LastAgent: name(s.LastAgent), Seq: s.Seq, Hash: name(s.Hash), LastID: name(s.LastID),
	}
	v.Labels, v.LabelsOmitted = boundNames(s.Labels, func(a, b string) bool { return a < b }, func(v string) string { return name(v) })

	l := s.Lineage
	v.Lineage = LineageOverview{Parent: l.Parent, ForkSeq: l.ForkSeq, ForkHash: name(l.ForkHash), ForkReason: text(l.ForkReason, maxText), MergedRuns: len(l.Merged)}
	v.Lineage.Merges = tailOf(l.Merges, o.Tail, func(m Merge) Merge {
		m.Source, m.SourceHash, m.Ancestor = name(m.Source), name(m.SourceHash), name(m.Ancestor)
		return m
	})
	path := make([]PathRun, 0, min(len(l.Path), maxPath))
	for _, r := range l.Path[len(l.Path)-min(len(l.Path), maxPath):] {
		path = append(path, PathRun{Session: name(r.Session), From: r.From, To: r.To})
	}
	v.Lineage.Path = List[PathRun]{Count: len(l.Path), Last: path}
	if s.Archive != nil {
		a := *s.Archive
		a.BundleRef, a.HeadHash = name(a.BundleRef), name(a.HeadHash)
		v.Archive = &a
	}

	byTokens := func(m map[string]Tokens) func(a, b string) bool {
		return func(a, b string) bool {
			ta, tb := m[a].In+m[a].Out, m[b].In+m[b].Out
			return ta > tb || ta == tb && a < b
		}
	}
	v.Usage.Total = s.Usage.Total
	v.Usage.ByAgent, v.Usage.AgentsOmitted = boundNames(s.Usage.ByAgent, byTokens(s.Usage.ByAgent), nil)
	v.Usage.ByModel, v.Usage.ModelsOmitted = boundNames(s.Usage.ByModel, byTokens(s.Usage.ByModel), nil)
	v.Counts.Counts = s.Counts
	tba := s.Counts.TurnsByAgent
	v.Counts.TurnsByAgent, v.Counts.TurnsAgentsOmitted = boundNames(tba, func(a, b string) bool { return tba[a] > tba[b] || tba[a] == tba[b] && a < b }, nil)

	v.Pending = []PendingEntry{}
	for id, w := range s.Pending {
		w.Kind, w.Description, w.Assignee = name(w.Kind), text(w.Description, maxText), name(w.Assignee)
		v.Pending = keep(v.Pending, PendingEntry{ID: name(id), Work: w}, MaxOpen, func(a, b PendingEntry) bool { return a.Seq < b.Seq || a.Seq == b.Seq && a.ID < b.ID })
	}
	v.PendingOmitted = len(s.Pending) - len(v.Pending)

	v.Approvals = Approvals{Count: len(s.Approvals), Waiting: []ApprovalEntry{}, Decided: []ApprovalEntry{}}
	older := func(a, b ApprovalEntry) bool { return a.Seq < b.Seq || a.Seq == b.Seq && a.ID < b.ID }
	for id, ap := range s.Approvals {
		e := ApprovalEntry{ID: id, Approval: ap}
		if ap.Outcome == "" {
			v.Approvals.WaitingCount++
			v.Approvals.Waiting = keep(v.Approvals.Waiting, e, MaxOpen, older)
		} else {
			v.Approvals.Decided = keep(v.Approvals.Decided, e, o.Tail, func(a, b ApprovalEntry) bool { return older(b, a) })
		}
	}
	slices.Reverse(v.Approvals.Decided)
	for _, list := range [][]ApprovalEntry{v.Approvals.Waiting, v.Approvals.Decided} {
		for i := range list {
			a := &list[i]
			a.ID, a.Action, a.Outcome, a.By, a.Actor, a.RequestedBy = name(a.ID), text(a.Action, maxText), name(a.Outcome), name(a.By), name(a.Actor), name(a.RequestedBy)
			a.Approver, a.CallID, a.Tool, a.Gate, a.Reason = name(a.Approver), name(a.CallID), name(a.Tool), name(a.Gate), text(a.Reason, maxText)
		}
	}

	v.Tools = Tools{Count: len(s.Tools), Open: []ToolEntry{}, Last: []ToolEntry{}}
	var open, last []*Tool
	firstSeq := func(t *Tool) uint64 {
		if len(t.Seqs) == 0 {
			return 0
		}
		return t.Seqs[0]
	}
	earlier := func(a, b *Tool) bool {
		sa, sb := firstSeq(a), firstSeq(b)
		return sa < sb || sa == sb && a.CallID < b.CallID
	}
	for _, t := range s.Tools {
		if v.Tools.ByStatus == nil {
			v.Tools.ByStatus = map[string]int{}
		}
		if k := name(t.Status); len(v.Tools.ByStatus) < MaxOpen || v.Tools.ByStatus[k] > 0 {
			v.Tools.ByStatus[k]++ // statuses are four words: the bound only stops a forged flood
		}
		if t.Open() {
			v.Tools.OpenCount++
			open = keep(open, t, MaxOpen, earlier)
		}
		last = keep(last, t, o.Tail, func(a, b *Tool) bool { return earlier(b, a) })
	}
	slices.Reverse(last)
	for _, t := range open {
		v.Tools.Open = append(v.Tools.Open, s.toolEntry(t))
	}
	for _, t := range last {
		v.Tools.Last = append(v.Tools.Last, s.toolEntry(t))
	}
	for _, id := range o.Calls {
		if t, ok := s.Tools[id]; ok {
			v.Tools.Asked = append(v.Tools.Asked, s.toolEntry(t))
		}
	}

	if p := s.Sandbox; p != nil {
		c := *p
		c.Session, c.Commit, c.Backend, c.SandboxID, c.Host, c.Workspace = name(c.Session), name(c.Commit), name(c.Backend), name(c.SandboxID), name(c.Host), name(c.Workspace)
		c.Isolation, c.Pool, c.Runner = name(c.Isolation), name(c.Pool), name(c.Runner)
		v.Sandbox = &c
	}
	if m := s.Moving; m != nil {
		v.Moving = &Move{Seq: m.Seq, ID: name(m.ID), Session: name(m.Session), Backend: name(m.Backend), Pool: name(m.Pool)}
	}
	if t := s.Turn; t != nil {
		v.Turn = &Turn{ID: name(t.ID), Agent: name(t.Agent), Seq: t.Seq}
	}

	v.Chunks = Chunks{Count: len(s.Chunks)}
	for _, c := range s.Chunks {
		v.Chunks.Bytes += int64(len(c.Content))
	}
	v.Chunks.Last = tailOf(s.Chunks, o.Tail, func(c Chunk) ChunkEntry {
		content, clipped := clipJSON(c.Content, o.Clip)
		return ChunkEntry{Seq: c.Seq, Role: name(c.Role), Agent: name(c.Agent), ToolCallID: name(c.ToolCallID), Origin: name(c.Origin),
			Content: content, Size: len(c.Content), Clipped: clipped}
	}).Last
	v.Compactions = tailOf(s.Compactions, o.Tail, func(c Compaction) CompactionEntry {
		sum, clipped := clipJSON(c.Summary, o.Clip)
		return CompactionEntry{Seq: c.Seq, FromSeq: c.FromSeq, ToSeq: c.ToSeq, Summary: sum, Size: len(c.Summary), Clipped: clipped,
			TokensBefore: c.TokensBefore, TokensAfter: c.TokensAfter}
	})
	v.Decisions = tailOf(s.Decisions, o.Tail, func(d Decision) Decision {
		d.ID = "" // the selector's guard, not an overview's: the bounds stay as they were
		d.Rule, d.Route, d.Reason, d.Cause, d.TurnID = name(d.Rule), name(d.Route), text(d.Reason, maxText), name(d.Cause), name(d.TurnID)
		return d
	})
	v.Validations = tailOf(s.Validations, o.Tail, func(x Validation) Validation {
		x.Validator, x.Reason = name(x.Validator), text(x.Reason, maxText)
		return x
	})
	v.Memory = tailOf(s.Memory, o.Tail, func(m MemoryEvent) MemoryEventEntry {
		e := MemoryEventEntry{Seq: m.Seq, Kind: name(m.Kind), Items: len(m.ItemIDs), Query: text(m.Query, maxText),
			EventID: name(m.EventID), Agent: name(m.Agent), TurnID: name(m.TurnID), Actor: name(m.Actor)}
		for _, id := range m.ItemIDs[:min(len(m.ItemIDs), maxItemIDs)] {
			e.ItemIDs = append(e.ItemIDs, name(id))
		}
		return e
	})
	return v
}

func (s *State) toolEntry(t *Tool) ToolEntry {
	gate := s.GateOf(t.CallID).ApprovalID
	e := ToolEntry{CallID: name(t.CallID), Tool: name(t.Tool), Agent: name(t.Agent), Status: name(t.Status), Attempts: t.Attempts,
		ExitCode: t.ExitCode, CommitBefore: name(t.CommitBefore), CommitAfter: name(t.CommitAfter), Error: text(t.Error, maxText),
		Events: len(t.Seqs), Origin: name(t.Origin), Approval: name(gate), Runner: name(t.Runner)}
	if rawCost(t.Arguments) <= maxArguments && json.Valid(t.Arguments) {
		e.Arguments = t.Arguments
	} else {
		e.ArgumentsSize = len(t.Arguments)
	}
	if n := len(t.Seqs); n > 0 {
		e.Seq, e.LastSeq = t.Seqs[0], t.Seqs[n-1]
	}
	return e
}

// tailOf is the count of list and its last n entries, converted.
func tailOf[T, U any](list []T, n int, conv func(T) U) List[U] {
	out := List[U]{Count: len(list), Last: make([]U, 0, min(n, len(list)))}
	for _, x := range list[len(list)-min(n, len(list)):] {
		out.Last = append(out.Last, conv(x))
	}
	return out
}

// keep adds x to buf, which holds the n first entries in the order less
// (sorted), dropping the last one past n. It costs O(n) per call, so
// selecting the first n of m entries is O(m·n) at worst and O(m) when
// most entries come after the ones kept.
func keep[T any](buf []T, x T, n int, less func(a, b T) bool) []T {
	if len(buf) == n && !less(x, buf[n-1]) {
		return buf
	}
	i, _ := slices.BinarySearchFunc(buf, x, func(e, t T) int {
		if less(e, t) {
			return -1
		}
		return 1
	})
	buf = slices.Insert(buf, i, x)
	if len(buf) > n {
		buf = buf[:n]
	}
	return buf
}

// boundNames keeps the MaxOpen first keys of m in the order first, keys
// (and values, if conv is set) clipped as names, and counts the rest.
func boundNames[V any](m map[string]V, first func(a, b string) bool, conv func(V) V) (map[string]V, int) {
	if len(m) == 0 {
		return nil, 0
	}
	var keys []string
	for k := range maps.Keys(m) {
		keys = keep(keys, k, MaxOpen, first)
	}
	out := make(map[string]V, len(keys))
	for _, k := range keys {
		v := m[k]
		if conv != nil {
			v = conv(v)
		}
		out[name(k)] = v
	}
	return out, len(m) - len(keys)
}

func name(s string) string { return text(s, maxName) }

// text clips s to at most n bytes of JSON, ending it with "…" if cut.
func text(s string, n int) string {
	if c, cut := clipJSON(s, n); cut {
		c, _ = clipJSON(c, n-len("…"))
		return c + "…"
	}
	return s
}

// clipJSON returns the longest prefix of s whose JSON string encoding (its
// quotes left out) takes at most n bytes, on a rune boundary, and whether
// it cut s. The cost of each rune is an upper bound of what encoding/json
// writes for it: with or without HTML escaping, invalid bytes as \ufffd.
func clipJSON(s string, n int) (string, bool) {
	if len(s) <= n && jsonPlain(s) {
		return s, false
	}
	cost := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		c := size
		switch {
		case r == utf8.RuneError && size == 1, r < 0x20 && !strings.ContainsRune("\n\r\t", r),
			r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
			c = 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
			c = 2
		}
		if cost+c > n {
			return s[:i], true
		}
		cost += c
		i += size
	}
	return s, false
}

// rawCost bounds the bytes encoding/json writes for raw JSON: its own,
// plus five for each character it may escape as \u00XX (<, >, &) and three
// for U+2028 and U+2029.
func rawCost(raw []byte) int {
	n := len(raw)
	for i, b := range raw {
		switch {
		case b == '<' || b == '>' || b == '&':
			n += 5
		case b == 0xe2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xa8 || raw[i+2] == 0xa9):
			n += 3
		}
	}
	return n
}

// jsonPlain reports whether s encodes in JSON as its own bytes.
func jsonPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x20 || b >= 0x80 || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			return false
		}
	}
	return true
}
