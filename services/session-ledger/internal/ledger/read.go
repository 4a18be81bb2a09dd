package ledger

import (
	"context"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// segment is where one session's own events start in a logical log. A root
// session's log is one segment from 1; a fork's log is its parent's segments
// up to the fork point, then its own from the fork point + 1.
type segment struct {
	Session   string
	From      uint64 // first own sequence
	StreamSeq uint64 // stream sequence of the first own event
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// lineageOf returns the segments of a session's logical log, read from the
// first event of each session in its ancestry. Lineage never changes once a
// session exists, so it is cached for good.
func (l *Ledger) lineageOf(ctx context.Context, id string) ([]segment, error) {
	l.lineMu.Lock()
	segs, ok := l.lineage[id]
	l.lineMu.Unlock()
	if ok {
		return segs, nil
	}
	first, err := l.firstOwn(ctx, id)
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
	own := segment{Session: id, From: ev.Seq, StreamSeq: first.StreamSeq}
	if ev.Type == events.TypeSessionForked {
		d, err := ev.Decode()
		if err != nil {
			return nil, fmt.Errorf("lineage of %s: %w", id, err)
		}
		parent, err := l.lineageOf(ctx, d.(*events.SessionForked).Parent)
		if err != nil {
			return nil, fmt.Errorf("lineage of %s: %w", id, err)
		}
		segs = append(append([]segment{}, parent...), own)
	} else {
		segs = []segment{own}
	}
	l.lineMu.Lock()
	l.lineage[id] = segs
	l.lineMu.Unlock()
	return segs, nil
}

// owner returns the segment holding sequence n, and the index of the segment.
func owner(segs []segment, n uint64) (segment, int) {
	for i := len(segs) - 1; i > 0; i-- {
		if n >= segs[i].From {
			return segs[i], i
		}
	}
	return segs[0], 0
}

// snapshotBelow finds the most recent stored snapshot of session seg.Session
// at or before n and at or after the segment's start. It tries a few multiples
// of K: a missing snapshot (too large, or lost to a crash) costs a longer read,
// never a wrong answer.
// withState asks for a snapshot holding a state (not a marker).
func (l *Ledger) snapshotBelow(ctx context.Context, seg segment, n uint64, withState bool) (eventstore.Snapshot, bool, error) {
	k := l.cfg.SnapshotEvery
	for s, tries := n/k*k, 0; s >= seg.From && s > 0 && tries < 3; s, tries = s-k, tries+1 {
		snap, err := l.store.GetSnapshot(ctx, seg.Session, s)
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

// ownEvents calls fn for each of a session's own events with from <= seq <= to
// (to 0: no bound), starting the read at the nearest snapshot.
func (l *Ledger) ownEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	segs, err := l.lineageOf(ctx, id)
	if err != nil {
		return err
	}
	own := segs[len(segs)-1]
	start := own.StreamSeq
	if from > own.From {
		snap, ok, err := l.snapshotBelow(ctx, own, from-1, false)
		if err != nil {
			return err
		}
		if ok {
			start = snap.StreamSeq + 1
		}
	}
	err = l.scanOwn(ctx, id, start, 0, func(ev events.Stored, m eventstore.Msg) error {
		if ev.Seq < from {
			return nil
		}
		if to != 0 && ev.Seq > to {
			return errStop
		}
		if err := fn(ev, m); err != nil {
			return err
		}
		if to != 0 && ev.Seq == to {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// logicalEvents calls fn for each event of a session's logical log (its fork
// ancestry's prefix, then its own events) with from <= seq <= to (to 0: no
// bound).
func (l *Ledger) logicalEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	segs, err := l.lineageOf(ctx, id)
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
		if err := l.ownEvents(ctx, seg.Session, lo, hi, fn); err != nil {
			return err
		}
	}
	return nil
}

// stateAt folds a session up to sequence n and returns the state with the
// stream sequence of the last own event folded. For n at or before a fork's
// fork point the answer is the ancestor's state at n. The returned state is
// the caller's own.
func (l *Ledger) stateAt(ctx context.Context, id string, n uint64) (*session.State, uint64, error) {
	segs, err := l.lineageOf(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	seg, i := owner(segs, n)
	var (
		st    *session.State
		start = seg.StreamSeq
	)
	snap, ok, err := l.snapshotBelow(ctx, seg, n, true)
	switch {
	case err != nil:
		return nil, 0, err
	case ok:
		st, start = snap.State, snap.StreamSeq+1
		if st.Seq == n {
			return st, snap.StreamSeq, nil
		}
	case i > 0:
		if st, _, err = l.stateAt(ctx, segs[i-1].Session, seg.From-1); err != nil {
			return nil, 0, err
		}
	default:
		st = &session.State{}
	}
	last := start - 1
	err = l.scanOwn(ctx, seg.Session, start, 0, func(ev events.Stored, m eventstore.Msg) error {
		if ev.Seq > n {
			return errStop
		}
		if err := l.fold(ctx, st, ev); err != nil {
			return err
		}
		last = m.StreamSeq
		if ev.Seq == n {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, 0, err
	}
	if st.Seq != n {
		return nil, 0, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, n, st.Seq)
	}
	return st, last, nil
}

// eventAt reads the event at sequence n of a session's logical log.
func (l *Ledger) eventAt(ctx context.Context, id string, n uint64) (events.Stored, error) {
	var found *events.Stored
	err := l.logicalEvents(ctx, id, n, n, func(ev events.Stored, _ eventstore.Msg) error {
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
