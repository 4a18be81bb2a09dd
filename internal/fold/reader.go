// Package fold builds session states from the event store: the one reading
// of a session's logical log (its fork ancestry's prefix, then its own
// events, merges expanded, purged events read back from their archive) that
// the ledger answers "state at N" with, and an incremental cache of folded
// states for the worker services, which apply only the events they have not
// folded yet (ADR 0016).
package fold

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/openrath/rath/internal/archive"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// DefaultSnapshotEvery is the ledger's default K, the interval of the
// snapshots in rath-snapshots. A reader with another K than the ledger's
// only finds fewer snapshots: it folds from further back, never wrongly.
const DefaultSnapshotEvery = 128

// ErrStop ends a scan early without an error: a callback returns it, and
// the reader's scans that stop at a bound return nil in its place.
var ErrStop = errors.New("stop")

// Segment is where one session's own events start in a logical log. A root
// session's log is one segment from 1; a fork's log is its parent's segments
// up to the fork point, then its own from the fork point + 1.
type Segment struct {
	Session   string
	From      uint64 // first own sequence
	StreamSeq uint64 // stream sequence of the first own event
}

// Reader reads and folds sessions from an event store. It holds no session
// state, only what never changes: each session's lineage and the parsed
// archive bundles of purged sessions. It is safe for concurrent use.
type Reader struct {
	store *eventstore.Store
	every uint64

	lineMu  sync.Mutex
	lineage map[string][]Segment // immutable once a session exists

	archMu sync.Mutex
	arch   map[string]*archive.Bundle

	resumeMu sync.Mutex
	resume   map[resumeKey]uint64 // where a read stopped: see OwnEvents
}

// resumeKey names an event of a session's own log by its sequence.
type resumeKey struct {
	session string
	seq     uint64
}

// maxResume bounds the stopping points a reader remembers; it forgets them
// all when full (they only save reading).
const maxResume = 4096

// NewReader returns a reader over a store whose snapshots are stored every
// snapshotEvery events (0: DefaultSnapshotEvery).
func NewReader(store *eventstore.Store, snapshotEvery uint64) *Reader {
	if snapshotEvery == 0 {
		snapshotEvery = DefaultSnapshotEvery
	}
	return &Reader{store: store, every: snapshotEvery, lineage: map[string][]Segment{}, arch: map[string]*archive.Bundle{},
		resume: map[resumeKey]uint64{}}
}

// Store returns the reader's event store.
func (r *Reader) Store() *eventstore.Store { return r.store }

// Lineage returns the segments of a session's logical log, read from the
// first event of each session in its ancestry (api.CodeNotFound for a session
// without events). Lineage never changes once a session exists, so it is
// cached for good.
func (r *Reader) Lineage(ctx context.Context, id string) ([]Segment, error) {
	r.lineMu.Lock()
	segs, ok := r.lineage[id]
	r.lineMu.Unlock()
	if ok {
		return segs, nil
	}
	first, err := r.FirstOwn(ctx, id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, api.Errorf(api.CodeNotFound, "session %s does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	ev, err := events.ParseStored(first.Body)
	if err != nil {
		return nil, fmt.Errorf("lineage of %s: %w", id, err)
	}
	own := Segment{Session: id, From: ev.Seq, StreamSeq: first.StreamSeq}
	if ev.Type == events.TypeSessionForked {
		d, err := ev.Decode()
		if err != nil {
			return nil, fmt.Errorf("lineage of %s: %w", id, err)
		}
		parent, err := r.Lineage(ctx, d.(*events.SessionForked).Parent)
		if err != nil {
			return nil, fmt.Errorf("lineage of %s: %w", id, err)
		}
		segs = append(append([]Segment{}, parent...), own)
	} else {
		segs = []Segment{own}
	}
	r.lineMu.Lock()
	r.lineage[id] = segs
	r.lineMu.Unlock()
	return segs, nil
}

// Owner returns the segment holding sequence n, and the index of the segment.
func Owner(segs []Segment, n uint64) (Segment, int) {
	for i := len(segs) - 1; i > 0; i-- {
		if n >= segs[i].From {
			return segs[i], i
		}
	}
	return segs[0], 0
}

// SnapshotBelow finds the most recent stored snapshot of session seg.Session
// at or before n and at or after the segment's start; withState asks for a
// snapshot holding a state (not a marker). It tries a few multiples of K: a
// missing snapshot (too large, or lost to a crash) costs a longer read,
// never a wrong answer.
func (r *Reader) SnapshotBelow(ctx context.Context, seg Segment, n uint64, withState bool) (eventstore.Snapshot, bool, error) {
	k := r.every
	for s, tries := n/k*k, 0; s >= seg.From && s > 0 && tries < 3; s, tries = s-k, tries+1 {
		snap, err := r.store.GetSnapshot(ctx, seg.Session, s)
		if errors.Is(err, eventstore.ErrNotFound) || err == nil && withState && snap.Marker() {
			continue
		}
		if err != nil {
			return eventstore.Snapshot{}, false, err
		}
		return snap, true, nil
	}
	return eventstore.Snapshot{}, false, nil
}

// OwnEvents calls fn for each of a session's own events with from <= seq <= to
// (to 0: no bound), starting the read at the nearest snapshot, or where an
// earlier read stopped at from: a log read a page at a time stops at the
// event the next page starts with, and reading it again from the snapshot
// below would read up to K events twice. (An event's stream sequence never
// changes, and a session's events are stored in order, so a read from there
// misses nothing.)
func (r *Reader) OwnEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	segs, err := r.Lineage(ctx, id)
	if err != nil {
		return err
	}
	own := segs[len(segs)-1]
	start := own.StreamSeq
	r.resumeMu.Lock()
	at, resumed := r.resume[resumeKey{id, from}]
	r.resumeMu.Unlock()
	if resumed && at > start {
		start = at
	} else if from > own.From {
		snap, ok, err := r.SnapshotBelow(ctx, own, from-1, false)
		if err != nil {
			return err
		}
		if ok {
			start = snap.StreamSeq + 1
		}
	}
	stopped := func(ev events.Stored, m eventstore.Msg) {
		r.resumeMu.Lock()
		defer r.resumeMu.Unlock()
		if len(r.resume) >= maxResume {
			clear(r.resume)
		}
		r.resume[resumeKey{id, ev.Seq}] = m.StreamSeq
	}
	err = r.ScanOwn(ctx, id, start, 0, func(ev events.Stored, m eventstore.Msg) error {
		if ev.Seq < from {
			return nil
		}
		if to != 0 && ev.Seq > to {
			stopped(ev, m)
			return ErrStop
		}
		if err := fn(ev, m); err != nil {
			stopped(ev, m)
			return err
		}
		if to != 0 && ev.Seq == to {
			return ErrStop
		}
		return nil
	})
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// LogicalEvents calls fn for each event of a session's logical log (its fork
// ancestry's prefix, then its own events) with from <= seq <= to (to 0: no
// bound).
func (r *Reader) LogicalEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	segs, err := r.Lineage(ctx, id)
	if err != nil {
		return err
	}
	if from == 0 {
		from = 1
	}
	for i, seg := range segs {
		end := uint64(0)
		if i+1 < len(segs) {
			end = segs[i+1].From - 1
		}
		if end != 0 && end < from {
			continue
		}
		if to != 0 && seg.From > to {
			break
		}
		lo, hi := max(from, seg.From), end
		if to != 0 && (hi == 0 || to < hi) {
			hi = to
		}
		if err := r.OwnEvents(ctx, seg.Session, lo, hi, fn); err != nil {
			return err
		}
	}
	return nil
}

// StateAt folds a session up to sequence n and returns the state with the
// stream sequence of the last own event folded. For n at or before a fork's
// fork point the answer is the ancestor's state at n. The returned state is
// the caller's own.
func (r *Reader) StateAt(ctx context.Context, id string, n uint64) (*session.State, uint64, error) {
	segs, err := r.Lineage(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	seg, i := Owner(segs, n)
	var (
		st    *session.State
		start = seg.StreamSeq
	)
	snap, ok, err := r.SnapshotBelow(ctx, seg, n, true)
	switch {
	case err != nil:
		return nil, 0, err
	case ok:
		st, start = snap.State, snap.StreamSeq+1
		if st.Seq == n {
			return st, snap.StreamSeq, nil
		}
	case i > 0:
		if st, _, err = r.StateAt(ctx, segs[i-1].Session, seg.From-1); err != nil {
			return nil, 0, err
		}
	default:
		st = &session.State{}
	}
	last := start - 1
	err = r.ScanOwn(ctx, seg.Session, start, 0, func(ev events.Stored, m eventstore.Msg) error {
		if ev.Seq > n {
			return ErrStop
		}
		if err := r.Fold(ctx, st, ev); err != nil {
			return err
		}
		last = m.StreamSeq
		if ev.Seq == n {
			return ErrStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrStop) {
		return nil, 0, err
	}
	if st.Seq != n {
		return nil, 0, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, n, st.Seq)
	}
	return st, last, nil
}

// EventAt reads the event at sequence n of a session's logical log.
func (r *Reader) EventAt(ctx context.Context, id string, n uint64) (events.Stored, error) {
	var found *events.Stored
	err := r.LogicalEvents(ctx, id, n, n, func(ev events.Stored, _ eventstore.Msg) error {
		found = &ev
		return nil
	})
	if err != nil {
		return events.Stored{}, err
	}
	if found == nil {
		return events.Stored{}, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d", id, n)
	}
	return *found, nil
}

// Fold applies one event of a session's own log to st, reading in the events
// a merge takes in. Every state in Rath is folded through it (or through
// session.Apply for events without merges), so the ledger and the workers
// agree on what a log means.
func (r *Reader) Fold(ctx context.Context, st *session.State, ev events.Stored) error {
	return foldWith(ctx, st, ev, r.ownStored)
}

// ownStored is OwnEvents without the stored messages.
func (r *Reader) ownStored(ctx context.Context, id string, from, to uint64, fn func(events.Stored) error) error {
	return r.OwnEvents(ctx, id, from, to, func(ev events.Stored, _ eventstore.Msg) error { return fn(ev) })
}

// eventsFunc reads the events of a session's log with from <= seq <= to, in
// order: from the store (Reader.OwnEvents) or from the ledger (Log).
type eventsFunc func(ctx context.Context, id string, from, to uint64, fn func(events.Stored) error) error

// foldWith applies one event to st with session.Walk, reading the events a
// merge takes in through read.
func foldWith(ctx context.Context, st *session.State, ev events.Stored, read eventsFunc) error {
	return session.Walk(st, []events.Stored{ev}, session.Hooks{Read: func(seg events.Segment, fn func(events.Stored) error) error {
		return read(ctx, seg.Session, seg.From, seg.To, fn)
	}})
}
