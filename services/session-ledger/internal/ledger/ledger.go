// Package ledger is the session ledger: the one authority that turns proposed
// events into the ordered, validated, hash-chained log of each session, and
// answers what a session looked like at any sequence.
package ledger

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/lru"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// Config tunes a ledger.
type Config struct {
	// SnapshotEvery is K: a snapshot is stored every K events of a session,
	// which bounds the cost of "state at N" by K events, not by history.
	SnapshotEvery uint64
	// CacheSessions bounds how many sessions' current states stay in memory.
	CacheSessions int
	// Name identifies this ledger instance in rejections and logs.
	Name string
	// Retention archives and purges ended sessions (zero: never).
	Retention Retention
	// Key signs every event the ledger stores. New refuses a config without.
	Key *events.SigningKey
	// Trusted are further public keys whose signatures the ledger accepts on
	// stored events: the keys of earlier rotations, or of other ledgers of
	// the deployment that sign with keys of their own. Key is always trusted.
	Trusted []events.PublicKey
	// HeadEvery is how long a session's new signed head may wait before it
	// is recorded in the heads bucket (only the latest is written); zero
	// records every head at once. A session's first head never waits.
	HeadEvery time.Duration
	// Unsigned stores events with no signature and records no heads. It
	// exists for one purpose: the bench's baseline, which measures what
	// signing costs in the same run (issue 10). Such a ledger trusts what it
	// reads, and verify reports every event it stored as unsigned. No
	// command or flag of Rath's sets it.
	Unsigned bool
	// Approvers returns the approver roles a principal holds ("*": every
	// role): a grant or rejection of an approval that asks a role counts
	// only from a principal holding it. It is read at each decision, so a
	// changed roles file counts at once. Nil: every principal holds every
	// role (the ledger's own tests); the service sets it from its roles
	// file (auth.Approvers).
	Approvers func(events.Principal) ([]string, error)
	// Quotas bound what one tenant may take (DefaultQuotas; zero: no
	// bounds, as for the ledger's own tests).
	Quotas Quotas
	// clock, when set, is the ledger's time (tests: export_test.go).
	clock func() time.Time
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{SnapshotEvery: 128, CacheSessions: 4096, Name: "ledger", HeadEvery: time.Second, Quotas: DefaultQuotas()}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.SnapshotEvery < 2 {
		errs = append(errs, fmt.Errorf("snapshot interval must be at least 2, got %d", c.SnapshotEvery))
	}
	if c.CacheSessions < 1 {
		errs = append(errs, fmt.Errorf("session cache size must be positive, got %d", c.CacheSessions))
	}
	if c.HeadEvery < 0 {
		errs = append(errs, fmt.Errorf("head record interval must not be negative, got %s", c.HeadEvery))
	}
	errs = append(errs, c.Retention.Validate(), c.Quotas.Validate())
	return errors.Join(errs...)
}

// Ledger appends, folds, forks, merges and verifies sessions. Several ledgers
// may run against one JetStream: the conditional append keeps each session's
// log linear, and a ledger whose cache fell behind re-reads and retries.
type Ledger struct {
	store *eventstore.Store
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	keys  events.Keyring
	sign  *signer
	heads *headBook
	// records caches the signature records that batched events refer to.
	records *lru.Sized[string, *sigRecord]
	// ready is closed once Serve answers every operation.
	ready chan struct{}

	mu      sync.Mutex
	entries map[string]*list.Element // of *entry, most recently used first
	lru     *list.List

	// reader reads and folds sessions from the store; it caches lineage
	// and parsed archive bundles.
	reader *fold.Reader

	maxPayload int64 // of the connection Serve answers on
	// whole is the last whole state answered in several parts, kept for
	// the parts asked next (WholeState).
	whole atomic.Pointer[wholeState]

	// catalog is the session index in memory, which List reads; nil until
	// Serve loaded it, or when it could not.
	catalog atomic.Pointer[eventstore.Catalog]

	// feeds caches the durable consumers of the pull operation, by name.
	feeds sync.Map

	// quota is what the ledger counts in memory for its quotas.
	quota quotaState
}

// entry is the cached head of one session. Its mutex serialises every append
// to the session within this process.
type entry struct {
	id string
	mu sync.Mutex
	// state is nil until loaded, and stays nil for a session that does not
	// exist yet.
	state     *session.State
	loaded    bool
	streamSeq uint64 // stream sequence of the session's own last event
	// recent are the acks this ledger gave lately for the session, oldest
	// first, at most recentKeep: a retry of one of them is answered with it.
	recent []recentAck
	// bigState is set once the state outgrew the snapshot size limit.
	bigState bool
}

const recentKeep = 64

func (e *entry) remember(a api.Ack) {
	if len(e.recent) == recentKeep {
		e.recent = append(e.recent[:0], e.recent[1:]...)
	}
	e.recent = append(e.recent, recentAck{id: a.ID, hash: a.Hash, sig: a.Sig, seq: a.Seq, streamSeq: a.StreamSeq})
}

// recentAck is an ack kept in an entry's recent, without what every ack of
// the session shares (the session) or none of them sets (Duplicate,
// Record): a map of whole acks per session took a few KiB of each cached
// session.
type recentAck struct {
	id, hash, sig  string
	seq, streamSeq uint64
}

// lately returns the ack this ledger gave lately for event id of the
// session, the latest if it gave several.
func (e *entry) lately(id string) (api.Ack, bool) {
	for i := len(e.recent) - 1; i >= 0; i-- {
		if r := e.recent[i]; r.id == id {
			return api.Ack{ID: r.id, Session: e.id, Seq: r.seq, Hash: r.hash, Sig: r.sig, StreamSeq: r.streamSeq}, true
		}
	}
	return api.Ack{}, false
}

// New returns a ledger over an opened store.
func New(store *eventstore.Store, cfg Config, log *slog.Logger) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ledger config: %w", err)
	}
	if cfg.Key == nil && !cfg.Unsigned {
		return nil, errors.New("ledger config: a signing key is required: every stored event is signed")
	}
	if log == nil {
		log = slog.Default()
	}
	trusted := cfg.Trusted
	if cfg.Key != nil {
		trusted = append([]events.PublicKey{cfg.Key.Public()}, trusted...)
	}
	if cfg.Unsigned {
		cfg.Key = nil
	}
	l := &Ledger{
		store:   store,
		cfg:     cfg,
		log:     log,
		now:     func() time.Time { return time.Now().UTC() },
		keys:    events.NewKeyring(trusted...),
		sign:    &signer{key: cfg.Key},
		entries: map[string]*list.Element{},
		lru:     list.New(),
		reader:  fold.NewReader(store, cfg.SnapshotEvery),
		records: lru.New[string, *sigRecord](recordCacheBytes),
		ready:   make(chan struct{}),
		quota:   quotaState{starts: map[string]*startBucket{}, pulls: map[string]int{}, feeds: map[string]chan struct{}{}, logged: map[string]time.Time{}},
	}
	if cfg.clock != nil {
		l.now = cfg.clock
	}
	if !cfg.Unsigned { // an unsigned ledger (the bench's baseline) records no heads
		l.heads = newHeadBook(store, cfg.HeadEvery, log, l.fullSig)
	}
	return l, nil
}

// Store returns the ledger's event store.
func (l *Ledger) Store() *eventstore.Store { return l.store }

// entry returns the cache entry of a session, creating it if needed and
// evicting the least recently used unlocked entry beyond the cache size.
func (l *Ledger) entry(id string) *entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.entries[id]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*entry)
	}
	e := &entry{id: id}
	l.entries[id] = l.lru.PushFront(e)
	for l.lru.Len() > l.cfg.CacheSessions {
		last := l.lru.Back()
		old := last.Value.(*entry)
		if old == e {
			break
		}
		// An entry in use keeps its lock; dropping it from the map is still
		// safe: the holder finishes on its own copy and the next user reloads.
		l.lru.Remove(last)
		delete(l.entries, old.id)
	}
	return e
}

// load fills an entry from the store: the session's last event gives the head,
// the nearest snapshot and the events after it give the state.
func (l *Ledger) load(ctx context.Context, e *entry) error {
	// The recorded head first: it never leads the log (it is recorded after
	// the event is stored), so a log read after it that ends below it was
	// cut, even while other ledgers append.
	rec, err := l.store.GetHead(ctx, e.id)
	recorded := err == nil
	if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
		return err
	}
	if recorded && (rec.Session != e.id || l.keys.Verify(rec.Session, rec.Seq, rec.Hash, rec.Sig) != nil) {
		// Not a record the ledger wrote (rath verify reports it): it must
		// not make a session look cut.
		l.log.Warn("head record not signed by the ledger; ignored", "session", e.id, "seq", rec.Seq)
		recorded = false
	}
	last, err := l.store.Last(ctx, e.id)
	if recorded && (errors.Is(err, eventstore.ErrNotFound) || (err == nil && lastSeq(last) < rec.Seq)) {
		// About to call the session cut: ask the stream's leader, not a
		// replica that may lag.
		last, err = l.store.LastFromLeader(ctx, e.id)
	}
	if errors.Is(err, eventstore.ErrNotFound) {
		// No events: a new session, unless the ledger once signed a head
		// for it. A session ID is never used twice.
		if recorded {
			return api.Errorf(api.CodeDamaged, "session %s is damaged: its events are gone from %s, but the ledger signed its head at %d (hash %s); a session ID is never used twice", e.id, events.StreamSessions, rec.Seq, short(rec.Hash))
		}
		e.state, e.streamSeq, e.loaded = nil, 0, true
		return nil
	}
	if err != nil {
		return err
	}
	head, err := events.ParseStored(last.Body)
	if err != nil {
		return fmt.Errorf("load session %s: %w", e.id, err)
	}
	// The head's signature vouches for the chain below it; one that does not
	// hold means the log was written around the ledger.
	if head.Session != e.id {
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its last stored event %s names session %s (copied in around the ledger)", e.id, head.ID, head.Session)
	}
	if err := l.trust(ctx, head); err != nil {
		return err
	}
	if recorded {
		if err := checkHead(rec, head); err != nil {
			return err
		}
	}
	st, streamSeq, err := l.stateAt(ctx, e.id, head.Seq)
	if c := api.CodeOf(err); c == api.CodeOutOfRange || c == api.CodeNotFound {
		// The log, read after its head, ends below it or is not there yet:
		// the replica that answered the direct gets lags (one catching up
		// after a restart, or resumed after a stop, on a cluster; seen with
		// a SIGSTOPped leader). Transient: asked again, a current one
		// answers.
		return api.Errorf(api.CodeUnavailable, "load session %s: a replica of %s is behind its head %d: %v", e.id, events.StreamSessions, head.Seq, err)
	}
	if err != nil {
		return fmt.Errorf("load session %s: %w", e.id, err)
	}
	e.state, e.streamSeq, e.loaded = st, streamSeq, true
	return nil
}

// refresh folds the events another ledger appended since the entry was read.
func (l *Ledger) refresh(ctx context.Context, e *entry) error {
	if !e.loaded || e.state == nil {
		return l.load(ctx, e)
	}
	return l.scanOwn(ctx, e.id, e.streamSeq+1, 0, func(ev events.Stored, m eventstore.Msg) error {
		// Signed is not enough: a copy of one of the session's own earlier
		// events is signed too. It must continue the chain the ledger holds.
		if ev.Session != e.id || ev.Seq != e.state.Seq+1 || ev.Prev != e.state.Hash {
			return api.Errorf(api.CodeDamaged, "session %s is damaged: after its event %d (%s) the stream holds %s's event %d linking to %s (replayed or copied in around the ledger)", e.id, e.state.Seq, short(e.state.Hash), ev.Session, ev.Seq, short(ev.Prev))
		}
		if err := l.trust(ctx, ev); err != nil {
			return err
		}
		if err := l.fold(ctx, e.state, ev); err != nil {
			return err
		}
		e.streamSeq = m.StreamSeq
		return nil
	})
}

// trust checks the signature of a stored event this ledger did not seal
// itself (it is the head of a session being loaded, or another ledger
// appended it). The ledger never chains onto an event that fails: a later
// signature would vouch for it.
func (l *Ledger) trust(ctx context.Context, ev events.Stored) error {
	if l.cfg.Unsigned {
		return nil
	}
	if _, same, err := events.StoredHash(ev.Raw, ev.Hash); err != nil || !same {
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its event at %d (%s) does not hash to the rathhash it carries (altered); nothing more is appended to it (see docs/security.md)", ev.Session, ev.Seq, ev.ID)
	}
	if err := l.verifySig(ctx, ev.Session, ev.Seq, ev.Hash, ev.Sig); err != nil {
		if !events.IsSignatureFault(err) {
			return unavailable(err) // its signature record could not be read now
		}
		hint := ""
		if errors.Is(err, events.ErrUnknownKey) {
			// The one way this happens without tampering: two ledgers of a
			// deployment with different keys that do not trust each other.
			hint = " (or another ledger of this deployment signs with a key this one does not trust: give them one key file, or --trust its ledger.pub)"
		}
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its event at %d (%s) is %v; it was written around the ledger or altered%s, and nothing more is appended to it (see docs/security.md)", ev.Session, ev.Seq, ev.ID, err, hint)
	}
	return nil
}

// checkHead compares a session's last stored event with the head the ledger
// recorded apart from the log (read before it): a log that ends below it was
// cut.
func checkHead(rec eventstore.Head, last events.Stored) error {
	switch {
	case rec.Seq > last.Seq:
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its log ends at %d, but the ledger signed its head at %d (hash %s): events %d..%d were removed or lost", last.Session, last.Seq, rec.Seq, short(rec.Hash), last.Seq+1, rec.Seq)
	case rec.Seq == last.Seq && rec.Hash != last.Hash:
		return api.Errorf(api.CodeDamaged, "session %s is damaged: its event at %d has hash %s, the ledger signed %s there", last.Session, last.Seq, short(last.Hash), short(rec.Hash))
	}
	return nil
}

// lastSeq is the rathseq a stored body claims (0 if it has none readable).
func lastSeq(m eventstore.Msg) uint64 {
	ev, err := events.ParseStored(m.Body)
	if err != nil {
		return 0
	}
	return ev.Seq
}
