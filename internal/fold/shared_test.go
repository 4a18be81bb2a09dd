package fold_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// shared returns a fresh cache shared by several consumers of a process.
func (r *rig) shared(t *testing.T) *fold.Cache {
	t.Helper()
	return r.sharedOf(t, 0)
}

// sharedOf is a shared cache bounded by maxBytes (0: the default).
func (r *rig) sharedOf(t *testing.T, maxBytes int64) *fold.Cache {
	t.Helper()
	return fold.NewCache(r.store(t), fold.CacheConfig{MaxBytes: maxBytes, SnapshotEvery: snapshotEvery, Shared: true})
}

func (r *rig) store(t *testing.T) *eventstore.Store {
	t.Helper()
	nc := natstest.ConnectAs(t, r.url, auth.RoleSelector)
	store, err := eventstore.AttachWait(r.ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// walk drives two consumers of one session through c, as rath up's
// selector and agent worker do: the selector decides each event on the
// state at it and its head (StateAndHead), and the worker, lead events
// ahead, takes the head since its own trigger (StateSince); workerFirst
// has the worker ask before the selector at each step. Every answer is the
// ledger's.
func (r *rig) walk(t *testing.T, c *fold.Cache, id string, lead uint64, workerFirst bool) {
	t.Helper()
	head := r.head(t, id)
	worker := func(at uint64) {
		if w := at + lead; w <= head {
			st, err := c.StateSince(r.ctx, id, w)
			if err != nil {
				t.Fatal(err)
			}
			r.equal(t, st, id, 0)
		}
	}
	for at := uint64(1); at <= head; at++ {
		if workerFirst {
			worker(at)
		}
		r.sameAndHead(t, c, id, at)
		if !workerFirst {
			worker(at)
		}
	}
}

// Two consumers asking at different sequences of one session share its
// entry: a shared cache folds each event into the state behind once, and
// refolds nothing, where a positional one refolds the selector's every
// trigger the worker passed. When the worker asks first (the session was
// folded to its head before the selector came), the selector's first
// trigger is refolded once and the events after it read again once; the
// rest of the walk refolds nothing.
func TestSharedConsumersAtDifferentPositions(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	for n := range 3 {
		r.turn(t, "s1", n)
	}
	c := r.shared(t)
	r.feed(t, c, "s1")
	r.walk(t, c, "s1", 4, false)
	if st := c.Stats(); st.Loads != 0 || st.Refolds != 0 || st.Scans != 0 || st.Sessions != 1 {
		t.Fatalf("shared, two consumers: %+v, want no load, refold or scan", st)
	}
	positional := r.cache(t, 0)
	r.feed(t, positional, "s1")
	r.walk(t, positional, "s1", 4, false)
	if st := positional.Stats(); st.Refolds == 0 {
		t.Fatalf("positional, two consumers: %+v, want refolds (what Shared avoids)", st)
	}

	c = r.shared(t)
	r.feed(t, c, "s1")
	r.walk(t, c, "s1", 4, true)
	if st := c.Stats(); st.Loads != 0 || st.Refolds != 1 || st.Scans != 1 {
		t.Fatalf("shared, the worker first: %+v, want one refold and one scan", st)
	}
}

// Until a caller asks for a session at a sequence, a shared cache keeps it
// as a positional one does: StateSince folds up to its trigger, so the
// selector's own StateSince of a trigger (arming its timers) and then its
// state at that trigger fold nothing anew, however far the head ran ahead.
func TestSharedStateSinceBeforeAnyAskAtASequence(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	c := r.shared(t)
	r.feed(t, c, "s1")
	st, err := c.StateSince(r.ctx, "s1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s1", 0)
	r.sameAndHead(t, c, "s1", 1)
	r.sameAndHead(t, c, "s1", 2)
	if st := c.Stats(); st.Refolds != 0 || st.Loads != 0 || st.Scans != 0 {
		t.Fatalf("StateSince, then the state at its trigger: %+v, want no refold, load or scan", st)
	}
}

// Every consumer of a process feeds the shared cache, each at its own
// pace: an event it holds already is ignored, so feeding a session twice,
// interleaved, reads nothing and answers as fed once.
func TestSharedObserveFromSeveralConsumers(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	r.turn(t, "s1", 1)
	c := r.shared(t)
	all := r.stored(t, "s1")
	lag := 5 // the second consumer is this many events behind the first
	for i := range len(all) + lag {
		if i < len(all) {
			c.Observe(r.ctx, all[i].ev, all[i].seq)
		}
		if j := i - lag; j >= 0 {
			c.Observe(r.ctx, all[j].ev, all[j].seq)
		}
	}
	r.walk(t, c, "s1", 2, false)
	if st := c.Stats(); st.Loads != 0 || st.Scans != 0 || st.Refolds != 0 || st.Lasts == 0 {
		t.Fatalf("fed twice: %+v, want no load, scan or refold, only last-event reads", st)
	}
}

// The state a shared cache keeps behind the head is at most SharedTail
// events behind it: a caller asking further back is folded anew from a
// snapshot, equal to the ledger's. A session no caller asked at a sequence
// is kept at its head alone.
func TestSharedTailBound(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	r.start(t, "s2")
	// 2 MiB: a tail of 128 KiB, less than SharedTail+10 chunks, so the
	// bound is SharedTail.
	c := r.sharedOf(t, 2<<20)
	r.feed(t, c, "s1", "s2")
	r.sameAndHead(t, c, "s1", 1) // a selector at the first event
	for i := range fold.SharedTail + 10 {
		r.emit(t, "s1", &events.ChunkAppended{Role: "user", Content: fmt.Sprintf("chunk %d", i)})
		r.emit(t, "s2", &events.ChunkAppended{Role: "user", Content: fmt.Sprintf("chunk %d", i)})
	}
	r.feed(t, c, "s1", "s2")
	if n := c.Tail("s1"); n != fold.SharedTail {
		t.Fatalf("after %d events fed: %d kept unfolded behind the head, want %d", fold.SharedTail+10, n, fold.SharedTail)
	}
	head := r.head(t, "s1")
	st, err := c.StateSince(r.ctx, "s1", head)
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s1", 0)
	r.sameAndHead(t, c, "s1", head-fold.SharedTail) // the oldest state kept
	if st := c.Stats(); st.Refolds != 0 || st.Loads != 0 {
		t.Fatalf("within the bound: %+v, want no refold, no load", st)
	}
	r.sameAndHead(t, c, "s1", 2) // behind the bound
	if st := c.Stats(); st.Refolds != 1 {
		t.Fatalf("behind the bound: %+v, want one refold", st)
	}
	// s2 was only asked for its head: nothing kept behind it.
	st, err = c.StateSince(r.ctx, "s2", r.head(t, "s2"))
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s2", 0)
	if n := c.Tail("s2"); n != 0 {
		t.Fatalf("a session asked only for its head: %d events unfolded, want 0", n)
	}
}

// Odd and hostile asks answer a shared cache as they answer a positional
// one: a sequence past the head is out of range, 0 is the head, a session
// without events is not found (ErrBehind when an event was delivered), a
// malformed ID is refused, and StateAndHead needs a sequence.
func TestSharedOddAsks(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	head := r.head(t, "s1")
	for name, c := range map[string]*fold.Cache{"positional": r.cache(t, 0), "shared": r.shared(t)} {
		t.Run(name, func(t *testing.T) {
			r.feed(t, c, "s1")
			if _, err := c.State(r.ctx, "s1", head+1); !errors.Is(err, api.ErrOutOfRange) {
				t.Errorf("state past the head: %v, want %s", err, api.CodeOutOfRange)
			}
			if _, _, err := c.StateAndHead(r.ctx, "s1", head+100); !errors.Is(err, api.ErrOutOfRange) {
				t.Errorf("state and head past the head: %v, want %s", err, api.CodeOutOfRange)
			}
			r.same(t, c, "s1", 0)
			r.same(t, c, "s1", 3)
			r.same(t, c, "s1", 0)
			if _, err := c.StateSince(r.ctx, "s1", head+1); !errors.Is(err, fold.ErrBehind) {
				t.Errorf("a head below the delivered sequence: %v, want ErrBehind", err)
			}
			if _, err := c.State(r.ctx, "nobody", 0); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("state of a session without events: %v, want %s", err, api.CodeNotFound)
			}
			if _, err := c.StateSince(r.ctx, "nobody", 1); !errors.Is(err, fold.ErrBehind) || api.Permanent(err) {
				t.Errorf("no session although an event was delivered: %v, want ErrBehind, not permanent", err)
			}
			for _, id := range []string{"", "a.b", "a*", "x>", "a b"} {
				if _, err := c.State(r.ctx, id, 0); api.CodeOf(err) != api.CodeInvalidSession {
					t.Errorf("state of %q: %v, want %s", id, err, api.CodeInvalidSession)
				}
			}
			if _, _, err := c.StateAndHead(r.ctx, "s1", 0); err == nil {
				t.Error("StateAndHead at 0: no error, want one")
			}
			if st := c.Stats(); st.Sessions != 1 {
				t.Errorf("after odd asks: %+v, want only s1 held", st)
			}
		})
	}
}

// CacheOr keeps a service on its process's cache, and builds one for a
// service run alone.
func TestCacheOr(t *testing.T) {
	r := newRig(t)
	store := r.store(t)
	c := fold.NewCache(store, fold.CacheConfig{Shared: true})
	if got := fold.CacheOr(c, store, fold.CacheConfig{}); got != c {
		t.Error("CacheOr with a cache: another cache, want the one given")
	}
	own := fold.CacheOr(nil, store, fold.CacheConfig{SnapshotEvery: snapshotEvery})
	if own == nil || own == c {
		t.Fatal("CacheOr without a cache: want a new one")
	}
	r.start(t, "s1")
	r.same(t, own, "s1", 0)
}

// A selector behind a burst of events that fits in a sixteenth of the
// cache (here 600 chunks, appended while it decided nothing) goes on from
// its state, one event at a time, folding nothing anew; the head is
// answered all the while.
func TestSharedBurstKeepsTheStateBehind(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	c := r.shared(t)
	r.feed(t, c, "s1")
	r.sameAndHead(t, c, "s1", 1) // a selector at the first event
	const burst = 600
	for i := range burst {
		r.emit(t, "s1", &events.ChunkAppended{Role: "user", Content: fmt.Sprintf("chunk %d", i)})
	}
	r.feed(t, c, "s1")
	if n := c.Tail("s1"); n != burst {
		t.Fatalf("after a burst of %d: %d kept unfolded behind the head, want all", burst, n)
	}
	head := r.head(t, "s1")
	st, err := c.StateSince(r.ctx, "s1", head)
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s1", 0)
	for at := uint64(2); at <= head; at += 97 {
		r.sameAndHead(t, c, "s1", at)
	}
	if st := c.Stats(); st.Refolds != 0 || st.Loads != 0 {
		t.Fatalf("a selector behind a burst: %+v, want no refold, no load", st)
	}
}
