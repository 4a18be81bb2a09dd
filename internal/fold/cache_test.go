package fold_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// snapshotEvery is small, so that every test loads through snapshots.
const snapshotEvery = 4

// rig is a real JetStream and ledger; caches read as a worker role does.
type rig struct {
	c   *client.Client // the ledger's answers, to compare with
	url string
	ctx context.Context
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL(), func(c *ledger.Config) { c.Ledger.SnapshotEvery = snapshotEvery })
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, url: ns.ClientURL(), ctx: context.Background()}
}

// cache returns a fresh cache on a connection of a worker role: what a new
// process (or another one, taking a session over) starts with.
func (r *rig) cache(t *testing.T, maxBytes int64) *fold.Cache {
	t.Helper()
	nc := natstest.ConnectAs(t, r.url, auth.RoleSelector)
	store, err := eventstore.AttachWait(r.ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	return fold.NewCache(store, fold.CacheConfig{MaxBytes: maxBytes, SnapshotEvery: snapshotEvery})
}

func (r *rig) emit(t *testing.T, id string, data any) api.Ack {
	t.Helper()
	a, err := r.c.Emit(r.ctx, id, data)
	if err != nil {
		t.Fatalf("emit %T to %s: %v", data, id, err)
	}
	return a
}

func (r *rig) start(t *testing.T, id string) {
	t.Helper()
	if _, err := r.c.Start(r.ctx, id, events.SessionStarted{Task: "fold " + id, Labels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
}

// turn appends one agent turn with a tool call: nine events that touch the
// transcript, the tool index, usage, decisions and the turn in flight.
func (r *rig) turn(t *testing.T, id string, n int) {
	t.Helper()
	turn, call := fmt.Sprintf("turn-%d", n), fmt.Sprintf("call-%d", n)
	for _, d := range []any{
		&events.SelectorDecided{Rule: "continue", Route: "agent:coder", Agent: "coder", TurnID: turn},
		&events.TurnRequested{TurnID: turn, Agent: "coder"},
		&events.ChunkAppended{Role: "assistant", Agent: "coder", Content: fmt.Sprintf("answer %d", n)},
		&events.ToolRequested{CallID: call, Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{"cmd":"echo"}`)},
		&events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m", TokensIn: 10, TokensOut: int64(n)},
		&events.TurnCompleted{TurnID: turn, Agent: "coder", ToolCalls: 1},
		&events.ToolStarted{CallID: call, Tool: "run", Attempt: 1},
		&events.ChunkAppended{Role: "tool", Agent: "coder", Content: fmt.Sprintf("result %d", n), ToolCallID: call},
		&events.ToolCompleted{CallID: call, Tool: "run", Attempt: 1},
	} {
		r.emit(t, id, d)
	}
}

// same fails unless the cache's state of id at at is the ledger's.
func (r *rig) same(t *testing.T, c *fold.Cache, id string, at uint64) {
	t.Helper()
	got, err := c.State(r.ctx, id, at)
	if err != nil {
		t.Fatalf("cache state of %s at %d: %v", id, at, err)
	}
	r.equal(t, got, id, at)
}

func (r *rig) equal(t *testing.T, got *session.State, id string, at uint64) {
	t.Helper()
	want, err := r.c.StateAt(r.ctx, id, at)
	if err != nil {
		t.Fatalf("ledger state of %s at %d: %v", id, at, err)
	}
	if g, w := js(t, got), js(t, want); g != w {
		t.Fatalf("state of %s at %d:\ncache  %s\nledger %s", id, at, g, w)
	}
}

// sameAndHead fails unless the cache's StateAndHead of id at at is the
// ledger's state at at and its head.
func (r *rig) sameAndHead(t *testing.T, c *fold.Cache, id string, at uint64) {
	t.Helper()
	st, h, err := c.StateAndHead(r.ctx, id, at)
	if err != nil {
		t.Fatalf("cache state and head of %s at %d: %v", id, at, err)
	}
	r.equal(t, st, id, at)
	r.equal(t, h, id, 0)
}

func js(t *testing.T, st *session.State) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (r *rig) head(t *testing.T, id string) uint64 {
	t.Helper()
	st, err := r.c.State(r.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Seq
}

// The steady state: a cache that follows a session folds each event once
// and loads the session once; a redelivered (earlier) event is answered by a
// refold equal to the ledger's.
func TestCacheFollowsTheLedger(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.same(t, c, "s1", 0)
	for n := range 4 {
		r.turn(t, "s1", n)
		r.same(t, c, "s1", 0)
	}
	if st := c.Stats(); st.Loads != 1 || st.Refolds != 0 || st.Sessions != 1 || st.Bytes <= 0 {
		t.Fatalf("after following one session: %+v, want one load, no refold", st)
	}
	// Redeliveries: every earlier sequence, as the ledger answers it.
	head := r.head(t, "s1")
	for at := uint64(1); at <= head; at++ {
		r.same(t, c, "s1", at)
	}
	if st := c.Stats(); st.Loads != 1 || st.Refolds != int64(head-1) {
		t.Fatalf("after redeliveries: %+v, want %d refolds", st, head-1)
	}
	// The cache goes on from its head.
	r.turn(t, "s1", 9)
	r.same(t, c, "s1", 0)
	if _, err := c.State(r.ctx, "s1", head+100); !errors.Is(err, api.ErrOutOfRange) {
		t.Fatalf("state past the head: %v, want %s", err, api.CodeOutOfRange)
	}
	if _, err := c.State(r.ctx, "nobody", 0); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("state of a session without events: %v, want %s", err, api.CodeNotFound)
	}
}

// The selector's walk: each event decided on the state at it, guarded by the
// head, in order, with events stored after it; no refold.
func TestStateAndHeadInOrder(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	for n := range 3 {
		r.turn(t, "s1", n)
	}
	head := r.head(t, "s1")
	c := r.cache(t, 0)
	for at := uint64(1); at <= head; at++ {
		r.sameAndHead(t, c, "s1", at)
		if at == 5 {
			// Stored while the walk is under way: the head moves on.
			r.turn(t, "s1", 7)
			head = r.head(t, "s1")
		}
	}
	if st := c.Stats(); st.Loads != 1 || st.Refolds != 0 {
		t.Fatalf("walk in order: %+v, want one load and no refold", st)
	}
	// A redelivery below the walk is folded anew, and equal.
	r.sameAndHead(t, c, "s1", 3)
}

// StateSince is the head when it includes the delivered sequence, and
// ErrBehind when the head read is below it or there is no session (what a
// replica that lags answers), never a state a handler would take for the
// head.
func TestStateSinceRefusesAHeadBelowTheDeliveredEvent(t *testing.T) {
	r := newRig(t)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	head := r.head(t, "s1")
	c := r.cache(t, 0)
	st, err := c.StateSince(r.ctx, "s1", head)
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s1", 0)
	if _, err := c.StateSince(r.ctx, "s1", head+1); !errors.Is(err, fold.ErrBehind) {
		t.Fatalf("a head below the delivered sequence: %v, want ErrBehind", err)
	}
	if _, err := c.StateSince(r.ctx, "none", 1); !errors.Is(err, fold.ErrBehind) || api.Permanent(err) {
		t.Fatalf("no session although an event was delivered: %v, want ErrBehind, not permanent", err)
	}
}

// Takeover: a fresh cache (another process) loads through the nearest
// snapshot and agrees at every sequence; so does one that starts mid-walk.
func TestFreshCacheTakesOver(t *testing.T) {
	r := newRig(t)
	first := r.cache(t, 0)
	r.start(t, "s1")
	for n := range 3 {
		r.turn(t, "s1", n)
	}
	r.same(t, first, "s1", 0)
	r.turn(t, "s1", 3)
	head := r.head(t, "s1")
	for at := uint64(1); at <= head; at++ {
		c := r.cache(t, 0)
		r.same(t, c, "s1", at)
		r.turn(t, "s1", 100+int(at)) // the session moves on under the new owner
		r.same(t, c, "s1", 0)
		if at > 3 {
			break
		}
	}
	r.same(t, first, "s1", 0) // and the old owner catches up
}

// Eviction: a cache of a few bytes holds one session at a time, and every
// answer stays the ledger's.
func TestEvictionUnderATinyBound(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 1)
	ids := []string{"a1", "b1", "c1"}
	for _, id := range ids {
		r.start(t, id)
	}
	for n := range 3 {
		for _, id := range ids {
			r.turn(t, id, n)
			r.same(t, c, id, 0)
			r.same(t, c, id, uint64(n+2))
		}
	}
	st := c.Stats()
	if st.Sessions != 1 || st.Loads < int64(3*len(ids)) {
		t.Fatalf("tiny cache: %+v, want one session held and a load per use", st)
	}
}

// Fork: the fork's state starts from its parent's at the fork point, loaded
// fresh or followed, and below the fork point it is the parent's.
func TestFork(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "p1")
	for n := range 2 {
		r.turn(t, "p1", n)
	}
	at := r.head(t, "p1") - 4 // mid-turn: a turn and a tool call in flight
	r.same(t, c, "p1", 0)
	if _, err := r.c.Fork(r.ctx, api.ForkRequest{Parent: "p1", At: at, ID: "f1", Labels: map[string]string{"try": "2"}}); err != nil {
		t.Fatal(err)
	}
	r.same(t, c, "f1", 0)
	r.turn(t, "f1", 5)
	r.turn(t, "p1", 6)
	r.same(t, c, "f1", 0)
	r.same(t, c, "p1", 0)
	for _, n := range []uint64{1, at, at + 1, at + 3} {
		r.same(t, c, "f1", n)
		r.same(t, r.cache(t, 0), "f1", n)
	}
	// A fork of a fork, loaded fresh.
	if _, err := r.c.Fork(r.ctx, api.ForkRequest{Parent: "f1", At: at + 2, ID: "g1"}); err != nil {
		t.Fatal(err)
	}
	r.turn(t, "g1", 8)
	r.same(t, r.cache(t, 0), "g1", 0)
	r.same(t, c, "g1", 0)
}

// Merge: a merged event folds in the source's events the target does not
// hold, followed or loaded fresh, nested merges included.
func TestMerge(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "m1")
	r.turn(t, "m1", 0)
	at := r.head(t, "m1")
	for _, id := range []string{"x1", "y1"} {
		if _, err := r.c.Fork(r.ctx, api.ForkRequest{Parent: "m1", At: at, ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	r.turn(t, "x1", 1)
	r.turn(t, "y1", 2)
	r.same(t, c, "m1", 0)
	r.same(t, c, "y1", 0)
	// y takes x in, then m takes y in (x through y).
	if _, err := r.c.Merge(r.ctx, api.MergeRequest{Target: "y1", Source: "x1"}); err != nil {
		t.Fatal(err)
	}
	r.same(t, c, "y1", 0)
	r.turn(t, "m1", 3)
	if _, err := r.c.Merge(r.ctx, api.MergeRequest{Target: "m1", Source: "y1"}); err != nil {
		t.Fatal(err)
	}
	r.same(t, c, "m1", 0)
	r.turn(t, "m1", 4)
	r.same(t, c, "m1", 0)
	fresh := r.cache(t, 0)
	for at := uint64(1); at <= r.head(t, "m1"); at++ {
		r.same(t, fresh, "m1", at)
	}
}

// Compaction is an event like any other: the summary is folded once, in
// order, and the chunks stay.
func TestCompaction(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "k1")
	r.turn(t, "k1", 0)
	r.same(t, c, "k1", 0)
	r.emit(t, "k1", &events.TranscriptCompacted{FromSeq: 2, ToSeq: 9, Summary: "turn 0 ran echo", TokensBefore: 40, TokensAfter: 10})
	r.turn(t, "k1", 1)
	r.emit(t, "k1", &events.TranscriptCompacted{FromSeq: 2, ToSeq: 18, Summary: "turns 0 and 1 ran echo", TokensBefore: 50, TokensAfter: 12})
	r.same(t, c, "k1", 0)
	st, err := c.State(r.ctx, "k1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Compactions) != 2 || len(st.ActiveCompactions()) != 1 {
		t.Fatalf("compactions %+v", st.Compactions)
	}
	r.same(t, r.cache(t, 0), "k1", 0)
}

// Archive and purge: a followed session reads on past the purge, and a fresh
// cache reads the purged events back from the archive.
func TestArchivedAndPurged(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "z1")
	r.turn(t, "z1", 0)
	r.same(t, c, "z1", 0)
	r.turn(t, "z1", 1)
	r.emit(t, "z1", &events.SessionClosed{Outcome: "succeeded", Reason: "done"})
	if _, err := r.c.Archive(r.ctx, api.ArchiveRequest{Session: "z1", Purge: true}); err != nil {
		t.Fatal(err)
	}
	r.same(t, c, "z1", 0)
	fresh := r.cache(t, 0)
	r.same(t, fresh, "z1", 0)
	r.same(t, fresh, "z1", 3)
}

// Views handed out are the caller's: changing one, or folding on, changes
// nothing the cache or another caller holds.
func TestStatesAreTheCallersOwn(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "v1")
	r.turn(t, "v1", 0)
	st, err := c.State(r.ctx, "v1", 0)
	if err != nil {
		t.Fatal(err)
	}
	before := js(t, st)
	// A state's tool entries are shared with the cache and replaced, never
	// changed in place (session.View): a caller replaces one too.
	call := st.Tools["call-0"]
	scribbled := *call
	scribbled.Status = "scribbled"
	st.Tools["call-0"] = &scribbled
	st.Labels["k"] = "scribbled"
	st.Chunks = append(st.Chunks, session.Chunk{Content: "scribbled"})
	r.same(t, c, "v1", 0)
	r.turn(t, "v1", 1)
	r.same(t, c, "v1", 0)
	st.Tools["call-0"], st.Labels["k"], st.Chunks = call, "v", st.Chunks[:len(st.Chunks)-1]
	if js(t, st) != before {
		t.Fatal("folding on changed a state handed out")
	}
}

// stored is a session's events as a consumer receives them, with their
// stream sequences.
type stored struct {
	ev  events.Stored
	seq uint64
}

func (r *rig) stored(t *testing.T, id string) []stored {
	t.Helper()
	nc := natstest.ConnectAs(t, r.url, auth.RoleSelector)
	store, err := eventstore.AttachWait(r.ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	err = store.ScanParsed(r.ctx, id, 1, 0, func(ev events.Stored, m eventstore.Msg) error {
		out = append(out, stored{ev, m.StreamSeq})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A cache fed every event of a session from its start (a worker's consumer,
// consume.Handler.Observe) reads nothing of the session's log: it starts
// the session from its first event, and each State finds the events read
// already. What it was not fed, it reads: one event from the session's last
// event, more by a scan. Redelivered, repeated or unknown events change
// nothing. Every answer is the ledger's.
func TestObservedCacheReadsNoLog(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	fed := 0 // events of s1 fed so far
	feed := func(upTo int) {
		t.Helper()
		all := r.stored(t, "s1")
		for _, s := range all[fed:upTo] {
			c.Observe(r.ctx, s.ev, s.seq)
		}
		fed = upTo
	}
	feed(1)
	if st := c.Stats(); st.Sessions != 1 || st.Loads != 0 {
		t.Fatalf("after the first event: %+v, want the session held, not loaded", st)
	}
	for n := range 3 {
		r.turn(t, "s1", n)
		feed(len(r.stored(t, "s1")))
		head := r.head(t, "s1")
		st, err := c.StateSince(r.ctx, "s1", head)
		if err != nil {
			t.Fatal(err)
		}
		r.equal(t, st, "s1", 0)
	}
	if st := c.Stats(); st.Loads != 0 || st.Scans != 0 || st.Refolds != 0 {
		t.Fatalf("fed every event: %+v, want no load, no scan, no refold", st)
	}
	// Fed again (redeliveries).
	all := r.stored(t, "s1")
	c.Observe(r.ctx, all[3].ev, all[3].seq)
	c.Observe(r.ctx, all[len(all)-1].ev, all[len(all)-1].seq)
	r.same(t, c, "s1", 0)
	// One event not fed: read as the session's last event, no scan.
	r.emit(t, "s1", &events.ChunkAppended{Role: "user", Content: "unfed"})
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Scans != 0 {
		t.Fatalf("one event not fed: %+v, want no scan", st)
	}
	fed = len(r.stored(t, "s1"))
	// Two events not fed: a scan from where the cache stopped.
	r.emit(t, "s1", &events.ChunkAppended{Role: "user", Content: "unfed 1"})
	r.emit(t, "s1", &events.ChunkAppended{Role: "user", Content: "unfed 2"})
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Scans != 1 || st.Loads != 0 {
		t.Fatalf("two events not fed: %+v, want one scan", st)
	}
	// A turn not fed, more than a snapshot interval: loaded from the
	// nearest snapshot instead of scanned; then fed again.
	r.turn(t, "s1", 5)
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Scans != 1 || st.Loads != 1 {
		t.Fatalf("a turn not fed: %+v, want it loaded, no other scan", st)
	}
	fed = len(r.stored(t, "s1"))
	r.turn(t, "s1", 6)
	feed(len(r.stored(t, "s1")))
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Loads != 1 || st.Scans != 1 || st.Refolds != 0 {
		t.Fatalf("fed again: %+v, want no other load or scan, no refold", st)
	}
	// A session first seen mid-way is not started from a later event.
	r.start(t, "s2")
	r.turn(t, "s2", 0)
	s2 := r.stored(t, "s2")
	c.Observe(r.ctx, s2[2].ev, s2[2].seq)
	if st := c.Stats(); st.Sessions != 1 {
		t.Fatalf("an unknown session's later event: %+v, want it not held", st)
	}
	r.same(t, c, "s2", 0)
}

// A handler's triggers come in order: StateSince of one, then the state at
// the next (the selector), folds each event once, with no refold, however
// far the fed head ran ahead.
func TestStateSinceKeepsTheHeadApart(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	r.feed(t, c, "s1")
	head := r.head(t, "s1")
	for at := uint64(1); at <= head; at++ {
		h, err := c.StateSince(r.ctx, "s1", at)
		if err != nil {
			t.Fatal(err)
		}
		r.equal(t, h, "s1", 0)
		r.sameAndHead(t, c, "s1", at)
	}
	if st := c.Stats(); st.Loads != 0 || st.Scans != 0 || st.Refolds != 0 {
		t.Fatalf("in order: %+v, want no load, scan or refold", st)
	}
}

// A cache fed only some of a session's events (processes sharing a
// consumer) scans for the rest at once, without reading the last event
// first; one that falls further behind than a snapshot interval forgets
// the session and loads it from a snapshot when asked. Every answer is the
// ledger's.
func TestPartlyFedCacheScans(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	all := r.stored(t, "s1")
	for _, i := range []int{0, 1, 3} { // the third went to another process
		c.Observe(r.ctx, all[i].ev, all[i].seq)
	}
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Loads != 0 || st.Scans != 1 || st.Lasts != 0 {
		t.Fatalf("fed with a gap: %+v, want no load, one scan, no last-event read", st)
	}
	r.start(t, "s2")
	r.turn(t, "s2", 0)
	all = r.stored(t, "s2")
	c.Observe(r.ctx, all[0].ev, all[0].seq)
	c.Observe(r.ctx, all[1+snapshotEvery+1].ev, all[1+snapshotEvery+1].seq)
	if st := c.Stats(); st.Sessions != 1 {
		t.Fatalf("fed an event more than a snapshot interval ahead: %+v, want the session forgotten", st)
	}
	r.same(t, c, "s2", 0)
	if st := c.Stats(); st.Loads != 1 {
		t.Fatalf("asked for a forgotten session: %+v, want it loaded", st)
	}
}

// feed shows the cache every stored event of the sessions, in stream order,
// as a consumer that receives every kind would.
func (r *rig) feed(t *testing.T, c *fold.Cache, ids ...string) {
	t.Helper()
	var all []stored
	for _, id := range ids {
		all = append(all, r.stored(t, id)...)
	}
	slices.SortFunc(all, func(a, b stored) int { return cmp.Compare(a.seq, b.seq) })
	for _, s := range all {
		c.Observe(r.ctx, s.ev, s.seq)
	}
}

// Forks, merges and compactions, fed: a fork (whose first event folds its
// parent's state) is loaded once and fed after; a merge folds in the
// source's events; every answer is the ledger's, without a scan.
func TestObservedThroughForkMergeAndCompaction(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	ids := []string{"m1", "x1", "y1"}
	r.start(t, "m1")
	r.turn(t, "m1", 0)
	r.feed(t, c, ids...)
	at := r.head(t, "m1")
	for _, id := range []string{"x1", "y1"} {
		if _, err := r.c.Fork(r.ctx, api.ForkRequest{Parent: "m1", At: at - 3, ID: id}); err != nil {
			t.Fatal(err)
		}
		r.same(t, c, id, 0) // loaded: a fork is not started from its first event
	}
	r.turn(t, "x1", 1)
	r.turn(t, "y1", 2)
	r.emit(t, "y1", &events.TranscriptCompacted{FromSeq: 2, ToSeq: 9, Summary: "turn 0 ran echo", TokensBefore: 40, TokensAfter: 10})
	if _, err := r.c.Merge(r.ctx, api.MergeRequest{Target: "y1", Source: "x1"}); err != nil {
		t.Fatal(err)
	}
	r.turn(t, "m1", 3)
	if _, err := r.c.Merge(r.ctx, api.MergeRequest{Target: "m1", Source: "y1"}); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	r.feed(t, c, ids...)
	for _, id := range ids {
		r.same(t, c, id, 0)
	}
	if st := c.Stats(); st.Scans != before.Scans || st.Loads != 2 {
		t.Fatalf("fed forks and merges: %+v (before %+v), want no scan, the two forks loaded", st, before)
	}
}

// Observe never waits for a caller holding the session: what it is shown
// meanwhile is left for that caller, which takes it before reading, so
// nothing is scanned.
func TestObserveLeavesEventsForTheHolder(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.feed(t, c, "s1")
	r.turn(t, "s1", 0)
	release := c.Hold("s1")
	for _, s := range r.stored(t, "s1")[1:] {
		c.Observe(r.ctx, s.ev, s.seq) // returns at once, or the test hangs
	}
	release()
	r.same(t, c, "s1", 0)
	if st := c.Stats(); st.Loads != 0 || st.Scans != 0 {
		t.Fatalf("events observed while held: %+v, want no load, no scan", st)
	}
}

// The head kept beside a state at a trigger follows what is fed after it.
func TestFedHeadFollows(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	r.feed(t, c, "s1")
	at := r.head(t, "s1") - 3
	if _, _, err := c.StateAndHead(r.ctx, "s1", at); err != nil {
		t.Fatal(err)
	}
	fed := len(r.stored(t, "s1"))
	r.turn(t, "s1", 1)
	for _, s := range r.stored(t, "s1")[fed:] {
		c.Observe(r.ctx, s.ev, s.seq)
	}
	r.sameAndHead(t, c, "s1", at)
	if st := c.Stats(); st.Scans != 0 || st.Refolds != 0 {
		t.Fatalf("head followed: %+v, want no scan, no refold", st)
	}
}

// A fork's first event folds its parent's state: a cache is not started
// from it, and loads the fork when asked.
func TestFedForkIsLoaded(t *testing.T) {
	r := newRig(t)
	r.start(t, "p1")
	r.turn(t, "p1", 0)
	if _, err := r.c.Fork(r.ctx, api.ForkRequest{Parent: "p1", At: 3, ID: "f1"}); err != nil {
		t.Fatal(err)
	}
	r.turn(t, "f1", 1)
	c := r.cache(t, 0)
	r.feed(t, c, "f1")
	if st := c.Stats(); st.Sessions != 0 {
		t.Fatalf("fed a fork's events: %+v, want nothing held", st)
	}
	r.same(t, c, "f1", 0)
	if st := c.Stats(); st.Loads != 1 {
		t.Fatalf("asked for the fork: %+v, want it loaded", st)
	}
}

// A fed cache's head, asked for between triggers (a timer firing, a recall),
// leaves the state at the last trigger: the next trigger is not refolded.
func TestFedHeadBetweenTriggers(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.turn(t, "s1", 0)
	r.feed(t, c, "s1")
	head := r.head(t, "s1")
	for at := uint64(1); at <= head; at++ {
		r.sameAndHead(t, c, "s1", at)
		r.same(t, c, "s1", 0)
	}
	if st := c.Stats(); st.Refolds != 0 || st.Scans != 0 {
		t.Fatalf("heads between triggers: %+v, want no refold, no scan", st)
	}
}

// A trigger's state asked for when the cache is far behind it: the head is
// loaded from a snapshot, and the trigger's state folded anew, equal.
func TestFarBehindStateAt(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	r.feed(t, c, "s1")
	r.turn(t, "s1", 0) // not fed: more than a snapshot interval
	at := r.head(t, "s1") - 2
	r.sameAndHead(t, c, "s1", at)
	if st := c.Stats(); st.Loads != 1 || st.Refolds != 1 {
		t.Fatalf("far behind a trigger: %+v, want the head loaded and the trigger refolded", st)
	}
}

// A session's entry keys on a copy of its ID, not on the message the first
// event came in (whose attributes are substrings of it): overwritten after
// it was observed, the entry is still found under the session's ID.
func TestEntryKeepsNoMessage(t *testing.T) {
	r := newRig(t)
	c := r.cache(t, 0)
	r.start(t, "s1")
	first := r.stored(t, "s1")[0]
	c.Observe(r.ctx, first.ev, first.seq)
	for i := range first.ev.Raw {
		first.ev.Raw[i] = 'x'
	}
	st, err := c.StateSince(r.ctx, "s1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r.equal(t, st, "s1", 0)
	if s := c.Stats(); s.Sessions != 1 || s.Loads != 0 {
		t.Errorf("after the first event's message was overwritten: %+v, want the observed session found, not loaded", s)
	}
}
