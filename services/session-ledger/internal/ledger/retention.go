package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Retention is the global retention policy of the ledgers. Every ledger runs
// the same pass; the work is idempotent (derived event IDs, conditional
// appends, an idempotent JetStream purge), so several ledgers need no leader:
// the first to act stores each event, the others get its ack.
type Retention struct {
	// ArchiveAfter archives a session this long after it was closed (its
	// last lifecycle event). Zero: closed sessions are archived only on
	// request (rath archive).
	ArchiveAfter time.Duration
	// PurgeAfter purges an archived session's events from the hot stream
	// this long after it was archived. Zero: never purged automatically.
	PurgeAfter time.Duration
	// Interval is how often the pass runs (default DefaultRetentionInterval).
	Interval time.Duration
}

// DefaultRetentionInterval is how often the retention pass runs when the
// policy does not say.
const DefaultRetentionInterval = 10 * time.Minute

// Enabled reports whether the pass has anything to do.
func (r Retention) Enabled() bool { return r.ArchiveAfter > 0 || r.PurgeAfter > 0 }

// Validate reports every problem at once.
func (r Retention) Validate() error {
	var errs []error
	if r.ArchiveAfter < 0 {
		errs = append(errs, fmt.Errorf("retention: archive-after must not be negative, got %s", r.ArchiveAfter))
	}
	if r.PurgeAfter < 0 {
		errs = append(errs, fmt.Errorf("retention: purge-after must not be negative, got %s", r.PurgeAfter))
	}
	if r.Interval < 0 {
		errs = append(errs, fmt.Errorf("retention: interval must not be negative, got %s", r.Interval))
	}
	return errors.Join(errs...)
}

// SetClock replaces the ledger's clock (event times it fills in, rejection
// times, and the retention policy's "now"). Call it before Serve.
func (l *Ledger) SetClock(now func() time.Time) { l.now = now }

// RetentionReport says what one retention pass did.
type RetentionReport struct {
	Archived []string
	Purged   []string
	// Skipped holds sessions due for a step that was refused or failed,
	// with the reason (a live fork keeps its parent from being purged).
	Skipped map[string]string
}

// Retain runs one retention pass over the session index: it archives the
// closed sessions closed for ArchiveAfter and purges the archived ones
// archived for PurgeAfter, except those a live fork reads through its
// lineage. A purge whose event is stored but whose JetStream purge did not
// run is completed.
func (l *Ledger) Retain(ctx context.Context) (RetentionReport, error) {
	rep := RetentionReport{Skipped: map[string]string{}}
	pol := l.cfg.Retention
	if !pol.Enabled() {
		return rep, nil
	}
	recs, err := l.store.Records(ctx)
	if err != nil {
		return rep, fmt.Errorf("retention: %w", err)
	}
	now := l.now()
	for _, r := range recs {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		switch session.Status(r.Status) {
		case session.StatusClosed:
			if pol.ArchiveAfter == 0 || now.Sub(r.Updated) < pol.ArchiveAfter {
				continue
			}
			if _, err := l.archive(ctx, r.ID, fmt.Sprintf("retention: closed for more than %s", pol.ArchiveAfter)); err != nil {
				rep.Skipped[r.ID] = err.Error()
				continue
			}
			rep.Archived = append(rep.Archived, r.ID)
		case session.StatusArchived:
			if r.Purged || pol.PurgeAfter == 0 || now.Sub(r.Updated) < pol.PurgeAfter {
				continue
			}
			// The purged event may be stored while its purge did not run
			// (a crash in between): the index marks a session purged only
			// once both ran, and this finishes the purge otherwise.
			done, err := l.purgedFromHot(ctx, r.ID)
			if err != nil {
				rep.Skipped[r.ID] = err.Error()
				continue
			}
			if done {
				continue
			}
			if _, err := l.purge(ctx, r.ID, fmt.Sprintf("retention: archived for more than %s", pol.PurgeAfter)); err != nil {
				rep.Skipped[r.ID] = err.Error()
				continue
			}
			rep.Purged = append(rep.Purged, r.ID)
		}
	}
	return rep, nil
}

// purgedFromHot reports whether a session's first hot event is its
// rath.session.archived: nothing before it is left to purge.
func (l *Ledger) purgedFromHot(ctx context.Context, id string) (bool, error) {
	first, err := l.store.First(ctx, id)
	if err != nil {
		return false, err
	}
	ev, err := events.ParseStored(first.Body)
	if err != nil {
		return false, err
	}
	return ev.Type == events.TypeSessionArchived, nil
}

// startRetention runs the retention pass every interval until ctx ends; the
// returned function waits for a pass in progress to finish.
func (l *Ledger) startRetention(ctx context.Context) (wait func()) {
	pol := l.cfg.Retention
	if !pol.Enabled() {
		return func() {}
	}
	every := pol.Interval
	if every == 0 {
		every = DefaultRetentionInterval
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			rep, err := l.Retain(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				l.log.Warn("retention pass failed", "err", err)
			case len(rep.Archived)+len(rep.Purged)+len(rep.Skipped) > 0:
				l.log.Info("retention pass", "archived", len(rep.Archived), "purged", len(rep.Purged), "skipped", rep.Skipped)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return wg.Wait
}
