package ledger

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// maxConflictRetries bounds how often one append re-reads and retries after
// another ledger appended to the same session first.
const maxConflictRetries = 16

// maxBusyRetries bounds how often an atomic append is tried again while
// JetStream has too many atomic batches open.
const maxBusyRetries = 8

// conflictPause backs off with jitter before retry n, so that a ledger with a
// queue of appends for a session cannot starve another one forever.
func conflictPause(ctx context.Context, n int) {
	d := time.Duration(rand.Int64N(int64(100*time.Microsecond) << min(n, 8)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// commitOpts says how commit stores its events and names its refusals.
type commitOpts struct {
	// atomic stores the events as one JetStream atomic batch (one event
	// too), and a refusal names the event it is about (atIndex). Otherwise
	// commit stores one event as one message.
	atomic bool
	// before, if set, runs against the state an event is judged on, after
	// its lifecycle checks: merge computes what it takes in, archive checks
	// the head it read.
	before func(context.Context, *session.State, *event.Event) error
}

// at names the event a refusal is about, in an atomic append.
func (o commitOpts) at(i int, err error) error {
	if o.atomic {
		return atIndex(i, err)
	}
	return err
}

// commit appends checked events of one session, whose expectation has been
// taken, all or none: the one append loop of the ledger (Append, AppendAtomic,
// and a batch's events the pipelined rounds hand back). Under the session's
// lock it loads the session, admits the proposer, answers a proposal stored
// already with its acks (storedAlready), judges and seals each event against
// the state the ones before it leave (sealAll), signs them, and stores them
// conditional on the session's last stored event. A refusal of the state
// machine is judged again on the stream's latest once; a lost race (another
// ledger appended first) pauses, reads the stream's latest and tries again,
// and a session whose tail was cut is refused damaged (refreshAfterConflict).
func (l *Ledger) commit(ctx context.Context, evs []event.Event, x expectation, o commitOpts) ([]api.Ack, error) {
	id := evs[0].Subject()
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	refreshed, counted, busy := false, false, 0
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
		st, ss, stale, err := l.sealAll(ctx, e, evs, x, o)
		if stale && !refreshed {
			// The cache may be behind another ledger: judge on the
			// stream's latest before refusing.
			refreshed = true
			if rerr := l.refresh(ctx, e); rerr != nil {
				return nil, unavailable(rerr)
			}
			attempt--
			continue
		}
		if stale {
			// Proposed again after its session moved on: the answer is
			// the stored events' acks.
			if acks, ok, serr := l.storedAlready(ctx, e, evs, true); serr != nil || ok {
				return acks, serr
			}
		}
		if err != nil {
			return nil, err
		}
		if e.state == nil && !counted {
			// A new session: one of the tenant's starts.
			if err := l.takeStart(ctx, id); err != nil {
				return nil, err
			}
			counted = true
		}
		if err := l.signSealed(e.id, evs, ss); err != nil {
			return nil, err
		}
		res, err := l.storeSealed(ctx, e, evs, ss, o.atomic)
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
		if res.Duplicate {
			// JetStream held the message ID: the event was stored before.
			a, err := l.ackAt(ctx, res.StreamSeq)
			if err != nil {
				return nil, err
			}
			return []api.Ack{a}, nil
		}
		acks, err := l.stored(ctx, e, st, evs, ss, res.StreamSeq)
		if err == nil {
			l.heads.record(acks[len(acks)-1], acks[0].Seq == 1)
		}
		return acks, err
	}
}

// sealed is an event's kind, its place in its session's chain and its
// stored body.
type sealed struct {
	kind       events.Kind
	seq        uint64
	prev, hash string
	body       []byte
}

// sealAll judges each event against the state the ones before it leave
// (transition, then o.before) and seals it onto that state, unsigned. It
// returns the state the events before the last leave: for one event the
// entry's own, which is folded only once the event is stored; for several a
// view of it, so that a refusal or a lost race leaves the entry as it was.
// stale reports a refusal that a cache behind the stream may have caused
// (the session's state machine): commit judges it again on the latest.
func (l *Ledger) sealAll(ctx context.Context, e *entry, evs []event.Event, x expectation, o commitOpts) (st *session.State, ss []sealed, stale bool, err error) {
	st = e.state
	if st == nil && (o.atomic || len(evs) > 1) {
		return nil, nil, true, notFound(e.id) // only a single event starts a session
	}
	if len(evs) > 1 {
		st = st.View()
	}
	by := l.decider(ctx)
	ss = make([]sealed, len(evs))
	for i := range evs {
		ev := &evs[i]
		ex := expectation{}
		if i == 0 {
			ex = x
		}
		if err := transition(st, e.id, ev.Type(), ev.Data(), ex.seq, ex.set, by); err != nil {
			return nil, nil, true, o.at(i, err)
		}
		if o.before != nil {
			if err := o.before(ctx, st, ev); err != nil {
				return nil, nil, false, o.at(i, err)
			}
		}
		s := sealed{seq: 1}
		if st != nil {
			s.seq, s.prev = st.Seq+1, st.Hash
		}
		s.kind, _ = events.Lookup(ev.Type())
		stamp(ctx, ev, "")
		if s.body, s.hash, err = events.Seal(ev, s.seq, s.prev, nil); err != nil {
			return nil, nil, false, o.at(i, sealRefusal(s.seq, err))
		}
		if err := l.fits(s.body); err != nil {
			return nil, nil, false, o.at(i, err)
		}
		ss[i] = s
		if i < len(evs)-1 {
			if err := l.fold(ctx, st, storedOf(ev, e.id, s)); err != nil {
				return nil, nil, false, unavailable(err)
			}
		}
	}
	return st, ss, false, nil
}

// signSealed signs sealed events and attaches each signature to its body.
func (l *Ledger) signSealed(id string, evs []event.Event, ss []sealed) error {
	leaves := make([]events.Leaf, len(ss))
	for i, s := range ss {
		leaves[i] = events.Leaf{Session: id, Seq: s.seq, Hash: s.hash}
	}
	sigs, err := l.sign.signAll(leaves)
	if err != nil {
		return unavailable(err)
	}
	for i, sig := range sigs {
		ss[i].body = events.AttachSig(&evs[i], ss[i].body, sig)
	}
	return nil
}

// storeSealed stores signed events conditional on the session's last stored
// event: one as one message, or (atomic) all as one JetStream atomic batch.
func (l *Ledger) storeSealed(ctx context.Context, e *entry, evs []event.Event, ss []sealed, atomic bool) (eventstore.Appended, error) {
	tenant := tenantFor(&evs[0], e.state)
	if !atomic {
		s := ss[0]
		return l.store.Append(ctx, tenant, e.id, s.kind.Token, s.body, evs[0].ID(), s.seq, s.hash, e.streamSeq)
	}
	batch := make([]eventstore.Sealed, len(ss))
	for i, s := range ss {
		batch[i] = eventstore.Sealed{Token: s.kind.Token, Body: s.body, EventID: evs[i].ID(), Seq: s.seq, Hash: s.hash}
	}
	return l.store.AppendAtomic(ctx, tenant, e.id, batch, e.streamSeq)
}

// stored moves a session's cached head past events JetStream just stored,
// the last at stream sequence streamSeq and the others just below it. st is
// the state the events before the last leave (sealAll; the entry's own for
// one event), into which the last is folded here. The caller holds e.mu.
func (l *Ledger) stored(ctx context.Context, e *entry, st *session.State, evs []event.Event, ss []sealed, streamSeq uint64) ([]api.Ack, error) {
	from, opened := uint64(0), turnStart(e.state)
	if e.state != nil {
		from = e.state.Seq
	}
	if st == nil {
		st = &session.State{} // a session's start
	}
	last := len(evs) - 1
	if err := l.fold(ctx, st, storedOf(&evs[last], e.id, ss[last])); err != nil {
		// Stored but not folded: drop the cache so the next use reloads.
		e.loaded = false
		return nil, unavailable(err)
	}
	e.state, e.streamSeq = st, streamSeq
	acks := make([]api.Ack, len(evs))
	lifecycle := false
	for i := range evs {
		telemetry.Stored(evs[i].Type(), evs[i].Time(), evs[i].Data(), opened)
		acks[i] = api.Ack{ID: evs[i].ID(), Session: e.id, Seq: ss[i].seq, Hash: ss[i].hash, Sig: events.Sig(evs[i]),
			StreamSeq: streamSeq - uint64(last-i)}
		e.remember(acks[i])
		lifecycle = lifecycle || ss[i].kind.Token == events.TokenLifecycle
	}
	l.afterAppend(ctx, e, from, lifecycle)
	return acks, nil
}

// storedAlready answers events proposed again: if the first is stored,
// every one must be, and their acks are returned; events stored in part are
// refused. It looks among the acks this ledger gave lately, and with search
// also in the session's log, which costs a scan of it: only when there is
// reason to think the events were stored.
func (l *Ledger) storedAlready(ctx context.Context, e *entry, evs []event.Event, search bool) ([]api.Ack, bool, error) {
	find := func(eventID string) (api.Ack, bool, error) {
		if a, ok := e.lately(eventID); ok {
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

// refreshAfterConflict reads the session's latest from the stream after an
// append lost on its expected sequence, and refuses a session whose tail
// was cut as damaged: when the stream holds nothing new, the conflict was
// not another appender's, and the log is checked against what this ledger
// stored and signed. Every append reaches it (commit; a batch's lost race
// through commit), so a cut tail is never answered as a conflict.
func (l *Ledger) refreshAfterConflict(ctx context.Context, e *entry) error {
	before, cached := e.streamSeq, uint64(0)
	if e.state != nil {
		cached = e.state.Seq
	}
	if err := l.refresh(ctx, e); err != nil {
		return unavailable(err)
	}
	if e.streamSeq != before {
		return nil
	}
	// Nothing new, yet the session's last stored event is not the one
	// cached: it was removed. Load from the stream (which compares it with
	// the recorded head), and compare it with what this ledger itself
	// stored, which the record may not show yet.
	e.loaded = false
	if err := l.load(ctx, e); err != nil {
		return unavailable(err)
	}
	if e.state != nil && e.state.Seq >= cached {
		return nil
	}
	e.loaded = false
	// Confirmed by the stream's leader, not a lagging replica.
	last, err := l.store.LastFromLeader(ctx, e.id)
	if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
		return unavailable(err)
	}
	if err != nil || lastSeq(last) < cached {
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its log ends before %d, which this ledger stored and signed: events were removed or lost", e.id, cached)
	}
	return nil
}
