package fold

import (
	"context"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Log is a session's logical log as the ledger's log operation pages it:
// the Go client reads one (client.Client.Events, through an adapter).
type Log interface {
	// Events calls fn for each event of session id's logical log with
	// from <= seq <= to (to 0: the head), in order.
	Events(ctx context.Context, id string, from, to uint64, fn func(events.Stored) error) error
}

// FromLog folds a session's whole state at sequence at (0: its head) from
// its logical log, reading the events its merges take in from their own
// sessions' logs: the same fold as Reader.StateAt, for a reader with no
// access to the store (a tenant's client reads through the ledger). It
// costs the whole log; the ledger's state operation answers a bounded
// session.Overview instead.
func FromLog(ctx context.Context, log Log, id string, at uint64) (*session.State, error) {
	st := &session.State{}
	read := func(ctx context.Context, id string, from, to uint64, fn func(events.Stored) error) error {
		return log.Events(ctx, id, from, to, fn)
	}
	err := log.Events(ctx, id, 1, at, func(ev events.Stored) error {
		return foldWith(ctx, st, ev, read)
	})
	if err != nil {
		return nil, fmt.Errorf("fold %s from its log: %w", id, err)
	}
	if st.Seq == 0 {
		return nil, api.Errorf(api.CodeNotFound, "session %s does not exist", id)
	}
	if at != 0 && st.Seq != at {
		return nil, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, at, st.Seq)
	}
	return st, nil
}
