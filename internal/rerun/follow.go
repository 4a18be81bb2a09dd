package rerun

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// run follows a replay as its events arrive: it maps the replay's
// branches to the original's and applies the original's external inputs
// when the mapped branch reaches the sequence before theirs.
type run struct {
	orig    *replay.Tree
	rc      *client.Client
	arrived chan events.Stored

	toOrig  map[string]*replay.Branch // replay branch → original branch
	fromOrg map[string]string         // original branch → replay branch
	forks   map[string]map[uint64]int // replay branch → forks seen per fork point
	heads   map[string]uint64
	closed  map[string]bool
	ids     map[string]string // original event ID → replay event ID, by position
	pending map[string][]*pendingInput
	inputs  []*pendingInput
	// forkInputs are the forks a person made (a fork event no Rath service
	// produced: rath fork, a correction), by original parent branch: the
	// replay makes them itself, as it applies the other inputs.
	forkInputs map[string][]*pendingInput
}

type pendingInput struct {
	replay.Input
	applied bool
	err     error
}

func newRun(orig *replay.Tree, rc *client.Client) *run {
	r := &run{orig: orig, rc: rc, arrived: make(chan events.Stored, 4096),
		toOrig: map[string]*replay.Branch{}, fromOrg: map[string]string{}, forks: map[string]map[uint64]int{},
		heads: map[string]uint64{}, closed: map[string]bool{}, ids: map[string]string{}, pending: map[string][]*pendingInput{}}
	r.forkInputs = map[string][]*pendingInput{}
	external := map[string][]replay.Input{}
	for _, in := range replay.External(orig) {
		external[in.Branch.ID] = append(external[in.Branch.ID], in)
	}
	// In tree order: a branch's fork (when a person made it), then its
	// other inputs.
	for _, b := range orig.Branches {
		if b.Parent != nil && len(b.Events) > 0 && !replay.Produced(b.Events[0]) {
			p := &pendingInput{Input: replay.Input{Branch: b, Event: b.Events[0]}}
			r.inputs = append(r.inputs, p)
			r.forkInputs[b.Parent.ID] = append(r.forkInputs[b.Parent.ID], p)
		}
		for _, in := range external[b.ID] {
			p := &pendingInput{Input: in}
			r.inputs = append(r.inputs, p)
			r.pending[b.ID] = append(r.pending[b.ID], p)
		}
	}
	return r
}

func (r *run) started(ack api.Ack) {
	r.toOrig[ack.Session], r.fromOrg[r.orig.Root.ID] = r.orig.Root, ack.Session
	r.heads[ack.Session] = ack.Seq
	r.ids[r.orig.Root.Events[0].ID] = ack.ID
}

// seen records an event of the replay's tree; it reports whether the event
// is new and of the tree (the root, or a fork of one of its branches).
func (r *run) seen(ev events.Stored) bool {
	if _, ok := r.heads[ev.Session]; ok && ev.Seq <= r.heads[ev.Session] {
		return false
	}
	if ev.Type == events.TypeSessionForked {
		var f events.SessionForked
		if json.Unmarshal(ev.Data, &f) == nil {
			if _, ours := r.heads[f.Parent]; !ours {
				return false
			}
			if parent := r.toOrig[f.Parent]; parent != nil {
				if r.forks[f.Parent] == nil {
					r.forks[f.Parent] = map[uint64]int{}
				}
				k := r.forks[f.Parent][f.AtSeq]
				r.forks[f.Parent][f.AtSeq]++
				for _, ch := range parent.Children {
					if ch.ForkSeq != f.AtSeq {
						continue
					}
					if k == 0 {
						r.toOrig[ev.Session], r.fromOrg[ch.ID] = ch, ev.Session
						break
					}
					k--
				}
			}
		}
	}
	if _, ours := r.heads[ev.Session]; !ours && ev.Type != events.TypeSessionForked {
		return false // another session: the memory seed session
	}
	r.heads[ev.Session] = max(r.heads[ev.Session], ev.Seq)
	if ev.Type == events.TypeSessionClosed {
		r.closed[ev.Session] = true
	}
	if o := r.toOrig[ev.Session]; o != nil {
		for _, e := range o.Events {
			if e.Seq == ev.Seq {
				r.ids[e.ID] = ev.ID
			}
		}
	}
	return true
}

// follow handles arriving events until the replay is done, wait passed or
// nothing arrived for idle; it reports whether the replay finished.
func (r *run) follow(ctx context.Context, wait, idle time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	quiet := time.NewTimer(idle)
	defer quiet.Stop()
	for !r.done() {
		select {
		case ev := <-r.arrived:
			quiet.Reset(idle)
			if !r.seen(ev) {
				continue
			}
			if o := r.toOrig[ev.Session]; o != nil {
				_ = r.applyReady(ctx, o, ev.Seq)
				_ = r.forkReady(ctx, o, r.heads[ev.Session])
			}
		case <-deadline.C:
			return false
		case <-quiet.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// done: every replay branch is closed, or has reached the head of an
// original branch that was still open, and every original branch has its
// counterpart.
func (r *run) done() bool {
	for _, b := range r.orig.Branches {
		id, ok := r.fromOrg[b.ID]
		if !ok {
			return false
		}
		if !r.closed[id] && (b.Closed() || r.heads[id] < b.Head()) {
			return false
		}
	}
	for id := range r.heads {
		if _, mapped := r.toOrig[id]; !mapped && !r.closed[id] {
			return false
		}
	}
	return true
}

// applyReady applies the original branch's external inputs that come right
// after seq, in order.
func (r *run) applyReady(ctx context.Context, o *replay.Branch, seq uint64) error {
	target := r.fromOrg[o.ID]
	for _, p := range r.pending[o.ID] {
		if p.applied || p.err != nil {
			continue
		}
		if p.Event.Seq != seq+1 {
			continue
		}
		p.err = r.apply(ctx, target, p.Event)
		p.applied = p.err == nil
		if p.err != nil {
			return p.err
		}
		seq++
	}
	return nil
}

// forkReady makes the forks a person made of original branch o whose fork
// point the replay's counterpart has reached (head), in the original's
// order: the fork event is then seen like any, and the fork's own inputs
// (a correction) are applied as it arrives.
func (r *run) forkReady(ctx context.Context, o *replay.Branch, head uint64) error {
	for _, p := range r.forkInputs[o.ID] {
		if p.applied || p.err != nil || p.Branch.ForkSeq > head {
			continue
		}
		var f events.SessionForked
		if p.err = json.Unmarshal(p.Event.Data, &f); p.err != nil {
			return p.err
		}
		parent := r.fromOrg[o.ID]
		_, p.err = r.rc.Fork(ctx, api.ForkRequest{Parent: parent, At: p.Branch.ForkSeq, Reason: f.Reason, Labels: f.Labels,
			EventID: events.DerivedID("rath.replay", parent, p.Event.ID), EventSource: p.Event.Source,
			Workflow: f.Workflow, WorkflowHash: f.WorkflowHash, WorkflowRef: f.WorkflowRef})
		if p.err != nil {
			p.err = fmt.Errorf("replay: fork %s at %d as the original's %s was: %w", parent, p.Branch.ForkSeq, p.Branch.ID, p.err)
			return p.err
		}
		p.applied = true
	}
	return nil
}

// apply re-applies one external input to the replay branch.
func (r *run) apply(ctx context.Context, session string, e events.Stored) error {
	d, err := e.Decode()
	if err != nil {
		return err
	}
	req := events.DerivedID("rath.replay", session, e.ID)
	switch d := d.(type) {
	case *events.MemoryWritten:
		var ids []string
		for _, id := range d.Provenance.EventIDs {
			if m, ok := r.ids[id]; ok {
				ids = append(ids, m)
			}
		}
		_, err = r.rc.Memory().Add(ctx, memoryapi.AddRequest{RequestID: req, ItemID: d.ItemID, Session: session,
			Content: d.Content, Tags: d.Tags, Scope: d.Scope, Evidence: d.Provenance.Evidence, EventIDs: ids})
	case *events.MemoryRecalled:
		_, err = r.rc.Memory().Recall(ctx, memoryapi.RecallRequest{RequestID: req, Session: session, Query: d.Query,
			Filter: memoryapi.Filter{Scopes: d.Scopes, Tags: d.Tags}, K: len(d.Items), Agent: d.Agent})
	case *events.MemoryRetracted:
		_, err = r.rc.Memory().Retract(ctx, memoryapi.RetractRequest{RequestID: req, ItemID: d.ItemID, Version: d.Version,
			Session: session, By: d.By, Reason: d.Reason})
	case *events.SessionPaused:
		_, err = r.rc.Pause(ctx, session, d.Reason)
	case *events.SessionResumed:
		_, err = r.rc.Resume(ctx, session, d.Reason)
	case *events.SessionClosed:
		_, err = r.rc.Close(ctx, session, *d)
	default:
		ev, nerr := events.NewRaw(session, e.Type, e.Data, events.WithID(req), events.WithSource(e.Source))
		if err = nerr; err == nil {
			_, err = r.rc.Append(ctx, ev)
		}
	}
	if err != nil {
		return fmt.Errorf("replay: re-apply the original's %s (branch %s, seq %d): %w", e.Type, e.Session, e.Seq, err)
	}
	return nil
}

func (r *run) report() []ExternalInput {
	out := []ExternalInput{}
	for _, p := range r.inputs {
		in := ExternalInput{Branch: p.Branch.Pos, Seq: p.Event.Seq, Type: p.Event.Type, Applied: p.applied}
		if p.err != nil {
			in.Error = p.err.Error()
		}
		out = append(out, in)
	}
	return out
}
