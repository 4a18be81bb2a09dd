package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	jsoniter "github.com/json-iterator/go"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// maxBusyRetries bounds how often an atomic append is tried again while
// JetStream has too many atomic batches open.
const maxBusyRetries = 8

// AppendAtomic decides proposals to one session together and stores them
// all or none: each is checked as Append would check it, against the state
// the ones before it leave, and the whole is one JetStream atomic batch,
// conditional on the session's head. A model's answer (its text, the tool
// calls it asks for, the model call and the end of the turn) is stored this
// way, so a crash can never leave half of it in the log.
//
// A proposal may expect the head only on the first event. Proposing the same
// events again (same IDs) returns the original acks, marked duplicate; a
// batch of which only some events are stored is refused as duplicate_id.
func (l *Ledger) AppendAtomic(ctx context.Context, evs []event.Event) ([]api.Ack, error) {
	if len(evs) == 0 {
		return nil, api.Errorf(api.CodeMalformed, "an atomic append needs at least one event")
	}
	if len(evs) > eventstore.MaxAtomic {
		return nil, api.Errorf(api.CodeTooLarge, "%d events in one atomic append, at most %d", len(evs), eventstore.MaxAtomic)
	}
	var x expectation
	seen := make(map[string]bool, len(evs))
	for i := range evs {
		ev := &evs[i]
		if err := refuseOperation(ev.Type()); err != nil {
			return nil, atIndex(i, err)
		}
		if t := ev.Type(); t == events.TypeSessionStarted {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "%s cannot be part of an atomic append: start the session first", t))
		}
		if err := l.check(ev); err != nil {
			return nil, atIndex(i, err)
		}
		if ev.Subject() != evs[0].Subject() {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "an atomic append is for one session: %s, not %s", evs[0].Subject(), ev.Subject()))
		}
		if seen[ev.ID()] {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "event ID %s appears twice in the atomic append", ev.ID()))
		}
		seen[ev.ID()] = true
		ex := takeExpectation(ev)
		if i == 0 {
			x = ex
		} else if ex.set {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "only the first event of an atomic append may expect a head (%s)", events.ExtExpectedSeq))
		}
	}
	return l.appendAtomic(ctx, evs, x)
}

// atIndex names the proposal of an atomic append a refusal is about.
func atIndex(i int, err error) error {
	var e *api.Error
	if errors.As(err, &e) {
		return &api.Error{Code: e.Code, Message: fmt.Sprintf("event %d of the atomic append: %s", i, e.Message)}
	}
	return fmt.Errorf("event %d of the atomic append: %w", i, err)
}

// appendAtomic appends checked events of one session.
func (l *Ledger) appendAtomic(ctx context.Context, evs []event.Event, x expectation) ([]api.Ack, error) {
	id := evs[0].Subject()
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	refreshed, busy := false, 0
	for attempt := 0; ; attempt++ {
		if !e.loaded {
			if err := l.load(ctx, e); err != nil {
				return nil, unavailable(err)
			}
		}
		if err := admit(ctx, e.state, id, evs[0].Type()); err != nil {
			return nil, err
		}
		if acks, ok, err := l.storedAlready(ctx, e, evs, false); err != nil || ok {
			return acks, err
		}
		next, sealedEvs, err := l.sealAll(ctx, e, evs, x)
		if err != nil {
			var le *api.Error
			if !errors.As(err, &le) || le.Code == api.CodeTooLarge || le.Code == api.CodeMalformed {
				return nil, err
			}
			if !refreshed {
				// The cache may be behind another ledger: judge on the
				// stream's latest before refusing.
				refreshed = true
				if rerr := l.refresh(ctx, e); rerr != nil {
					return nil, unavailable(rerr)
				}
				continue
			}
			// A batch proposed again after its session moved on.
			if acks, ok, serr := l.storedAlready(ctx, e, evs, true); serr != nil || ok {
				return acks, serr
			}
			return nil, err
		}
		res, err := l.store.AppendAtomic(ctx, tenantOf(e.state), id, sealedEvs, e.streamSeq)
		duplicate := errors.Is(err, eventstore.ErrDuplicate)
		switch {
		case err == nil:
		case (eventstore.IsConflict(err) || duplicate) && attempt < maxConflictRetries:
			// Another ledger appended first, or JetStream holds an event of
			// the batch (it was proposed before): read the stream's latest
			// and decide again.
			conflictPause(ctx, attempt)
			if rerr := l.refreshAfterConflict(ctx, e); rerr != nil {
				return nil, rerr
			}
			if duplicate {
				if acks, ok, serr := l.storedAlready(ctx, e, evs, true); serr != nil || ok {
					return acks, serr
				}
			}
			continue
		case errors.Is(err, eventstore.ErrBatchBusy) && busy < maxBusyRetries:
			conflictPause(ctx, busy+4)
			busy++
			attempt--
			continue
		case eventstore.IsConflict(err):
			return nil, api.Errorf(api.CodeConflict, "session %s: other appenders won %d times in a row; retry", id, attempt+1)
		case errors.Is(err, eventstore.ErrTooLarge):
			return nil, api.Errorf(api.CodeTooLarge, "%v", err)
		default:
			return nil, unavailable(err)
		}
		first, opened := e.state.Seq, turnStart(e.state)
		e.state, e.streamSeq = next, res.StreamSeq
		for i := range evs {
			telemetry.Stored(evs[i].Type(), evs[i].Time(), evs[i].Data(), opened)
		}
		acks := make([]api.Ack, len(evs))
		for i := range evs {
			s := sealedEvs[i]
			acks[i] = api.Ack{ID: s.EventID, Session: id, Seq: s.Seq, Hash: s.Hash, Sig: events.Sig(evs[i]),
				StreamSeq: res.StreamSeq - uint64(len(evs)-1-i)}
			e.remember(acks[i])
		}
		l.afterAtomic(ctx, e, evs, first)
		l.heads.record(acks[len(acks)-1], acks[0].Seq == 1)
		return acks, nil
	}
}

// storedAlready answers a batch proposed again: if its first event is
// stored, every event must be, and their acks are returned; a batch stored
// in part is refused. It looks among the acks this ledger gave lately, and
// with search also in the session's log, which costs a scan of it: only
// when there is reason to think the batch was stored.
func (l *Ledger) storedAlready(ctx context.Context, e *entry, evs []event.Event, search bool) ([]api.Ack, bool, error) {
	find := func(eventID string) (api.Ack, bool, error) {
		if a, ok := e.recent[eventID]; ok {
			a.Duplicate = true
			a, err := l.receipt(ctx, a) // a batch's event refers to its record
			return a, err == nil, err
		}
		if e.state == nil || !search {
			return api.Ack{}, false, nil
		}
		return l.findStored(ctx, e.id, eventID)
	}
	first, ok, err := find(evs[0].ID())
	if err != nil {
		return nil, false, unavailable(err)
	}
	if !ok {
		return nil, false, nil
	}
	acks := []api.Ack{first}
	for _, ev := range evs[1:] {
		a, ok, err := find(ev.ID())
		if err != nil {
			return nil, false, unavailable(err)
		}
		if !ok {
			return nil, false, api.Errorf(api.CodeDuplicateID, "event %s of this atomic append is stored already (at %d) but %s is not: an atomic append proposed again must be the same events", first.ID, first.Seq, ev.ID())
		}
		acks = append(acks, a)
	}
	return acks, true, nil
}

// sealAll checks each event against the state the ones before it leave,
// seals it onto that state and signs them together. It returns the state
// after the last event and the events ready to store; the entry's state is
// untouched.
func (l *Ledger) sealAll(ctx context.Context, e *entry, evs []event.Event, x expectation) (*session.State, []eventstore.Sealed, error) {
	if e.state == nil {
		return nil, nil, notFound(e.id)
	}
	st := e.state.View()
	out := make([]eventstore.Sealed, len(evs))
	leaves := make([]events.Leaf, len(evs))
	bodies := make([][]byte, len(evs))
	for i := range evs {
		ev := &evs[i]
		ex := expectation{}
		if i == 0 {
			ex = x
		}
		if err := transition(st, e.id, ev.Type(), ev.Data(), ex.seq, ex.set, l.decider(ctx)); err != nil {
			return nil, nil, atIndex(i, err)
		}
		seq, prev := st.Seq+1, st.Hash
		stamp(ctx, ev, "")
		body, hash, err := events.Seal(ev, seq, prev, nil)
		if err != nil {
			return nil, nil, atIndex(i, sealRefusal(seq, err))
		}
		if err := l.fits(body); err != nil {
			return nil, nil, atIndex(i, err)
		}
		if err := l.fold(ctx, st, storedOf(ev, e.id, seq, prev, hash, body)); err != nil {
			return nil, nil, unavailable(err)
		}
		kind, _ := events.Lookup(ev.Type())
		out[i] = eventstore.Sealed{Token: kind.Token, EventID: ev.ID(), Seq: seq, Hash: hash}
		leaves[i] = events.Leaf{Session: e.id, Seq: seq, Hash: hash}
		bodies[i] = body
	}
	sigs, err := l.sign.signAll(leaves)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	for i, sig := range sigs {
		out[i].Body = events.AttachSig(&evs[i], bodies[i], sig)
	}
	return st, out, nil
}

// afterAtomic does afterAppend's work once for the events of an atomic
// append: a snapshot if the append crossed a multiple of SnapshotEvery, the
// session index if any event changed the lifecycle.
func (l *Ledger) afterAtomic(ctx context.Context, e *entry, evs []event.Event, from uint64) {
	kind := events.Kind{}
	for i := range evs {
		if k, _ := events.Lookup(evs[i].Type()); k.Token == events.TokenLifecycle {
			kind = k
		}
	}
	l.afterAppendFrom(ctx, e, kind, from)
}

// handleAtomic answers an atomic append: a JSON array of structured-mode
// CloudEvents of one session (api.ContentTypeBatch), stored all or none.
// The reply holds one ack per event; a refusal refuses the whole and is
// recorded once, naming the event it is about.
func (l *Ledger) handleAtomic(ctx context.Context, m *nats.Msg) (any, error) {
	ctx = tracing.Extract(ctx, m.Header)
	ctx, span := tracing.Tracer("session-ledger").Start(ctx, "rath.ledger.atomic", trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	var items []jsoniter.RawMessage
	if err := jsoniter.ConfigFastest.Unmarshal(m.Data, &items); err != nil {
		refusal := api.Errorf(api.CodeMalformed, "%s: the body must be a JSON array of structured CloudEvents (%s): %v", m.Subject, api.ContentTypeBatch, err)
		return nil, l.recordRejection(ctx, m, "atomic", event.Event{}, refusal, "")
	}
	span.SetAttributes(attribute.Int("rath.batch", len(items)))
	tp := tracing.Traceparent(ctx)
	evs := make([]event.Event, 0, len(items))
	for i, raw := range items {
		ev, err := events.FromNATS(nil, raw)
		if err != nil {
			return nil, l.recordRejection(ctx, m, "atomic", event.Event{}, api.Errorf(api.CodeMalformed, "event %d of the atomic append: %v", i, err), "")
		}
		if tp != "" && events.Traceparent(ev) == "" {
			ev.SetExtension(events.ExtTraceparent, tp)
		}
		evs = append(evs, ev)
	}
	acks, err := l.AppendAtomic(ctx, evs)
	if err != nil {
		if api.Permanent(err) {
			var first event.Event
			if len(evs) > 0 {
				first = evs[0]
			}
			return nil, l.recordRejection(ctx, m, "atomic", first, err, "")
		}
		return nil, err
	}
	out := api.BatchReply{Results: make([]api.BatchResult, len(acks))}
	for i := range acks {
		out.Results[i].Ack = &acks[i]
	}
	return out, nil
}
