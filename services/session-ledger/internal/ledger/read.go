package ledger

import (
	"context"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// The ledger reads sessions through internal/fold, the one reading of a logical
// log that the worker services' caches share (ADR 0016). These are its
// names for it inside the ledger.

// segment is where one session's own events start in a logical log.
type segment = fold.Segment

// errStop ends a scan early without an error.
var errStop = fold.ErrStop

// lineageOf returns the segments of a session's logical log.
func (l *Ledger) lineageOf(ctx context.Context, id string) ([]segment, error) {
	return l.reader.Lineage(ctx, id)
}

// ownEvents calls fn for each of a session's own events with from <= seq <= to
// (to 0: no bound), starting the read at the nearest snapshot.
func (l *Ledger) ownEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	return l.reader.OwnEvents(ctx, id, from, to, fn)
}

// logicalEvents calls fn for each event of a session's logical log with
// from <= seq <= to (to 0: no bound).
func (l *Ledger) logicalEvents(ctx context.Context, id string, from, to uint64, fn func(events.Stored, eventstore.Msg) error) error {
	return l.reader.LogicalEvents(ctx, id, from, to, fn)
}

// stateAt folds a session up to sequence n and returns the state with the
// stream sequence of the last own event folded.
func (l *Ledger) stateAt(ctx context.Context, id string, n uint64) (*session.State, uint64, error) {
	return l.reader.StateAt(ctx, id, n)
}

// eventAt reads the event at sequence n of a session's logical log.
func (l *Ledger) eventAt(ctx context.Context, id string, n uint64) (events.Stored, error) {
	return l.reader.EventAt(ctx, id, n)
}

// scanOwn is store.ScanParsed over what the session's own log holds, hot or
// purged to its archive.
func (l *Ledger) scanOwn(ctx context.Context, id string, from, upTo uint64, fn func(events.Stored, eventstore.Msg) error) error {
	return l.reader.ScanOwn(ctx, id, from, upTo, fn)
}

// scanOwnMsgs is store.ScanSession over what the session's own log holds,
// hot or purged to its archive.
func (l *Ledger) scanOwnMsgs(ctx context.Context, id string, from, upTo uint64, fn func(eventstore.Msg) error) error {
	return l.reader.ScanOwnMsgs(ctx, id, from, upTo, fn)
}

// fold applies one event of a session's own log to st, reading in the events
// a merge takes in.
func (l *Ledger) fold(ctx context.Context, st *session.State, ev events.Stored) error {
	return l.reader.Fold(ctx, st, ev)
}
