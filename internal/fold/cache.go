package fold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/openrath/rath/internal/lru"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// DefaultMaxBytes bounds the states a Cache keeps when its Config says 0.
const DefaultMaxBytes = 256 << 20

// CacheConfig tunes a Cache.
type CacheConfig struct {
	// MaxBytes bounds, approximately, the bytes of the folded states kept
	// (their JSON size when loaded plus the stored size of each event folded
	// since); the least recently used sessions are dropped beyond it, and
	// the session in use is kept even if it alone exceeds it. 0:
	// DefaultMaxBytes.
	MaxBytes int64
	// SnapshotEvery is the ledger's K (0: DefaultSnapshotEvery): where the
	// cache looks for snapshots when it loads a session.
	SnapshotEvery uint64
	// Shared makes the cache one for several consumers of a process (the
	// selector, the agent worker, the tool runner and the memory service
	// of rath up, ADR 0038), which handle a session's events at different
	// sequences. StateSince and State at 0 answer from the session's head
	// and leave where it is the state kept for callers that ask at a
	// sequence (StateAndHead, State at a sequence): a consumer ahead does
	// not move it past one behind, which would then fold the session anew.
	// That state is kept behind the head for SharedTail events, or more
	// while they fit in a sixteenth of MaxBytes (a caller further behind
	// is folded anew from a snapshot, and the state kept there when it is
	// within SharedTail of the head). Until a caller
	// asks for a session at a sequence, its entry is kept as a positional
	// cache keeps it. Without Shared the cache is positional: StateSince
	// folds up to the sequence it is asked for, which suits one consumer
	// whose triggers come in order.
	Shared bool
}

// SharedTail is how many events a shared cache keeps read and not folded
// behind a session's head, for callers asking at a sequence, at the least;
// it keeps more while they fit in a sixteenth of its MaxBytes, so that a
// caller that fell behind a burst (a batch of thousands of events appended
// at once, which the consumers that only observe it take faster than the
// selector decides on it) goes on from its state instead of being folded
// anew from a snapshot at each of its events.
const SharedTail = 256

// CacheOr returns c, or when c is nil a new cache reading from store: a
// service given its process's cache uses it, one run alone builds its own.
func CacheOr(c *Cache, store *eventstore.Store, cfg CacheConfig) *Cache {
	if c != nil {
		return c
	}
	return NewCache(store, cfg)
}

// Validate reports every problem at once.
func (c CacheConfig) Validate() error {
	var errs []error
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("state cache size must not be negative, got %d", c.MaxBytes))
	}
	if c.SnapshotEvery == 1 {
		errs = append(errs, errors.New("snapshot interval must be at least 2"))
	}
	return errors.Join(errs...)
}

// Cache keeps the folded states of the sessions a worker handles and brings
// each up to date by applying only the events it has not folded yet: a
// session it does not hold is loaded from the nearest snapshot and the log
// after it (Reader.StateAt, as the ledger does), and a session it holds is
// refreshed by reading the session's own log from the stream sequence after
// the last event it folded, unless the worker's consumer showed it those
// events already (Observe). A state it returns is the caller's own (a
// session.State.View), equal to what the ledger's State answers for the
// same session and sequence, whatever happened in between: redeliveries,
// another process folding the same session, eviction, forks, merges,
// compactions, purges. It is safe for concurrent use; calls for one session
// are serialised.
type Cache struct {
	reader  *Reader
	entries *lru.Sized[string, *entry]

	loads, refolds, scans, lasts atomic.Int64
	// fed: Observe was called; refresh reads the last event first.
	fed atomic.Bool
	// shared: CacheConfig.Shared; tailBytes: what a shared entry's tail
	// may hold beyond SharedTail events.
	shared    bool
	tailBytes int64
}

// entry is one session's folded state. st is folded up to some sequence;
// tail holds the session's own events read after it and not folded yet (a
// caller asked for an earlier sequence than the head, and may ask for the
// next ones); head, while the tail is not empty and a caller asked for it,
// is st with the tail folded in, kept up to date as events are read, so a
// burst of events costs each one fold into each state, not a fold of the
// whole tail per call. Its mutex serialises every use of the session.
type entry struct {
	id string
	mu sync.Mutex

	st        *session.State // nil until loaded
	streamSeq uint64         // stream sequence of the last event read (folded or in tail)
	tail      []events.Stored
	head      *session.State // nil: st is the head, or nobody asked
	gap       bool           // Observe was shown an event beyond the next
	asked     bool           // a caller asked for the session
	// atAsked: a caller asked for the session at a sequence (stateAt); a
	// shared cache keeps st behind the head for it.
	atAsked bool

	pmu     sync.Mutex // guards pending
	pending []observed // observed while mu was held, for its holder
	// Approximate bytes of st, tail and head: a state's JSON size when
	// loaded, plus the stored size of each event folded into it since.
	stSize, tailSize, headSize int64
}

// NewCache returns a cache reading from store.
func NewCache(store *eventstore.Store, cfg CacheConfig) *Cache {
	max := cfg.MaxBytes
	if max == 0 {
		max = DefaultMaxBytes
	}
	return &Cache{reader: NewReader(store, cfg.SnapshotEvery), entries: lru.New[string, *entry](max), shared: cfg.Shared, tailBytes: max / 16}
}

// Reader returns the reader the cache folds with.
func (c *Cache) Reader() *Reader { return c.reader }

// Stats counts what a cache did since it was made.
type Stats struct {
	// Sessions and Bytes are what it holds now.
	Sessions int
	Bytes    int64
	// Loads counts sessions loaded from a snapshot and the log (a session
	// seen for the first time, or again after eviction).
	Loads int64
	// Refolds counts states asked for at a sequence below what the cache
	// had folded, folded anew from a snapshot.
	Refolds int64
	// Scans counts refreshes that read a session's log from where the cache
	// stopped (a fed cache that holds every event scans none); Lasts, the
	// reads of a session's last event by a fed cache's refreshes.
	Scans, Lasts int64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	return Stats{Sessions: c.entries.Len(), Bytes: c.entries.Bytes(), Loads: c.loads.Load(), Refolds: c.refolds.Load(), Scans: c.scans.Load(), Lasts: c.lasts.Load()}
}

// State returns the state of session id at sequence at, 0 for its head (the
// last event stored, as of the call), like the ledger's State. A sequence at
// or after what the cache has folded costs the events in between; an
// earlier one is folded anew from a snapshot. A fed cache (Observe) answers
// the head without folding the events after the state its handlers use: a
// trigger of the session still waiting to be handled would be below it.
func (c *Cache) State(ctx context.Context, id string, at uint64) (*session.State, error) {
	slot := c.slot(id)
	e := slot.Value
	c.lock(ctx, e)
	defer e.mu.Unlock()
	defer c.account(slot)
	if at == 0 {
		if err := c.current(ctx, e); err != nil {
			return nil, err
		}
		if c.shared && e.atAsked {
			return c.sharedHead(ctx, e)
		}
		if c.fed.Load() {
			return c.headOf(ctx, e)
		}
		if err := c.foldTail(ctx, e, 0); err != nil {
			return nil, err
		}
		return e.st.View(), nil
	}
	return c.stateAt(ctx, e, at)
}

// ErrBehind is StateSince's error when the head it read is below an event
// the caller got from the stream: the replica of the sessions stream that
// answered lags (on a cluster, a node that was stopped or restarted and is
// catching up). Asked again shortly, a current replica answers. It is not
// an api.Error: a handler that returns it is retried, not given up.
var ErrBehind = errors.New("a replica of the sessions stream is behind an event delivered from it")

// StateSince returns session id's head, which must include sequence seq: an
// event delivered from the stream (a handler's trigger). A head below it,
// or no session at all, was read from a replica that lags, and is ErrBehind
// rather than a state: taken for the head, it would make a handler drop its
// trigger as superseded (seen on a cluster whose leader was stopped with
// SIGSTOP: a turn never taken, a session never closed).
//
// A positional cache folds up to seq and keeps what came after it apart,
// like StateAndHead: a handler's next trigger of the session comes after
// this one, and a state cannot be unfolded (a selector that decides on
// trigger seq+1 after a StateSince of seq would otherwise fold the session
// anew from the log). A shared one answers from the head and leaves the
// state of callers at a sequence where it is (CacheConfig.Shared).
func (c *Cache) StateSince(ctx context.Context, id string, seq uint64) (*session.State, error) {
	slot := c.slot(id)
	e := slot.Value
	c.lock(ctx, e)
	defer e.mu.Unlock()
	defer c.account(slot)
	shared := c.shared && e.atAsked
	err := c.current(ctx, e)
	if err == nil && !shared {
		err = c.foldTail(ctx, e, seq)
	}
	if api.CodeOf(err) == api.CodeNotFound {
		return nil, fmt.Errorf("state of %s: no events, but %d was delivered: %w", id, seq, ErrBehind)
	}
	if err != nil {
		return nil, err
	}
	var st *session.State
	if shared {
		st, err = c.sharedHead(ctx, e)
	} else {
		st, err = c.headOf(ctx, e)
	}
	if err != nil {
		return nil, err
	}
	if st.Seq < seq {
		return nil, fmt.Errorf("state of %s: head %d, but %d was delivered: %w", id, st.Seq, seq, ErrBehind)
	}
	return st, nil
}

// sharedHead is a shared cache's answer from the head of a session a
// caller asked for at a sequence; the caller holds e.mu and brought the
// entry up to date. The state behind stays where it is, within SharedTail
// events of the head.
func (c *Cache) sharedHead(ctx context.Context, e *entry) (*session.State, error) {
	if err := c.trim(ctx, e, false); err != nil {
		return nil, err
	}
	return c.headOf(ctx, e)
}

// trim folds a shared cache's oldest unfolded events into the state behind
// until at most SharedTail remain; the caller holds e.mu. Observe trims
// with noRead: it stops at a merge, whose fold reads the merged session,
// for the next caller to fold.
func (c *Cache) trim(ctx context.Context, e *entry, noRead bool) error {
	if !c.shared || len(e.tail) <= SharedTail || e.tailSize <= c.tailBytes {
		return nil
	}
	// Fold the oldest until the rest fits in tailBytes, keeping at least
	// SharedTail.
	n, size := 0, e.tailSize
	for n < len(e.tail)-SharedTail && size > c.tailBytes {
		size -= eventSize(e.tail[n])
		n++
	}
	upTo := e.tail[n-1].Seq
	if noRead {
		for _, ev := range e.tail[:n] {
			if ev.Type == events.TypeSessionMerged {
				if ev.Seq == e.st.Seq+1 {
					return nil
				}
				upTo = ev.Seq - 1
				break
			}
		}
	}
	return c.foldTail(ctx, e, upTo)
}

// headOf returns the entry's state with its tail folded in, kept as e.head
// while the tail is not empty; the caller holds e.mu.
func (c *Cache) headOf(ctx context.Context, e *entry) (*session.State, error) {
	if len(e.tail) == 0 {
		return e.st.View(), nil
	}
	if e.head == nil {
		head := e.st.View()
		for _, ev := range e.tail {
			if err := c.reader.Fold(ctx, head, ev); err != nil {
				return nil, c.fail(e, fmt.Errorf("fold session %s at %d: %w", e.id, ev.Seq, err))
			}
		}
		e.head = head
		// About as much again: the head's slices part from st's as it grows.
		e.headSize = e.stSize + e.tailSize
	}
	return e.head.View(), nil
}

// StateAndHead returns the state of session id at sequence at and its head,
// for a caller that decides on the one and guards with the other (the
// selector, ADR 0008). The cache stays at at, with the events after it read
// but not folded: the next call for at+1 costs one event, not a refold. When
// nothing was stored after at, both are the same state.
func (c *Cache) StateAndHead(ctx context.Context, id string, at uint64) (atState, head *session.State, err error) {
	slot := c.slot(id)
	e := slot.Value
	c.lock(ctx, e)
	defer e.mu.Unlock()
	defer c.account(slot)
	if at == 0 {
		return nil, nil, fmt.Errorf("state of %s: StateAndHead needs a sequence", id)
	}
	if atState, err = c.stateAt(ctx, e, at); err != nil {
		return nil, nil, err
	}
	if err := c.refresh(ctx, e); err != nil {
		return nil, nil, err
	}
	if err := c.trim(ctx, e, false); err != nil {
		return nil, nil, err
	}
	if e.st.Seq != at {
		// at was below the cache and folded anew: the head is the cache
		// folded on.
		if err := c.foldTail(ctx, e, 0); err != nil {
			return nil, nil, err
		}
		return atState, e.st.View(), nil
	}
	if len(e.tail) == 0 {
		return atState, atState, nil
	}
	if head, err = c.headOf(ctx, e); err != nil {
		return nil, nil, err
	}
	return atState, head, nil
}

// stateAt serves State(at) for at > 0; the caller holds e.mu.
func (c *Cache) stateAt(ctx context.Context, e *entry, at uint64) (*session.State, error) {
	e.atAsked = true
	if e.st == nil {
		if err := c.load(ctx, e, at); err != nil {
			return nil, err
		}
	}
	if at < e.st.Seq {
		// Below what is folded: a state cannot be unfolded.
		return c.refold(ctx, e, at)
	}
	if err := c.foldTail(ctx, e, at); err != nil {
		return nil, err
	}
	if e.st.Seq < at {
		if err := c.refresh(ctx, e); err != nil {
			return nil, err
		}
		if at < e.st.Seq {
			// The refresh loaded the head from a snapshot (the cache was
			// far behind), past at.
			return c.refold(ctx, e, at)
		}
		if err := c.foldTail(ctx, e, at); err != nil {
			return nil, err
		}
	}
	if e.st.Seq != at {
		return nil, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", e.id, at, e.st.Seq)
	}
	return e.st.View(), nil
}

// refold folds session e anew from a snapshot up to at, below what the
// cache folded. A shared cache whose head is at most SharedTail events
// after at keeps the state refolded as the one behind the head, and reads
// the events after it again when next brought up to date: the caller at a
// sequence (a selector whose session another consumer asked for first)
// goes on from there with no other refold.
func (c *Cache) refold(ctx context.Context, e *entry, at uint64) (*session.State, error) {
	c.refolds.Add(1)
	st, streamSeq, err := c.reader.StateAt(ctx, e.id, at)
	if err != nil {
		return nil, fmt.Errorf("state of %s at %d: %w", e.id, at, err)
	}
	if !c.shared || e.next()-1 > at+SharedTail {
		return st, nil
	}
	if segs, err := c.reader.Lineage(ctx, e.id); err != nil || at < segs[len(segs)-1].From {
		// At or before a fork point: the entry holds the session's own
		// events on top (load).
		return st, nil
	}
	e.st, e.streamSeq, e.tail, e.head, e.gap = st, streamSeq, nil, nil, true
	e.stSize, e.tailSize, e.headSize = approxSize(st), 0, 0
	return st.View(), nil
}

// current loads or refreshes an entry up to the last stored event.
func (c *Cache) current(ctx context.Context, e *entry) error {
	if e.st == nil {
		return c.load(ctx, e, 0)
	}
	return c.refresh(ctx, e)
}

// load folds the session from the nearest snapshot at or below at (0: its
// last stored event), as the ledger loads a session.
func (c *Cache) load(ctx context.Context, e *entry, at uint64) error {
	if err := events.ValidateSessionID(e.id); err != nil {
		return api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if at == 0 {
		last, err := c.reader.store.Last(ctx, e.id)
		if errors.Is(err, eventstore.ErrNotFound) {
			return api.Errorf(api.CodeNotFound, "session %s does not exist", e.id)
		}
		if err != nil {
			return fmt.Errorf("load session %s: %w", e.id, err)
		}
		head, err := events.ParseStored(last.Body)
		if err != nil {
			return fmt.Errorf("load session %s: %w", e.id, err)
		}
		at = head.Seq
	} else if segs, err := c.reader.Lineage(ctx, e.id); err != nil {
		return fmt.Errorf("load session %s: %w", e.id, err)
	} else if own := segs[len(segs)-1]; at < own.From {
		// At or before a fork point: the cache of a session holds its own
		// events on top, so it starts at its first own event.
		at = own.From
	}
	st, streamSeq, err := c.reader.StateAt(ctx, e.id, at)
	if err != nil {
		return fmt.Errorf("load session %s: %w", e.id, err)
	}
	c.loads.Add(1)
	e.st, e.streamSeq, e.tail, e.head, e.gap = st, streamSeq, nil, nil, false
	e.stSize, e.tailSize, e.headSize = approxSize(st), 0, 0
	return nil
}

// eventOverhead is what an event read costs beyond its stored bytes: the
// parsed event's fields and the message's headers its bytes share a buffer
// with (about 0.5 KB for Rath's events).
const eventOverhead = 512

// eventSize is what the cache counts an event read as.
func eventSize(ev events.Stored) int64 { return int64(len(ev.Raw)) + eventOverhead }

// approxSize is a state's JSON size, what the cache counts it as when it
// loads it (a load is O(state) already).
func approxSize(st *session.State) int64 {
	b, err := json.Marshal(st)
	if err != nil {
		return 0
	}
	return int64(len(b))
}

// Observe offers the cache an event delivered from the stream at stream
// sequence streamSeq, in the order the stream holds it: a worker's consumer
// that receives every event of its sessions feeds them here, so that its
// next State finds them read already and asks the stream only for the
// session's last event, to see that nothing else came (refresh). An event
// of a session the cache does not hold, or one that does not continue what
// it read (a redelivery, a gap), is ignored: a read fills in what Observe
// did not.
//
// A session's first event (session.started) starts its entry: a cache fed
// from the stream's start of a session never reads the session from the
// log. (A fork's first event folds its parent's state, which is read: such
// a session is loaded when first asked for, as one not observed.)
//
// Observe never waits for a caller that holds the session (which may be
// reading the stream): the event is left for that caller, which takes it
// before it reads anything. Nor does it read anything itself: a merge,
// whose fold reads the merged session's events, is folded by the next
// caller.
func (c *Cache) Observe(ctx context.Context, ev events.Stored, streamSeq uint64) {
	c.fed.Store(true)
	slot, ok := c.entries.Lookup(ev.Session)
	if !ok {
		if !startsSession(ev) {
			return
		}
		slot = c.slot(ev.Session)
	}
	e := slot.Value
	if !e.mu.TryLock() {
		e.pmu.Lock()
		e.pending = append(e.pending, observed{ev, streamSeq})
		e.pmu.Unlock()
		return
	}
	defer e.mu.Unlock()
	defer c.account(slot)
	defer func() {
		if p := recover(); p != nil {
			c.fail(e, nil) // a fold cut short: hold nothing of the session
			panic(p)
		}
	}()
	c.take(ctx, e)
	c.observe(ctx, e, ev, streamSeq)
	if !e.asked && len(e.tail) > unaskedTail {
		// No handler of this process wants the session (yet): hold no
		// more of it than a load from a snapshot would read.
		c.fail(e, nil)
		return
	}
	if e.st != nil {
		if err := c.trim(ctx, e, true); err != nil {
			c.fail(e, nil) // (a read folds it, and reports what is wrong)
		}
	}
}

// startsSession reports whether ev is a session's first event that folds
// from nothing: its session.started (a fork's first event reads its parent).
func startsSession(ev events.Stored) bool {
	return ev.Seq == 1 && ev.Type == events.TypeSessionStarted
}

// unaskedTail bounds the events a cache keeps of a session only observed,
// never asked for.
const unaskedTail = 256

// observed is an event Observe left for the caller holding its session.
type observed struct {
	ev        events.Stored
	streamSeq uint64
}

// lock takes the entry for a caller, with the events observed meanwhile.
func (c *Cache) lock(ctx context.Context, e *entry) {
	e.mu.Lock()
	e.asked = true
	c.take(ctx, e)
}

// take applies the events Observe left while the entry was held; the
// caller holds e.mu.
func (c *Cache) take(ctx context.Context, e *entry) {
	e.pmu.Lock()
	pending := e.pending
	e.pending = nil
	e.pmu.Unlock()
	for _, o := range pending {
		c.observe(ctx, e, o.ev, o.streamSeq)
	}
}

// observe applies one observed event; the caller holds e.mu.
func (c *Cache) observe(ctx context.Context, e *entry, ev events.Stored, streamSeq uint64) {
	if e.st == nil {
		if !startsSession(ev) {
			return
		}
		st := &session.State{}
		if err := c.reader.Fold(ctx, st, ev); err != nil {
			return // (a read folds it, and reports what is wrong)
		}
		e.st, e.streamSeq, e.stSize = st, streamSeq, eventSize(ev)
		return
	}
	if streamSeq <= e.streamSeq {
		return
	}
	switch next := e.next(); {
	case ev.Seq > next+c.reader.every:
		// Far behind (evicted and started again from a redelivered first
		// event, say): a load from the nearest snapshot reads less than
		// a scan of everything in between.
		c.fail(e, nil)
		return
	case ev.Seq > next:
		// Events of the session went elsewhere (several processes share
		// the consumer): the next refresh scans without asking first.
		e.gap = true
		return
	case ev.Seq < next:
		return
	}
	if ev.Type == events.TypeSessionMerged {
		// Its fold reads the merged session: leave the head to be folded
		// by the next caller.
		e.head, e.headSize = nil, 0
	}
	if err := c.read(ctx, e, ev, streamSeq); err != nil {
		c.fail(e, fmt.Errorf("observe session %s: %w", e.id, err))
	}
}

// next is the session sequence the entry reads next.
func (e *entry) next() uint64 {
	if n := len(e.tail); n > 0 {
		return e.tail[n-1].Seq + 1
	}
	return e.st.Seq + 1
}

// read adds the session's next event, stored at streamSeq, to the tail.
func (c *Cache) read(ctx context.Context, e *entry, ev events.Stored, streamSeq uint64) error {
	if e.head != nil {
		if err := c.reader.Fold(ctx, e.head, ev); err != nil {
			return err
		}
		e.headSize += eventSize(ev)
	}
	e.tail = append(e.tail, ev)
	e.streamSeq = streamSeq
	e.tailSize += eventSize(ev)
	return nil
}

// refresh reads the session's own events stored after the last one read
// into the tail. They must continue the sequence: anything else is a log
// written around the ledger, which the ledger refuses too.
//
// A cache that is fed (Observe) usually holds them already: it reads the
// session's last event first, a direct get the server answers from its
// index, and stops there when that event is the last one read or the next.
// Only a gap is scanned. A session Observe saw a gap in (its events are
// shared among processes), and any session of an unfed cache, is scanned at
// once: it has moved on by several events, and the scan finds where. (A scan from a
// stream sequence walks the stream's messages after it: with many sessions
// interleaved, its cost grows with the other sessions' events in between,
// which is what the last-event read avoids.)
func (c *Cache) refresh(ctx context.Context, e *entry) error {
	upTo := uint64(0)
	if c.fed.Load() && !e.gap {
		c.lasts.Add(1)
		last, err := c.reader.store.Last(ctx, e.id)
		if errors.Is(err, eventstore.ErrNotFound) {
			return nil // a replica that lags answered; the caller checks
		}
		if err != nil {
			return c.fail(e, fmt.Errorf("refresh session %s: %w", e.id, err))
		}
		if last.StreamSeq <= e.streamSeq {
			return nil // (below: a replica that lags answered; the caller checks)
		}
		ev, err := events.ParseStored(last.Body)
		if err != nil {
			return c.fail(e, fmt.Errorf("refresh session %s: %w", e.id, err))
		}
		if ev.Session == e.id && ev.Seq == e.next() && ev.Type != events.TypeSessionArchived {
			if err := c.read(ctx, e, ev, last.StreamSeq); err != nil {
				return c.fail(e, fmt.Errorf("refresh session %s: %w", e.id, err))
			}
			return nil
		}
		if ev.Session == e.id && ev.Seq > e.next()+c.reader.every {
			// Far behind: the nearest snapshot and the events after it
			// read less than a scan of everything in between.
			return c.load(ctx, e, 0)
		}
		upTo = last.StreamSeq
	}
	c.scans.Add(1)
	e.gap = false
	next := e.next()
	err := c.reader.ScanOwn(ctx, e.id, e.streamSeq+1, upTo, func(ev events.Stored, m eventstore.Msg) error {
		if ev.Session != e.id || ev.Seq != next {
			return api.Errorf(api.CodeDamaged, "session %s: after sequence %d its log holds %s's event %d at stream sequence %d", e.id, next-1, ev.Session, ev.Seq, m.StreamSeq)
		}
		if err := c.read(ctx, e, ev, m.StreamSeq); err != nil {
			return err
		}
		next++
		return nil
	})
	if err != nil {
		return c.fail(e, fmt.Errorf("refresh session %s: %w", e.id, err))
	}
	return nil
}

// foldTail folds the tail into the state up to sequence upTo (0: all of it).
func (c *Cache) foldTail(ctx context.Context, e *entry, upTo uint64) error {
	n := 0
	for _, ev := range e.tail {
		if upTo != 0 && ev.Seq > upTo {
			break
		}
		if err := c.reader.Fold(ctx, e.st, ev); err != nil {
			return c.fail(e, fmt.Errorf("fold session %s at %d: %w", e.id, ev.Seq, err))
		}
		e.stSize += eventSize(ev)
		e.tailSize -= eventSize(ev)
		n++
	}
	e.tail = e.tail[n:]
	if len(e.tail) == 0 {
		e.tail = nil                               // let the folded events go
		e.head, e.headSize, e.tailSize = nil, 0, 0 // st is the head again
	}
	return nil
}

// fail forgets an entry whose state may be half folded: the next use loads
// it again.
func (c *Cache) fail(e *entry, err error) error {
	e.st, e.tail, e.head, e.streamSeq, e.gap = nil, nil, nil, 0, false
	e.stSize, e.tailSize, e.headSize = 0, 0, 0
	return err
}

func newEntry(id string) *entry { return &entry{id: id} }

// slot returns session id's slot, made if the cache holds none. A new slot
// keys on a copy of id: a session ID taken from a parsed event is a
// substring of the message it came in (events.ParseStored), which the
// entry would keep alive for as long as the session is cached.
func (c *Cache) slot(id string) *lru.Slot[string, *entry] {
	if slot, ok := c.entries.Lookup(id); ok {
		return slot
	}
	return c.entries.Get(strings.Clone(id), newEntry)
}

// account records an entry's new size; the least recently used entries
// beyond the bound are evicted, never the one just used. An entry evicted
// while in use stays with its holder and is dropped when it is done. The
// caller holds the entry's mutex.
func (c *Cache) account(slot *lru.Slot[string, *entry]) {
	e := slot.Value
	if e.st == nil {
		// Nothing folded (an error or an unknown session): hold nothing.
		c.entries.Drop(slot)
		return
	}
	c.entries.Account(slot, e.stSize+e.tailSize+e.headSize)
}
