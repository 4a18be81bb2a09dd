package session

import (
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Apply folds one event of the session's logical log into s: the session's own
// events and, for a fork, its ancestors' events up to the fork point, in
// sequence order. It never validates: history that was accepted once must
// fold forever, even after rules change. Data that does not decode only moves
// the head. Apply mutates s; Clone first to keep the earlier state.
func Apply(s *State, e events.Stored) { apply(s, e, false) }

// ApplyMerged folds one event that a merge takes in from another session (one
// of a session.merged event's segments). Lifecycle events of the source are
// not applied: the source's start, fork or close says nothing about s. The
// head of s does not move; the session.merged event itself moves it.
func ApplyMerged(s *State, e events.Stored) { apply(s, e, true) }

// apply folds e and reports whether the fold knows its kind: every
// registered kind is named in its switch, the ones that change nothing in
// the state too, so a kind added to the catalog fails
// TestApplyKnowsEveryKind until this fold decides what it means. Data that
// does not decode is not known either.
func apply(s *State, e events.Stored, merged bool) bool {
	data, err := e.Decode()
	if err != nil {
		data = nil
	}
	return applyData(s, e, data, merged)
}

// applyData is apply with e's data decoded already (nil: it does not
// decode), so Walk decodes each event once for the fold and its hooks.
func applyData(s *State, e events.Stored, data any, merged bool) bool {
	origin := ""
	if merged {
		origin = own(e.Session)
		s.Counts.Merged++
		s.cover(own(e.Session), e.Seq)
	} else {
		s.Seq, s.Hash, s.LastID = e.Seq, own(e.Hash), own(e.ID)
		s.Counts.Events++
	}
	if s.Created.IsZero() {
		s.Created = e.Time
	}
	if e.Time.After(s.Updated) {
		s.Updated = e.Time
	}

	switch d := data.(type) {
	case *events.SessionStarted:
		if merged {
			return true
		}
		s.ID = own(e.Session)
		s.Status, s.StatusBy = StatusActive, own(e.Actor)
		s.Tenant = own(e.Tenant)
		if s.Tenant == "" {
			s.Tenant = events.DefaultTenant // stored before tenants
		}
		s.Workflow, s.WorkflowHash, s.WorkflowRef, s.Task = d.Workflow, d.WorkflowHash, d.WorkflowRef, d.Task
		s.Labels = mergeLabels(s.Labels, d.Labels)
		s.Lineage.Path = []events.Segment{{Session: own(e.Session), From: e.Seq}}
	case *events.SessionForked:
		if merged {
			return true
		}
		// The fork inherits everything folded from the parent's prefix and
		// becomes a session of its own from here.
		s.ID = own(e.Session)
		s.Status, s.StatusBy = StatusActive, own(e.Actor)
		if e.Tenant != "" {
			s.Tenant = own(e.Tenant)
		}
		s.CloseReason, s.Outcome, s.Archive = "", "", nil
		s.Created = e.Time
		s.Labels = mergeLabels(s.Labels, d.Labels)
		if d.WorkflowRef != "" {
			// A fork that runs another workflow from here on (a
			// counterfactual): every service reads it from here.
			s.Workflow, s.WorkflowHash, s.WorkflowRef = d.Workflow, d.WorkflowHash, d.WorkflowRef
		}
		path := append([]events.Segment{}, s.Lineage.Path...)
		if n := len(path); n > 0 {
			path[n-1].To = d.AtSeq
		}
		path = append(path, events.Segment{Session: own(e.Session), From: e.Seq})
		s.Lineage = Lineage{Parent: d.Parent, ForkSeq: d.AtSeq, ForkHash: d.ParentHash, ForkReason: d.Reason,
			Path: path, Merged: s.Lineage.Merged}
	case *events.SessionMerged:
		if merged {
			return true
		}
		n := 0
		for _, seg := range d.Segments {
			n += int(seg.To - seg.From + 1)
		}
		m := Merge{Seq: e.Seq, Source: d.Source, SourceSeq: d.SourceHead.Seq, SourceHash: d.SourceHead.Hash, Events: n}
		if d.Ancestor != nil {
			m.Ancestor, m.AncestorSeq = d.Ancestor.Session, d.Ancestor.Seq
		}
		s.Lineage.Merges = append(s.Lineage.Merges, m)
	case *events.SessionPaused:
		if !merged {
			s.Status, s.StatusBy = StatusPaused, own(e.Actor)
		}
	case *events.SessionResumed:
		if !merged {
			s.Status, s.StatusBy = StatusActive, own(e.Actor)
		}
	case *events.SessionClosed:
		if !merged {
			s.Status, s.StatusBy = StatusClosed, own(e.Actor)
			s.CloseReason, s.Outcome = d.Reason, d.Outcome
		}
	case *events.SessionArchived:
		if !merged {
			s.Status, s.StatusBy = StatusArchived, own(e.Actor)
			s.Archive = &Archive{Seq: e.Seq, BundleRef: d.BundleRef, FromSeq: d.FromSeq, HeadSeq: d.HeadSeq, HeadHash: d.HeadHash,
				HeadStreamSeq: d.HeadStreamSeq, Events: d.Events}
		}
	case *events.SessionPurged:
		if !merged && s.Archive != nil {
			s.Archive.PurgedSeq = e.Seq
		}
	case *events.ChunkAppended:
		s.Chunks = append(s.Chunks, Chunk{Seq: e.Seq, Role: d.Role, Agent: d.Agent, Content: d.Content, ToolCallID: d.ToolCallID, Origin: origin})
		s.Counts.Chunks++
	case *events.TranscriptCompacted:
		s.Compactions = append(s.Compactions, Compaction{Seq: e.Seq, FromSeq: d.FromSeq, ToSeq: d.ToSeq, Summary: d.Summary, TokensBefore: d.TokensBefore, TokensAfter: d.TokensAfter})
	case *events.ModelCalled:
		s.Usage.AddEvent(d)
		s.Counts.ModelCalls++
	case *events.UsageRecorded:
		s.Usage.AddEvent(d)
	case *events.ToolRequested:
		t := s.tool(d.CallID, d.Tool, e.Seq)
		t.Agent, t.Arguments, t.Origin, t.Approval, t.Runner = d.Agent, d.Arguments, origin, d.ApprovalID, own(d.Runner)
		t.ProposedBy, t.Screened = own(e.Actor), ""
		s.Counts.ToolCalls++
	case *events.ToolCleared:
		if t := s.Tools[d.CallID]; t != nil {
			s.tool(d.CallID, t.Tool, e.Seq)
			s.screen(d.CallID, own(e.Actor), ScreenedClear)
		}
	case *events.ToolStarted:
		t := s.tool(d.CallID, d.Tool, e.Seq)
		t.Status = ToolRunning
		t.Attempts = max(t.Attempts, d.Attempt)
	case *events.ToolCompleted:
		t := s.tool(d.CallID, d.Tool, e.Seq)
		t.Status, t.ExitCode, t.Error = ToolCompleted, d.ExitCode, ""
		t.CommitBefore, t.CommitAfter = d.CommitBefore, d.CommitAfter
		t.Attempts = max(t.Attempts, d.Attempt)
	case *events.ToolFailed:
		t := s.tool(d.CallID, d.Tool, e.Seq)
		t.Status, t.ExitCode, t.Error = ToolFailed, d.ExitCode, d.Error
		t.Attempts = max(t.Attempts, d.Attempt)
	case *events.SandboxPlaced:
		if !merged {
			s.Sandbox = &Placement{Seq: e.Seq, Session: own(e.Session), Commit: d.Commit, Backend: d.Backend, SandboxID: d.SandboxID, Host: d.Host, Workspace: d.Workspace,
				Isolation: d.IsolationOf(), Pool: d.Pool, Runner: d.Runner}
			s.answered(e)
		}
	case *events.MemoryRecalled:
		ids := make([]string, len(d.Items))
		for i, it := range d.Items {
			ids[i] = it.ItemID
		}
		s.Memory = append(s.Memory, MemoryEvent{Seq: e.Seq, Kind: "recalled", ItemIDs: ids, Query: d.Query, EventID: own(e.ID),
			Agent: d.Agent, TurnID: d.TurnID, Items: d.Items, Actor: memoryActor(e)})
	case *events.MemoryWritten:
		s.Memory = append(s.Memory, MemoryEvent{Seq: e.Seq, Kind: "written", ItemIDs: []string{d.ItemID}, EventID: own(e.ID), Actor: memoryActor(e)})
	case *events.MemoryRetracted:
		s.Memory = append(s.Memory, MemoryEvent{Seq: e.Seq, Kind: "retracted", ItemIDs: []string{d.ItemID}, EventID: own(e.ID), Actor: memoryActor(e)})
	case *events.SelectorDecided:
		s.Decisions = append(s.Decisions, Decision{Seq: e.Seq, ID: own(e.ID), Rule: d.Rule, Route: d.Route, Reason: d.Reason, Cause: own(e.Causation), TurnID: d.TurnID})
		if d.TurnID != "" && !merged && d.TurnID != s.LastTurn {
			s.Turn = &Turn{ID: d.TurnID, Agent: d.Agent, Seq: e.Seq, At: e.Time}
		}
	case *events.WorkPending:
		if s.Pending == nil {
			s.Pending = map[string]Work{}
		}
		s.Pending[d.WorkID] = Work{Seq: e.Seq, Kind: d.Kind, Description: d.Description, Assignee: d.Assignee}
	case *events.WorkDone:
		delete(s.Pending, d.WorkID)
	case *events.ValidationPassed, *events.ValidationFailed:
		c, _ := CheckOf(d)
		s.Validations = append(s.Validations, Validation{Seq: e.Seq, Check: c})
		if c.Passed {
			s.Counts.ValidationsPassed++
		} else {
			s.Counts.ValidationsFailed++
		}
	case *events.ExperimentRecorded:
		s.Experiments = append(s.Experiments, Experiment{Seq: e.Seq, EventID: own(e.ID), ExperimentRecorded: *d})
	case *events.ApprovalRequested:
		if s.Approvals == nil {
			s.Approvals = map[string]Approval{}
		}
		s.Approvals[d.ApprovalID] = Approval{Seq: e.Seq, Action: d.Action, Approver: d.Approver, CallID: d.CallID, Tool: d.Tool, Gate: d.Gate,
			Requested: e.Time, RequestedBy: own(e.Actor), Deadline: d.Deadline, OnTimeout: d.OnTimeout, EscalateTo: d.EscalateTo, EscalateDeadline: d.EscalateDeadline}
		if d.CallID != "" {
			s.screen(d.CallID, own(e.Actor), d.ApprovalID)
		}
	case *events.TurnRequested:
		// A second request of the turn that just ended (the ledger does not
		// refuse one) does not open it again: the agent worker would take
		// the turn, and ask the model, twice.
		if !merged && d.TurnID != s.LastTurn && (s.Turn == nil || s.Turn.ID != d.TurnID) {
			s.Turn = &Turn{ID: d.TurnID, Agent: d.Agent, Seq: e.Seq, At: e.Time}
		}
	case *events.TurnCompleted:
		if s.endsAgain(d.TurnID, merged) {
			break // one turn counts once against the budgets
		}
		s.Counts.Turns++
		if s.Counts.TurnsByAgent == nil {
			s.Counts.TurnsByAgent = map[string]int{}
		}
		s.Counts.TurnsByAgent[d.Agent]++
		s.endTurn(d.TurnID, d.Agent, merged)
	case *events.TurnFailed:
		if s.endsAgain(d.TurnID, merged) {
			break
		}
		s.Counts.TurnsFailed++
		s.endTurn(d.TurnID, d.Agent, merged)
	case *events.ModelCallFailed:
		s.Counts.ModelFailures++
	case *events.HandlerFailed:
		s.Counts.HandlerFailures++
	case *events.ApprovalGranted:
		s.settleApproval(d.ApprovalID, ApprovalGranted, d.By, own(e.Actor), d.Comment, e.Seq)
	case *events.ApprovalRejected:
		s.settleApproval(d.ApprovalID, ApprovalRejected, d.By, own(e.Actor), d.Reason, e.Seq)
	case *events.ApprovalExpired:
		s.expireApproval(d, own(e.Actor), e.Seq)
	case *events.SandboxRequested:
		// The placement changes with the runner's answer (SandboxPlaced).
		if !merged {
			s.Moving = &Move{Seq: e.Seq, ID: own(e.ID), Session: own(e.Session), Backend: d.Backend, Pool: d.Pool}
		}
	case *events.SandboxRefused:
		s.answered(e)
	default:
		return false
	}
	return true
}

func (s *State) tool(callID, name string, seq uint64) *Tool {
	if s.Tools == nil {
		s.Tools = map[string]*Tool{}
	}
	t := &Tool{CallID: callID, Tool: name, Status: ToolRequested}
	if old, ok := s.Tools[callID]; ok {
		c := *old // entries are replaced, never changed in place: View shares them
		t = &c
	}
	t.Seqs = append(slices.Clip(t.Seqs), seq)
	s.Tools[callID] = t
	return t
}

func (s *State) endTurn(id, agent string, merged bool) {
	if merged {
		return
	}
	if s.Turn != nil && s.Turn.ID == id {
		s.Turn = nil
	}
	s.LastAgent, s.LastTurn = agent, id
}

// endsAgain reports whether a session's own turn end is a second end of the
// turn that ended last: a duplicate, folded without effect.
func (s *State) endsAgain(id string, merged bool) bool {
	return !merged && id != "" && id == s.LastTurn
}

// settleApproval records the first decision of a requested approval. A
// second decision, which the ledger refuses now but may have accepted
// before it checked, changes nothing: the first is what the gated call
// acted on.
func (s *State) settleApproval(id, outcome, by, actor, reason string, seq uint64) {
	a, ok := s.Approvals[id]
	if !ok || a.Outcome != "" {
		return
	}
	a.Outcome, a.By, a.Actor, a.Reason, a.DecidedSeq = outcome, by, actor, reason, seq
	s.Approvals[id] = a
}

// expireApproval folds an expiry of a pending approval whose deadline it
// names (another is a stale timer's, which the ledger refuses now): an
// escalation asks the next role until the next deadline, then rejects;
// any other expiry settles the approval as expired.
func (s *State) expireApproval(d *events.ApprovalExpired, actor string, seq uint64) {
	a, ok := s.Approvals[d.ApprovalID]
	if !ok || a.Outcome != "" || a.Deadline != d.Deadline {
		return
	}
	if d.OnTimeout == events.TimeoutEscalate && d.EscalatedTo != "" {
		a.EscalatedFrom, a.Approver, a.Deadline, a.OnTimeout = a.Approver, d.EscalatedTo, d.NextDeadline, events.TimeoutReject
		a.EscalateTo, a.EscalateDeadline = "", ""
		s.Approvals[d.ApprovalID] = a
		return
	}
	a.Outcome, a.Actor, a.DecidedSeq = ApprovalExpired, actor, seq
	a.Reason = fmt.Sprintf("no decision by %s (%s)", d.Deadline, d.OnTimeout)
	s.Approvals[d.ApprovalID] = a
}

func mergeLabels(into, from map[string]string) map[string]string {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[string]string, len(from))
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

// own copies an attribute of an event the state keeps. An event parsed from
// a stored body (events.ParseStored) has its attributes as substrings of
// the body: a state keeping one would keep the whole body (a message a
// consumer received) alive for as long as the state lives in a cache,
// which with many idle sessions was most of what their events left in
// memory. Data decodes into copies already.
func own(s string) string { return strings.Clone(s) }

// answered ends the move e answers, if it is the one the session waits for.
func (s *State) answered(e events.Stored) {
	if s.Moving != nil && e.Causation == s.Moving.ID {
		s.Moving = nil
	}
}

// memoryActor is who a memory event was for: the memory service proposes
// it as itself, on behalf of the principal that asked (events.ExtOnBehalf,
// which the ledger keeps only from a service); without one, the proposer.
func memoryActor(e events.Stored) string {
	if e.OnBehalf != "" {
		return own(e.OnBehalf)
	}
	return own(e.Actor)
}
