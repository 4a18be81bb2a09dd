package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Reasons Watch skips a live message, in Warning.Err (match with errors.Is).
var (
	// ErrNotEvent: the live message is not a stored event (not JSON, not
	// an event of the session watched).
	ErrNotEvent = errors.New("not a stored event")
	// ErrForged: the live message is an event the ledger did not store: its
	// hash or chain link is wrong, the Verify hook refused it, or the
	// ledger's log holds another event (or none) at its sequence.
	ErrForged = errors.New("not the ledger's event")
)

// Warning is a live message Watch skipped. Anyone who may publish on a live
// subject can put messages there; Watch shows only the ledger's events.
type Warning struct {
	Session string // the session watched
	Subject string // the subject the message arrived on
	Seq     uint64 // the sequence it claims (0: none readable)
	Err     error  // why, wrapping ErrNotEvent or ErrForged
}

// String says what was skipped and why, in one line.
func (w Warning) String() string {
	if w.Seq == 0 {
		return fmt.Sprintf("watch %s: skipped the live message on %s: %v", w.Session, w.Subject, w.Err)
	}
	return fmt.Sprintf("watch %s: skipped the live message on %s (seq %d): %v", w.Session, w.Subject, w.Seq, w.Err)
}

// WatchOption configures Watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	from   uint64
	warn   func(Warning)
	verify func(events.Stored) error
	// drop, in tests only, loses live messages as a slow subscription does.
	drop func(*nats.Msg) bool
	// deltas, if set, takes the session's token deltas.
	deltas func(events.Delta)
}

// WithDeltas has Watch also call fn with each token delta of the session
// (events.Delta: the pieces of a model's answer as it streams, published
// live and never stored), on Watch's goroutine, as they come. A delta is a
// hint, not an event: it is not checked, may be missed, and the stored
// answer follows it; one that does not decode is skipped with a Warning.
func WithDeltas(fn func(events.Delta)) WatchOption {
	return func(c *watchConfig) { c.deltas = fn }
}

// From starts Watch at the session's event seq instead of its first.
func From(seq uint64) WatchOption {
	return func(c *watchConfig) { c.from = seq }
}

// WithWarnings has Watch call fn for each live message it skips (default:
// a warning on slog's default logger). fn runs on Watch's goroutine.
func WithWarnings(fn func(Warning)) WatchOption {
	return func(c *watchConfig) { c.warn = fn }
}

// WithVerify adds a check of each live event's origin, run after the
// sequence, chain link and hash checks: an error skips the event as forged.
// The hash and link checks alone cannot tell a forger who seals the next
// event correctly from the ledger, so without a Verify hook Watch confirms
// each live event against the ledger's log before showing it; an event at
// the expected sequence that passes fn is shown without asking the log. fn
// is the place for a check the ledger's key vouches for (a signature over
// the chain hash). Events read from the log are the ledger's reply and are
// not passed to fn.
func WithVerify(fn func(events.Stored) error) WatchOption {
	return func(c *watchConfig) { c.verify = fn }
}

// WithSignatures has Watch check each live event's signature (rathsig) with
// the keyring, the Verify hook a signing ledger's events call for; the
// ledger's keys come from Client.Keyring or, better, a pinned key file.
func WithSignatures(ring events.Keyring) WatchOption {
	return WithVerify(func(ev events.Stored) error {
		return ring.Verify(ev.Session, ev.Seq, ev.Hash, ev.Sig)
	})
}

// Watch calls fn for each event of a session's logical log (through its
// fork ancestry) in order, from the first or from the one an option
// From(seq) names, then for each new event as it is stored, until ctx ends
// or fn returns an error. No event is
// skipped or repeated: live events that arrive while the history is read are
// held back, and a gap in the live feed is filled from the log. A session
// that does not exist yet is waited for: its events arrive once it starts.
//
// The live subject is not trusted: anyone allowed to publish there can. A
// live message that is not a stored event of the session, or whose hash,
// chain link (rathprev, when it claims the next sequence) or WithVerify hook
// fails, is skipped with a Warning. Any other live event is confirmed by the
// ledger's log (rath.ledger.log): Watch shows the log's events from the next
// sequence to the head, which fills any gap, and reports the live event if
// the log holds another event at its sequence, or none; one read covers a
// burst of live events. Only an event at the next sequence that passes a
// WithVerify hook is shown without asking the log. So a forged event is
// never shown as event N, garbage does not end the watch, and a forged
// far-future sequence does not make Watch wait for it.
func (c *Client) Watch(ctx context.Context, id string, fn func(events.Stored) error, opts ...WatchOption) error {
	var cfg watchConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.warn == nil {
		cfg.warn = func(w Warning) {
			slog.Warn("watch: skipped a live message", "session", w.Session, "subject", w.Subject, "seq", w.Seq, "err", w.Err)
		}
	}
	live := make(chan *nats.Msg, 4096)
	tenant := c.as.Tenant
	if c.as.IsService() {
		tenant = "" // services watch sessions of every tenant
	}
	sub, err := c.nc.ChanSubscribe(events.LiveFilter(tenant, id), live)
	if err != nil {
		return fmt.Errorf("watch %s: %w", id, err)
	}
	defer sub.Unsubscribe()
	var deltas chan *nats.Msg // nil: none asked for
	if cfg.deltas != nil {
		deltas = make(chan *nats.Msg, 4096)
		dsub, err := c.nc.ChanSubscribe(events.DeltaFilter(tenant, id), deltas)
		if err != nil {
			return fmt.Errorf("watch %s: deltas: %w", id, err)
		}
		defer dsub.Unsubscribe()
	}
	// The subscription must be in place before the history is read, or an
	// event stored in between would be missed.
	if err := c.nc.FlushTimeout(c.timeout); err != nil {
		return fmt.Errorf("watch %s: %w", id, err)
	}
	w := &watcher{c: c, id: id, fn: fn, cfg: cfg, next: max(cfg.from, 1)}
	// Event 1 has no predecessor; after any other start the first event
	// shown comes from the log, which then makes the link known.
	w.linked = w.next == 1
	if err := w.fill(ctx, nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-live:
			if cfg.drop != nil && cfg.drop(m) {
				continue
			}
			if err := w.live(ctx, m); err != nil {
				return err
			}
		case m := <-deltas:
			var d events.Delta
			if err := json.Unmarshal(m.Data, &d); err != nil || d.Session != id {
				w.warn(m.Subject, 0, fmt.Errorf("not a delta of session %s: %v", id, err))
				continue
			}
			cfg.deltas(d)
		}
	}
}

// watcher is one Watch's position: the next sequence to show and the hash
// of the one before it.
type watcher struct {
	c      *Client
	id     string
	fn     func(events.Stored) error
	cfg    watchConfig
	next   uint64
	prev   string // the chain hash of event next-1
	linked bool   // prev is known
	fnErr  error  // what fn returned, passed through unchanged
}

// live decides one live message: skip it, show it, or ask the log.
func (w *watcher) live(ctx context.Context, m *nats.Msg) error {
	ev, err := events.ParseStored(m.Data)
	if err != nil {
		w.warn(m.Subject, 0, fmt.Errorf("%w: %v", ErrNotEvent, err))
		return nil
	}
	if ev.Session != w.id {
		w.warn(m.Subject, ev.Seq, fmt.Errorf("%w: it names session %q", ErrNotEvent, ev.Session))
		return nil
	}
	if ev.Seq < w.next {
		return nil // shown already, from the log or an earlier copy
	}
	vouched, err := w.check(ev)
	if err != nil {
		w.warn(m.Subject, ev.Seq, err)
		return nil
	}
	if ev.Seq == w.next && w.linked && vouched {
		return w.deliver(ev) // the hook vouches for its origin
	}
	return w.confirm(ctx, m.Subject, ev)
}

// check runs the checks a live event can pass on its own: its hash, its
// link when it claims the next sequence, and the Verify hook; vouched is
// whether the hook vouched for it. A hook that needs the signature record
// an event refers to (events.ErrDetached: the ledger stores the events of a
// batch that way) vouches for nothing, and the event is confirmed by the
// log, which serves it with its signature expanded.
func (w *watcher) check(ev events.Stored) (vouched bool, err error) {
	hash, err := events.ComputeHash(ev.Raw)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrForged, err)
	}
	if hash != ev.Hash {
		return false, fmt.Errorf("%w: hash mismatch: the body hashes to %s, it claims rathhash %s", ErrForged, hash, ev.Hash)
	}
	if ev.Seq == w.next && w.linked && ev.Prev != w.prev {
		return false, fmt.Errorf("%w: chain link: rathprev %q, but event %d's hash is %s", ErrForged, ev.Prev, ev.Seq-1, w.prev)
	}
	if w.cfg.verify == nil {
		return false, nil
	}
	switch err := w.cfg.verify(ev); {
	case errors.Is(err, events.ErrDetached):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%w: %v", ErrForged, err)
	}
	return true, nil
}

// confirm shows the log's events from the next sequence on (filling any gap
// the live feed left) and checks the live event against what the log holds
// at its sequence: the log wins.
func (w *watcher) confirm(ctx context.Context, subject string, ev events.Stored) error {
	var logged string
	if err := w.fill(ctx, func(le events.Stored) {
		if le.Seq == ev.Seq {
			logged = le.Hash
		}
	}); err != nil {
		return err
	}
	switch {
	case logged == "":
		w.warn(subject, ev.Seq, fmt.Errorf("%w: the ledger's log has no event %d (it ends at %d)", ErrForged, ev.Seq, w.next-1))
	case logged != ev.Hash:
		w.warn(subject, ev.Seq, fmt.Errorf("%w: the ledger's log holds another event at %d (hash %s, not %s); the log's was shown", ErrForged, ev.Seq, logged, ev.Hash))
	}
	return nil
}

// fill shows the log's events from the next sequence to the head. seen, if
// set, is called with each before it is shown.
func (w *watcher) fill(ctx context.Context, seen func(events.Stored)) error {
	err := w.c.Events(ctx, w.id, Range{From: w.next}, func(ev events.Stored) error {
		if ev.Seq < w.next {
			return nil
		}
		if ev.Seq > w.next {
			return fmt.Errorf("watch %s: the ledger's log skipped from %d to %d", w.id, w.next, ev.Seq)
		}
		if seen != nil {
			seen(ev)
		}
		return w.deliver(ev)
	})
	switch {
	case w.fnErr != nil:
		return w.fnErr
	case errors.Is(err, api.ErrNotFound):
		return nil // not started yet: the live feed brings its events
	case err != nil:
		return fmt.Errorf("watch %s: %w", w.id, err)
	}
	return nil
}

// deliver shows an event and moves past it.
func (w *watcher) deliver(ev events.Stored) error {
	if err := w.fn(ev); err != nil {
		w.fnErr = err
		return err
	}
	w.next, w.prev, w.linked = ev.Seq+1, ev.Hash, true
	return nil
}

func (w *watcher) warn(subject string, seq uint64, err error) {
	w.cfg.warn(Warning{Session: w.id, Subject: subject, Seq: seq, Err: err})
}
