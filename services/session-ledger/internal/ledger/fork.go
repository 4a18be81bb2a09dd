package ledger

import (
	"context"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
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
	parentHead, err := l.head(ctx, req.Parent)
	if err != nil {
		return api.Ack{}, err
	}
	at := req.At
	if at == 0 {
		at = parentHead.Seq
	}
	if at > parentHead.Seq {
		return api.Ack{}, api.Errorf(api.CodeOutOfRange, "cannot fork %s at %d: its head is %d", req.Parent, at, parentHead.Seq)
	}
	base, _, err := l.stateAt(ctx, req.Parent, at)
	if err != nil {
		return api.Ack{}, err
	}
	opts := []events.Option{events.WithSource(sourceOr(req.Source))}
	if req.EventID != "" {
		opts = append(opts, events.WithID(req.EventID))
	}
	ev, err := events.New(req.ID, &events.SessionForked{
		Parent: req.Parent, AtSeq: at, ParentHash: base.Hash, Reason: req.Reason, Labels: req.Labels,
	}, opts...)
	if err != nil {
		return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
	}

	e := l.entry(req.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			return api.Ack{}, unavailable(err)
		}
	}
	if e.state != nil {
		if a, ok, ferr := l.findStored(ctx, req.ID, ev.ID()); ferr == nil && ok {
			return a, nil
		}
		return api.Ack{}, api.Errorf(api.CodeExists, "cannot fork onto %s: session exists (head %d)", req.ID, e.state.Seq)
	}
	body, hash, err := events.Seal(&ev, at+1, base.Hash)
	if err != nil {
		return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	kind, _ := events.Lookup(events.TypeSessionForked)
	res, err := l.store.Append(ctx, req.ID, kind.Token, body, ev.ID(), at+1, hash, 0)
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
	stored, err := events.ParseStored(body)
	if err != nil {
		return api.Ack{}, fmt.Errorf("re-read fork event: %w", err)
	}
	session.Apply(base, stored)
	e.state, e.streamSeq, e.loaded = base, res.StreamSeq, true
	a := api.Ack{ID: ev.ID(), Session: req.ID, Seq: at + 1, Hash: hash, StreamSeq: res.StreamSeq}
	e.remember(a)
	l.afterAppend(ctx, e, kind)
	return a, nil
}

// head returns a copy of the current state of a session.
func (l *Ledger) head(ctx context.Context, id string) (*session.State, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			return nil, unavailable(err)
		}
	} else if err := l.refresh(ctx, e); err != nil {
		// Another ledger may have appended: a read sees every stored event.
		return nil, unavailable(err)
	}
	if e.state == nil {
		return nil, api.Errorf(api.CodeNotFound, "session %s does not exist", id)
	}
	return e.state.Clone(), nil
}

func sourceOr(s string) string {
	if s == "" {
		return "rath/session-ledger"
	}
	return s
}
