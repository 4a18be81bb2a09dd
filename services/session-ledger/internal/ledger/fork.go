package ledger

import (
	"context"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/schema"
	"github.com/openrath/rath/pkg/session"
)

// Fork creates a child session whose first event records the parent, the fork
// point and the parent's hash there. No parent event is copied: the cost does
// not depend on At, only on reading at most K events from a snapshot.
func (l *Ledger) Fork(ctx context.Context, req api.ForkRequest) (api.Ack, error) {
	if err := events.ValidateSessionID(req.Parent); err != nil {
		return api.Ack{}, api.Errorf(api.CodeInvalidSession, "parent: %v", err)
	}
	if req.ID == "" {
		req.ID = NewSessionID()
	}
	if err := events.ValidateSessionID(req.ID); err != nil {
		return api.Ack{}, api.Errorf(api.CodeInvalidSession, "fork: %v", err)
	}
	parent, err := l.headOf(ctx, req.Parent)
	if err != nil {
		return api.Ack{}, err
	}
	if err := admitTenant(ctx, parent.Tenant, req.Parent, ""); err != nil {
		return api.Ack{}, err
	}
	at := req.At
	if at == 0 {
		at = parent.Seq
	}
	if at > parent.Seq {
		return api.Ack{}, api.Errorf(api.CodeOutOfRange, "cannot fork %s at %d: its head is %d", req.Parent, at, parent.Seq)
	}
	parentHash := parent.Hash
	if at != parent.Seq {
		// At most K events from the nearest snapshot (or marker) before At.
		atEv, err := l.eventAt(ctx, req.Parent, at)
		if err != nil {
			return api.Ack{}, err
		}
		// The fork chains onto this event: check it like any event the
		// ledger did not seal in this process.
		if err := l.trust(ctx, atEv); err != nil {
			return api.Ack{}, err
		}
		parentHash = atEv.Hash
	}
	opts := []events.Option{events.WithSource(sourceOr(req.EventSource))}
	if req.EventID != "" {
		opts = append(opts, events.WithID(req.EventID))
	}
	ev, err := events.New(req.ID, &events.SessionForked{
		Parent: req.Parent, AtSeq: at, ParentHash: parentHash, Reason: req.Reason, Labels: req.Labels,
		Workflow: req.Workflow, WorkflowHash: req.WorkflowHash, WorkflowRef: req.WorkflowRef,
	}, opts...)
	if err != nil {
		return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	if req.WorkflowRef != "" || req.Workflow != "" || req.WorkflowHash != "" {
		// A fork onto another workflow (ADR 0035): the same shapes as a
		// start's, and a reference to run, not a name alone.
		if req.WorkflowRef == "" {
			return api.Ack{}, api.Errorf(api.CodeMalformed, "fork of %s: workflow and workflow_hash need the workflow_ref of the bundle to run", req.Parent)
		}
		if err := schema.Validate(events.TypeSessionForked, ev.Data()); err != nil {
			return api.Ack{}, api.Errorf(api.CodeSchema, "%v", err)
		}
	}

	e := l.entry(req.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			return api.Ack{}, unavailable(err)
		}
	}
	if err := admit(ctx, e.state, req.ID, events.TypeSessionForked); err != nil {
		return api.Ack{}, err
	}
	if e.state != nil {
		if a, ok, ferr := l.findStored(ctx, req.ID, ev.ID()); ferr == nil && ok {
			return a, nil
		}
		return api.Ack{}, api.Errorf(api.CodeExists, "cannot fork onto %s: session exists (head %d)", req.ID, e.state.Seq)
	}
	if err := l.takeStart(ctx, req.ID); err != nil {
		return api.Ack{}, err
	}
	stamp(ctx, &ev, parent.Tenant)
	body, hash, err := events.Seal(&ev, at+1, parentHash, l.cfg.Key)
	if err != nil {
		return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	kind, _ := events.Lookup(events.TypeSessionForked)
	res, err := l.store.Append(ctx, parent.Tenant, req.ID, kind.Token, body, ev.ID(), at+1, hash, 0)
	if eventstore.IsConflict(err) {
		e.loaded = false
		return api.Ack{}, api.Errorf(api.CodeExists, "cannot fork onto %s: another ledger created it first", req.ID)
	}
	if err != nil {
		return api.Ack{}, unavailable(err)
	}
	if res.Duplicate {
		a, err := l.ackAt(ctx, res.StreamSeq)
		if err == nil && a.Session != req.ID {
			return api.Ack{}, duplicateID(a)
		}
		return a, err
	}
	// The fork's state is folded when it is first used (from the parent's
	// snapshot before At): forking costs the same at any At.
	e.state, e.loaded = nil, false
	a := api.Ack{ID: ev.ID(), Session: req.ID, Seq: at + 1, Hash: hash, Sig: events.Sig(ev), StreamSeq: res.StreamSeq}
	e.remember(a)
	l.heads.record(a, true)
	labels := map[string]string{}
	for k, v := range parent.Labels {
		labels[k] = v
	}
	for k, v := range req.Labels {
		labels[k] = v
	}
	workflow := parent.Workflow
	if req.WorkflowRef != "" {
		workflow = req.Workflow
	}
	rec := eventstore.Record{ID: req.ID, Tenant: parent.Tenant, Status: string(session.StatusActive), Parent: req.Parent, ForkSeq: at,
		Workflow: workflow, Task: parent.Task, Labels: labels, Created: ev.Time(), Updated: ev.Time(), Seq: at + 1}
	if err := l.store.PutRecord(ctx, rec); err != nil {
		l.log.Warn("session index not updated", "session", req.ID, "err", err)
	}
	return a, nil
}

// position is what a fork needs of its parent's head.
type position struct {
	Seq      uint64
	Hash     string
	Workflow string
	Task     string // clipped as the index keeps it
	Labels   map[string]string
	Tenant   string
}

// headOf reads a session's head without copying its state.
func (l *Ledger) headOf(ctx context.Context, id string) (position, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return position{}, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := l.current(ctx, e); err != nil {
		return position{}, err
	}
	st := e.state
	return position{Seq: st.Seq, Hash: st.Hash, Workflow: st.Workflow, Task: indexTaskOf(st.Task), Labels: st.Labels, Tenant: tenantOf(st)}, nil
}

// head returns a copy of the current state of a session.
func (l *Ledger) head(ctx context.Context, id string) (*session.State, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := l.current(ctx, e); err != nil {
		return nil, err
	}
	return e.state.Clone(), nil
}

// current brings an entry up to date with the stream (another ledger may
// have appended: a read sees every stored event). The caller holds e.mu.
func (l *Ledger) current(ctx context.Context, e *entry) error {
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			return unavailable(err)
		}
	} else if err := l.refresh(ctx, e); err != nil {
		return unavailable(err)
	}
	if e.state == nil {
		return notFound(e.id)
	}
	return nil
}

func sourceOr(s string) string {
	if s == "" {
		return "rath/session-ledger"
	}
	return s
}
