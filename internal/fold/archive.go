package fold

import (
	"context"
	"errors"
	"fmt"

	"github.com/openrath/rath/internal/archive"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// Purged sessions.
//
// Reads never depend on a cache being told about a purge: every scan of a
// session's own events (ScanOwn, ScanOwnMsgs, FirstOwn) looks at the first
// hot message it gets; if it is a rath.session.archived whose archived head
// lies at or after where the scan started, the events before it were purged
// and are read from the bundle, which is checked against its reference and
// verified before use.

// maxBundles bounds the parsed bundles kept in memory.
const maxBundles = 32

var errNoArchive = errors.New("no archive")

// bundle reads, verifies and caches the bundle a session's archived event
// names.
func (r *Reader) bundle(ctx context.Context, id string, a *events.SessionArchived) (*archive.Bundle, error) {
	r.archMu.Lock()
	b, ok := r.arch[a.BundleRef]
	r.archMu.Unlock()
	if ok {
		return b, nil
	}
	data, err := r.store.GetBlob(ctx, a.BundleRef)
	if err != nil {
		return nil, fmt.Errorf("session %s was purged from the hot stream; its archive %s in %s cannot be read: %w", id, a.BundleRef, events.BucketBlobs, err)
	}
	b, err = archive.Parse(data)
	if err == nil {
		err = b.Verify()
	}
	if err != nil {
		return nil, fmt.Errorf("session %s was purged from the hot stream; its archive %s does not verify: %w", id, a.BundleRef, err)
	}
	if b.Session != id || b.HeadSeq != a.HeadSeq || b.HeadHash != a.HeadHash {
		return nil, fmt.Errorf("session %s: archive %s holds %s up to %d, the archived event says %d", id, a.BundleRef, b.Session, b.HeadSeq, a.HeadSeq)
	}
	r.archMu.Lock()
	if len(r.arch) >= maxBundles {
		for k := range r.arch {
			delete(r.arch, k)
			break
		}
	}
	r.arch[a.BundleRef] = b
	r.archMu.Unlock()
	return b, nil
}

// archivedIn returns the bundle holding the events a scan from stream
// sequence from would miss, when first (the first hot message the scan got)
// is a rath.session.archived event and the archived head is at or after from.
func (r *Reader) archivedIn(ctx context.Context, id string, first eventstore.Msg, from uint64) (*archive.Bundle, error) {
	ev, err := events.ParseStored(first.Body)
	if err != nil || ev.Type != events.TypeSessionArchived {
		return nil, errNoArchive
	}
	d, err := ev.Decode()
	if err != nil {
		return nil, errNoArchive
	}
	a := d.(*events.SessionArchived)
	if from > a.HeadStreamSeq {
		return nil, errNoArchive
	}
	return r.bundle(ctx, id, a)
}

// ScanOwnMsgs is store.ScanSession over what the session's own log holds,
// hot or purged to its archive.
func (r *Reader) ScanOwnMsgs(ctx context.Context, id string, from, upTo uint64, fn func(eventstore.Msg) error) error {
	if from == 0 {
		from = 1
	}
	seen := false
	err := r.store.ScanSession(ctx, id, from, upTo, func(m eventstore.Msg) error {
		if !seen {
			seen = true
			if err := r.replayPurged(ctx, id, m, from, upTo, fn); err != nil {
				return err
			}
		}
		return fn(m)
	})
	if err != nil || seen || upTo == 0 {
		// Unbounded, a purged session's scan always reaches its archived
		// event, which stays hot: nothing more to look at.
		return err
	}
	// Nothing hot in a bounded range: it may lie wholly in a purged archive.
	first, ferr := r.store.First(ctx, id)
	if ferr != nil {
		return nil
	}
	return r.replayPurged(ctx, id, first, from, upTo, fn)
}

// replayPurged calls fn for the bundle entries in [from, upTo] when first
// shows the session was purged below it.
func (r *Reader) replayPurged(ctx context.Context, id string, first eventstore.Msg, from, upTo uint64, fn func(eventstore.Msg) error) error {
	b, err := r.archivedIn(ctx, id, first, from)
	if errors.Is(err, errNoArchive) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range b.Entries {
		if e.StreamSeq < from || upTo != 0 && e.StreamSeq > upTo {
			continue
		}
		if err := fn(eventstore.Msg{StreamSeq: e.StreamSeq, Subject: e.Subject, Body: e.Event}); err != nil {
			return err
		}
	}
	return nil
}

// ScanOwn is store.ScanParsed over what the session's own log holds, hot or
// purged to its archive.
func (r *Reader) ScanOwn(ctx context.Context, id string, from, upTo uint64, fn func(events.Stored, eventstore.Msg) error) error {
	if from == 0 {
		from = 1
	}
	parsed := func(m eventstore.Msg) error {
		ev, err := events.ParseStored(m.Body)
		if err != nil {
			return fmt.Errorf("session %s at stream %d: %w", id, m.StreamSeq, err)
		}
		return fn(ev, m)
	}
	seen := false
	err := r.store.ScanParsed(ctx, id, from, upTo, func(ev events.Stored, m eventstore.Msg) error {
		if !seen {
			seen = true
			if ev.Type == events.TypeSessionArchived {
				if err := r.replayPurged(ctx, id, m, from, upTo, parsed); err != nil {
					return err
				}
			}
		}
		return fn(ev, m)
	})
	if err != nil || seen || upTo == 0 {
		return err
	}
	first, ferr := r.store.First(ctx, id)
	if ferr != nil {
		return nil
	}
	return r.replayPurged(ctx, id, first, from, upTo, parsed)
}

// FirstOwn is store.First of a session's own log, hot or purged.
func (r *Reader) FirstOwn(ctx context.Context, id string) (eventstore.Msg, error) {
	first, err := r.store.First(ctx, id)
	if err != nil {
		return first, err
	}
	b, err := r.archivedIn(ctx, id, first, 1)
	if errors.Is(err, errNoArchive) {
		return first, nil
	}
	if err != nil {
		return eventstore.Msg{}, err
	}
	e := b.Entries[0]
	return eventstore.Msg{StreamSeq: e.StreamSeq, Subject: e.Subject, Body: e.Event}, nil
}
