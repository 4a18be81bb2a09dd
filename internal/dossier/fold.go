package dossier

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// fold walks one branch's logical log (and the events its merges take in)
// with session.Walk and records the branch's own events. Context that spans
// a fork (turn numbers, the turn in flight, tool calls in flight, the
// sandbox placement) comes from the inherited prefix, so a branch's records
// read the same as the ledger's state of that branch would.
type fold struct {
	t     *tree
	id    string
	blobs map[string][]byte
	// st is the branch's state as Walk folds it: what the records read of
	// the state rather than keep again (the placement, the status).
	st *session.State

	branch Branch

	turnCount int
	inFlight  string // turn ID
	turns     map[string]*turnState
	turnOrder []string
	steps     []StepTurn // the logical log's turns, as LogTurns lists them
	calls     map[string]*callState
	callOrder []string
	ids       map[string]events.Stored
	lastVal   *Validation   // last validation of the content so far
	logical   session.Usage // usage of the logical log
	segments  map[string]*SegmentUsage
	mergedIn  session.Usage

	placements  []Placement
	memory      []Memory
	validations []Validation
	experiments []Experiment
	decisions   []Decision
	acts        []Act
	candidates  []candidate
	people      people
}

type turnState struct {
	rec     Turn
	touched bool
	request events.Stored
}

type callState struct {
	rec     ToolCall
	touched bool
	request *events.Stored
}

func newFold(t *tree, id string, blobs map[string][]byte) *fold {
	evs := t.Branch(id).Events
	in := t.Branch(id)
	b := Branch{
		ID: id, Parent: in.Parent, ForkSeq: in.ForkSeq, Status: "active",
		Created: evs[0].Time, Updated: evs[len(evs)-1].Time,
		FirstSeq: evs[0].Seq, Head: Head{Seq: evs[len(evs)-1].Seq, Hash: evs[len(evs)-1].Hash},
		Events: len(evs), EventsFile: DirEvents + "/" + id + ".jsonl",
	}
	if in.Fork != nil {
		b.ForkHash, b.ForkReason = in.Fork.ParentHash, in.Fork.Reason
	}
	f := &fold{t: t, id: id, blobs: blobs, branch: b, st: &session.State{},
		turns: map[string]*turnState{}, calls: map[string]*callState{},
		ids: map[string]events.Stored{}, segments: map[string]*SegmentUsage{}}
	f.people.init()
	for _, seg := range t.Path(id) {
		f.segments[seg.Session] = &SegmentUsage{Segment: seg}
	}
	return f
}

func (f *fold) run() {
	// Reading the tree does not fail, so neither does the walk.
	_ = session.Walk(f.st, f.t.Logical(f.id), session.Hooks{After: f.walked, Read: f.t.read})
	f.branch.Status = string(f.st.Status)
	// Most events first, then by name.
	slices.SortStableFunc(f.branch.Actors, func(x, y ActorCount) int {
		if x.Events != y.Events {
			return y.Events - x.Events
		}
		return strings.Compare(x.Actor, y.Actor)
	})
}

// walked records one step of the walk: an event of the logical log, or one
// a merge took in, of which the records keep only the validation (the last
// one so far) and the usage.
func (f *fold) walked(_ *session.State, s session.Step) {
	if !s.Merged {
		f.record(s.Stored, s.Data)
		return
	}
	if c, ok := session.CheckOf(s.Data); ok {
		v := validation(s.Stored, c, s.Data)
		f.lastVal = &v
	}
	f.mergedIn.AddEvent(s.Data)
}

func validation(e events.Stored, c session.Check, data any) Validation {
	v := Validation{At: at(e), Check: c}
	switch d := data.(type) {
	case *events.ValidationPassed:
		v.Details = d.Details
	case *events.ValidationFailed:
		v.Details = d.Details
	}
	return v
}

// event folds one event of the branch's logical log and reports whether the
// fold knows its kind: every registered kind is named in its switch, the
// ones the dossier records nothing of too, so a kind added to the catalog
// fails TestFoldKnowsEveryKind until the dossier decides what it shows of it.
func (f *fold) event(e events.Stored) bool {
	data, err := e.Decode()
	if err != nil {
		data = nil
	}
	return f.record(e, data)
}

// record is event with e's data decoded (nil: it does not decode).
func (f *fold) record(e events.Stored, data any) bool {
	own := e.Session == f.id
	f.ids[e.ID] = e
	if data == nil {
		return false // the fold never fails on history: undecodable data only counts
	}
	b := &f.branch
	if own {
		b.Counts.Events++
		f.countActor(e)
		if e.Tenant != "" {
			b.Tenant = e.Tenant
		}
	}
	// act records what the event makes its actor answerable for, when it
	// is the branch's own.
	act := func(what, detail, by string) {
		if own {
			f.acts = append(f.acts, Act{At: at(e), Actor: e.Actor, OnBehalf: e.OnBehalf, What: what, Detail: detail, By: by})
		}
	}
	p := &f.people
	known := true
	switch d := data.(type) {
	case *events.SessionStarted:
		act("started the session", d.Task, "")
		if own {
			b.Task, b.Labels = d.Task, d.Labels
		}
	case *events.SessionForked:
		act("forked", strings.TrimSuffix(fmt.Sprintf("from %s at %d: %s", d.Parent, d.AtSeq, d.Reason), ": "), "")
		if own {
			b.Labels = d.Labels
		}
	case *events.SessionPaused:
		act("paused", d.Reason, "") // the branch's status is the state's (run)
	case *events.SessionResumed:
		act("resumed", d.Reason, "")
	case *events.SessionArchived:
		act("archived", "", "")
	case *events.SessionClosed:
		if d.Outcome != "" {
			act("closed ("+d.Outcome+")", d.Reason, "")
		} else {
			act("closed", d.Reason, "")
		}
		if own {
			b.Outcome, b.CloseReason, b.ClosedSeq = d.Outcome, d.Reason, e.Seq
			if Successful(d.Outcome) {
				f.candidates = append(f.candidates, candidate{close: at(e), outcome: d.Outcome, reason: d.Reason, last: f.lastVal})
			}
		}
	case *events.SessionMerged:
		act("merged", "from "+d.Source, "")
		if own {
			n := 0
			for _, s := range d.Segments {
				n += int(s.To - s.From + 1)
			}
			b.Merges = append(b.Merges, MergeIn{At: at(e), Source: d.Source, SourceHead: d.SourceHead,
				Ancestor: d.Ancestor, Segments: d.Segments, Reason: d.Reason, Events: n})
		}
	case *events.TurnRequested:
		f.turnCount++
		ts := &turnState{request: e, rec: Turn{At: at(e), Number: f.turnCount, TurnID: d.TurnID, Agent: d.Agent,
			Rule: d.Rule, Reason: d.Reason, Status: TurnInFlight}}
		if _, seen := f.turns[d.TurnID]; !seen {
			f.turnOrder = append(f.turnOrder, d.TurnID)
		}
		f.turns[d.TurnID] = ts
		f.inFlight = d.TurnID
		ts.touched = own
		f.steps = append(f.steps, StepTurn{Number: len(f.steps) + 1, TurnID: d.TurnID, Agent: d.Agent, From: e.Seq})
		if own {
			p.next(e, d, f.turnCount)
		}
	case *events.ChunkAppended:
		if own && d.Correction && d.Role == events.RoleUser {
			act("corrected the session", d.Content, "")
			p.add(Intervention{At: at(e), Kind: InterventionSaid, Actor: e.Actor, Text: d.Content}, "")
		}
		if ts := f.turns[f.inFlight]; ts != nil && d.Role == events.RoleAssistant && (d.Agent == "" || d.Agent == ts.rec.Agent) {
			if ts.rec.Answer != "" {
				ts.rec.Answer += "\n"
			}
			ts.rec.Answer += d.Content
		}
	case *events.TurnCompleted:
		f.endTurn(e, own, d.TurnID, TurnCompleted, d.StopReason, d.ToolCalls, "")
	case *events.TurnFailed:
		f.endTurn(e, own, d.TurnID, TurnFailed, "", 0, d.Error)
	case *events.ModelCalled:
		f.use(e, own, d)
		if own {
			b.Counts.ModelCalls++
		}
	case *events.UsageRecorded:
		f.use(e, own, d)
	case *events.ToolRequested:
		c := f.call(e, own, d.CallID, d.Tool)
		c.request = &e
		c.rec.Agent, c.rec.Arguments, c.rec.TurnID, c.rec.Runner = d.Agent, d.Arguments, f.inFlight, d.Runner
		if c.rec.Runner == events.RunnerCaller {
			c.rec.Placement = nil // its caller runs it, not the branch's sandbox
		}
		if own {
			b.Counts.ToolCalls++
		}
	case *events.ToolCleared:
		// The tool runner found no gate holding the call: an event of the
		// call, nothing more to show.
		if f.calls[d.CallID] != nil {
			f.call(e, own, d.CallID, d.Tool)
		}
	case *events.ToolStarted:
		c := f.call(e, own, d.CallID, d.Tool)
		c.rec.Status, c.rec.Attempt, c.rec.Sandbox = ToolRunning, max(c.rec.Attempt, d.Attempt), d.Sandbox
	case *events.ToolCompleted:
		c := f.call(e, own, d.CallID, d.Tool)
		r := &c.rec
		r.Status, r.Attempt, r.ExitCode, r.DurationMS, r.Error = ToolCompleted, max(r.Attempt, d.Attempt), d.ExitCode, d.DurationMS, ""
		r.Result, r.ResultRef, r.Diff, r.DiffRef = d.Result, d.ResultRef, d.Diff, d.DiffRef
		r.CommitBefore, r.CommitAfter = d.CommitBefore, d.CommitAfter
		if d.Sandbox != nil {
			r.Sandbox = d.Sandbox
		}
		full := d.Diff
		if blob, ok := f.blobs[d.DiffRef]; ok && d.DiffRef != "" {
			full = string(blob)
		}
		r.Files = DiffFiles(full)
		if own && d.Correction {
			act("gave the result of tool call "+d.CallID, d.Result, "")
			p.add(Intervention{At: at(e), Kind: InterventionResult, Actor: e.Actor, CallID: d.CallID, Tool: d.Tool, Text: d.Result,
				Arguments: r.Arguments}, "")
		}
		p.ended(e, d.CallID, "completed", d.ExitCode)
	case *events.ToolFailed:
		c := f.call(e, own, d.CallID, d.Tool)
		r := &c.rec
		r.Status, r.Attempt, r.ExitCode, r.DurationMS, r.Error = ToolFailed, max(r.Attempt, d.Attempt), d.ExitCode, d.DurationMS, d.Error
		if d.Sandbox != nil {
			r.Sandbox = d.Sandbox
		}
		p.ended(e, d.CallID, "failed", d.ExitCode)
	case *events.SandboxPlaced:
		if own {
			f.placements = append(f.placements, Placement{At: at(e), Backend: d.Backend, SandboxID: d.SandboxID,
				Host: d.Host, Workspace: d.Workspace, Commit: d.Commit, Reason: d.Reason,
				Isolation: d.IsolationOf(), Development: events.Development(d.Backend), From: d.From})
		}
	case *events.MemoryRecalled:
		if own {
			scopes := d.Scopes
			if len(scopes) == 0 && d.Scope != "" {
				scopes = []string{d.Scope}
			}
			f.memory = append(f.memory, Memory{At: at(e), Kind: MemoryRecalled, Agent: d.Agent, TurnID: d.TurnID,
				Turn: f.turnNumber(d.TurnID), Query: d.Query, Scopes: scopes, Tags: d.Tags, Items: d.Items})
		}
	case *events.MemoryWritten:
		act("wrote memory "+d.ItemID, "", "")
		if own {
			p := d.Provenance
			f.memory = append(f.memory, Memory{At: at(e), Kind: MemoryWritten, Turn: f.turnNumber(""), ItemID: d.ItemID,
				Version: d.Version, Content: d.Content, Scope: d.Scope, Tags: d.Tags, Provenance: &p, RestoredFrom: d.RestoredFrom})
		}
	case *events.MemoryRetracted:
		act("retracted memory "+d.ItemID, d.Reason, d.By)
		if own {
			f.memory = append(f.memory, Memory{At: at(e), Kind: MemoryRetracted, Turn: f.turnNumber(""), ItemID: d.ItemID,
				Version: d.Version, By: d.By, Reason: d.Reason})
		}
	case *events.ExperimentRecorded:
		if own {
			f.experiments = append(f.experiments, experiment(e, d))
		}
	case *events.ValidationPassed, *events.ValidationFailed:
		c, _ := session.CheckOf(d)
		v := validation(e, c, d)
		f.lastVal = &v
		if own {
			f.validations = append(f.validations, v)
			if v.Passed {
				b.Counts.ValidationsPassed++
			} else {
				b.Counts.ValidationsFailed++
			}
		}
	case *events.SelectorDecided:
		if own {
			dec := Decision{At: at(e), Rule: d.Rule, Route: d.Route, Reason: d.Reason, Inputs: d.Inputs,
				Candidates: d.Candidates, Agent: d.Agent, TurnID: d.TurnID, Router: d.Router}
			if e.Causation != "" {
				dec.Cause = &Cause{EventID: e.Causation}
				if c, ok := f.ids[e.Causation]; ok {
					dec.Cause.Seq, dec.Cause.Type = c.Seq, c.Type
				}
			}
			f.decisions = append(f.decisions, dec)
		}
	case *events.ApprovalRequested:
		act("asked for approval "+d.ApprovalID, d.Action, "")
		p.requests[d.ApprovalID] = approvalRequest{ref: Ref{Branch: e.Session, Seq: e.Seq}, data: d}
	case *events.ApprovalGranted:
		act("granted approval "+d.ApprovalID, d.Comment, d.By)
		if own {
			p.decided(f, e, InterventionGranted, d.ApprovalID, d.Comment)
		}
	case *events.ApprovalRejected:
		act("rejected approval "+d.ApprovalID, d.Reason, d.By)
		if own {
			p.decided(f, e, InterventionRejected, d.ApprovalID, d.Reason)
		}
	case *events.ApprovalExpired:
		if d.EscalatedTo != "" {
			act("escalated approval "+d.ApprovalID+" to "+d.EscalatedTo, "no decision by "+d.Deadline, "")
		} else {
			act("approval "+d.ApprovalID+" expired ("+d.OnTimeout+")", "no decision by "+d.Deadline, "")
		}
		if own {
			what := "no decision by " + d.Deadline + ", " + d.OnTimeout
			if d.EscalatedTo != "" {
				what += " to " + d.EscalatedTo + " until " + d.NextDeadline
			}
			p.decided(f, e, InterventionExpired, d.ApprovalID, what)
		}
	case *events.SandboxRequested:
		act("asked to move the session to sandbox "+d.Backend, d.Reason, "")
	case *events.WorkPending:
		p.pendingWork(e, d, own)
	case *events.WorkDone:
		if own {
			p.workDone(e, d)
		}
	case *events.SessionPurged, *events.TranscriptCompacted, *events.SandboxRefused, *events.ModelCallFailed, *events.HandlerFailed:
		// Nothing the dossier records: the archive is told by its
		// session.archived, a compaction deletes nothing, a refused move
		// leaves the placement as it was, and retries and dead letters are
		// in the events files.
	default:
		known = false
	}
	if own {
		b.Counts.Memory = len(f.memory)
		b.Counts.Decisions = len(f.decisions)
	}
	return known
}

// use counts the usage an event records (data: its decoded data) in the
// logical log, its segment and, for the branch's own events, the branch.
func (f *fold) use(e events.Stored, own bool, data any) {
	f.logical.AddEvent(data)
	if seg, ok := f.segments[e.Session]; ok {
		seg.Usage.AddEvent(data)
	}
	if own {
		f.branch.Usage.AddEvent(data)
	}
}

// turnNumber is the number of turn id, or of the turn in flight.
func (f *fold) turnNumber(id string) int {
	if id == "" {
		id = f.inFlight
	}
	if ts := f.turns[id]; ts != nil {
		return ts.rec.Number
	}
	return 0
}

func (f *fold) endTurn(e events.Stored, own bool, id, status, stop string, calls int, errText string) {
	for i := len(f.steps) - 1; i >= 0; i-- {
		if f.steps[i].TurnID == id && f.steps[i].To == 0 {
			f.steps[i].To = e.Seq
			break
		}
	}
	ts := f.turns[id]
	if ts == nil {
		ts = &turnState{request: e, rec: Turn{At: at(e), TurnID: id}}
		f.turns[id] = ts
		f.turnOrder = append(f.turnOrder, id)
	}
	ts.rec.Status, ts.rec.EndSeq, ts.rec.StopReason, ts.rec.ToolCalls, ts.rec.Error = status, e.Seq, stop, calls, errText
	if own {
		ts.touched = true
		if status == TurnCompleted {
			f.branch.Counts.Turns++
		}
	}
	if f.inFlight == id {
		f.inFlight = ""
	}
}

func (f *fold) call(e events.Stored, own bool, id, tool string) *callState {
	c := f.calls[id]
	if c == nil {
		c = &callState{rec: ToolCall{At: at(e), CallID: id, Tool: tool, Status: ToolRequested}}
		f.calls[id] = c
		f.callOrder = append(f.callOrder, id)
	}
	if own {
		c.touched = true
		c.rec.Seqs = append(c.rec.Seqs, e.Seq)
		c.rec.Placement = nil
		if p := f.st.Sandbox; p != nil && c.rec.Runner != events.RunnerCaller {
			c.rec.Placement = &Ref{Branch: p.Session, Seq: p.Seq}
		}
	}
	return c
}

func (f *fold) turnRecords() []Turn {
	var out []Turn
	for _, id := range f.turnOrder {
		ts := f.turns[id]
		if !ts.touched {
			continue
		}
		r := ts.rec
		if ts.request.Session != f.id {
			r.RequestedIn = &Ref{Branch: ts.request.Session, Seq: ts.request.Seq}
			r.At = At{Branch: f.id, Seq: r.EndSeq, EventID: r.EventID, Time: r.Time}
			if end, ok := f.t.Event(f.id, r.EndSeq); ok {
				r.At = at(end)
			}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Turn) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func (f *fold) toolRecords() []ToolCall {
	var out []ToolCall
	for _, id := range f.callOrder {
		c := f.calls[id]
		if !c.touched {
			continue
		}
		r := c.rec
		if c.request != nil && c.request.Session != f.id {
			r.RequestedIn = &Ref{Branch: c.request.Session, Seq: c.request.Seq}
		}
		if c.request == nil || c.request.Session != f.id {
			if first, ok := f.t.Event(f.id, r.Seqs[0]); ok {
				r.At = at(first)
			}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b ToolCall) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func (f *fold) pathUsage() *PathUsage {
	p := &PathUsage{Branch: f.id, Usage: f.logical, MergedIn: f.mergedIn}
	for _, seg := range f.t.Path(f.id) {
		p.Segments = append(p.Segments, *f.segments[seg.Session])
	}
	return p
}

// countActor counts one of the branch's own events for its actor (run
// orders the list).
func (f *fold) countActor(e events.Stored) {
	actor := e.Actor
	if actor == "" {
		actor = "(not stamped)" // stored before the ledger stamped actors
	}
	b := &f.branch
	i := slices.IndexFunc(b.Actors, func(a ActorCount) bool { return a.Actor == actor })
	if i < 0 {
		b.Actors = append(b.Actors, ActorCount{Actor: actor})
		i = len(b.Actors) - 1
	}
	b.Actors[i].Events++
}
