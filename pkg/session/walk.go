package session

import (
	"fmt"

	"github.com/openrath/rath/pkg/events"
)

// ReadFunc reads a run of a session's own events (seg.Session's events with
// seg.From <= seq <= seg.To), in order, calling fn with each, and returns
// fn's first error. A merge's segments name such runs, which are also the
// logical log of their session at those sequences, so the store, the
// ledger's log operation and a dossier's files read the same events.
type ReadFunc func(seg events.Segment, fn func(events.Stored) error) error

// Step is one event as Walk folds it: the event, its decoded data (nil when
// it does not decode) and whether a merge took it in (ApplyMerged) rather
// than it being of the session's logical log (Apply).
type Step struct {
	events.Stored
	Data   any
	Merged bool
}

// Hooks are what a view over a session's log adds to the fold. Every field
// may be nil.
type Hooks struct {
	// Before is called with the state before the step is applied, After
	// with the state after it. A hook reads the state; it must not change
	// it.
	Before, After func(s *State, e Step)
	// Read reads the events a merge takes in. Nil: a session.merged event
	// is applied without them (only its own record, the merge, is kept).
	Read ReadFunc
}

// Walk folds the events of a session's logical log, in order, into s, as
// Apply does, and takes in each merge's events as the ledger does (through
// h.Read): every event of its segments that s does not cover yet, in order,
// a nested merge's segments before the nested merge itself, all before the
// merge event. It is the one fold with merges: the ledger, the workers and
// every view over a log (the dossier, the demo's printer) walk with it, so
// they agree on what a log means and what a merge takes in. It fails only
// when h.Read does.
func Walk(s *State, evs []events.Stored, h Hooks) error {
	for _, e := range evs {
		if err := h.step(s, e, false); err != nil {
			return err
		}
	}
	return nil
}

// step applies e (merged: taken in by a merge), after the events it takes
// in when it is a merge.
func (h Hooks) step(s *State, e events.Stored, merged bool) error {
	data, err := e.Decode()
	if err != nil {
		data = nil
	}
	if m, ok := data.(*events.SessionMerged); ok && h.Read != nil {
		if err := h.takeIn(s, m); err != nil {
			return fmt.Errorf("fold merge of %s at %d: %w", m.Source, e.Seq, err)
		}
	}
	st := Step{Stored: e, Data: data, Merged: merged}
	if h.Before != nil {
		h.Before(s, st)
	}
	applyData(s, e, data, merged)
	if h.After != nil {
		h.After(s, st)
	}
	return nil
}

// takeIn applies the events of m's segments that s does not cover yet.
func (h Hooks) takeIn(s *State, m *events.SessionMerged) error {
	for _, seg := range m.Segments {
		err := h.Read(seg, func(src events.Stored) error {
			if s.Covers(src.Session, src.Seq) {
				return nil // held already: through ancestry or an earlier merge
			}
			return h.step(s, src, true)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
