package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

// watchRig is a real embedded JetStream, the ledger on it, a client, and a
// Watch running in the background whose events and warnings arrive on
// channels.
type watchRig struct {
	nc    *nats.Conn
	c     *client.Client
	got   chan events.Stored
	warns chan client.Warning
	done  chan error
}

func newWatchRig(t *testing.T) *watchRig {
	t.Helper()
	_, nc := natstest.Start(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, nc, service.ConfigIn(t.TempDir()), slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { stop(); <-done })
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &watchRig{nc: nc, c: c, got: make(chan events.Stored, 100), warns: make(chan client.Warning, 100), done: make(chan error, 1)}
}

// watch starts watching session id from sequence from.
func (r *watchRig) watch(t *testing.T, id string, from uint64, opts ...client.WatchOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts = append(opts, client.WithWarnings(func(w client.Warning) { r.warns <- w }))
	go func() {
		r.done <- r.c.Watch(ctx, id, func(ev events.Stored) error { r.got <- ev; return nil }, append(opts, client.From(from))...)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; !errors.Is(err, context.Canceled) {
			t.Errorf("watch ended with %v, want the cancellation", err)
		}
	})
}

// next is the next event the watch showed.
func (r *watchRig) next(t *testing.T) events.Stored {
	t.Helper()
	select {
	case ev := <-r.got:
		return ev
	case err := <-r.done:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event shown within 10s")
	}
	return events.Stored{}
}

// warning is the next warning of the watch.
func (r *watchRig) warning(t *testing.T) client.Warning {
	t.Helper()
	select {
	case w := <-r.warns:
		return w
	case err := <-r.done:
		t.Fatalf("watch ended: %v", err)
	case ev := <-r.got:
		t.Fatalf("watch showed %d (%s from %s) where a warning was due", ev.Seq, ev.ID, ev.Source)
	case <-time.After(10 * time.Second):
		t.Fatal("no warning within 10s")
	}
	return client.Warning{}
}

func (r *watchRig) emit(t *testing.T, id, content string) api.Ack {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, &events.ChunkAppended{Role: events.RoleUser, Content: content})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// publishLive publishes body on the session's live subject, as anyone
// allowed to publish there can.
func (r *watchRig) publishLive(t *testing.T, id string, body []byte) {
	t.Helper()
	subject := strings.TrimSuffix(events.LiveFilter(events.DefaultTenant, id), ">") + events.TokenConversation
	if err := r.nc.Publish(subject, body); err != nil {
		t.Fatal(err)
	}
}

// sealed is a chunk event sealed as the ledger would, at seq after prev,
// from source.
func sealed(t *testing.T, id string, seq uint64, prev, source, content string) []byte {
	t.Helper()
	ev, err := events.New(id, &events.ChunkAppended{Role: events.RoleUser, Content: content}, events.WithSource(source))
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := events.Seal(&ev, seq, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func wantWarning(t *testing.T, w client.Warning, seq uint64, kind error, says string) {
	t.Helper()
	if w.Seq != seq || !errors.Is(w.Err, kind) || !strings.Contains(w.Err.Error(), says) {
		t.Errorf("warning %s; want seq %d, %v, %q", w, seq, kind, says)
	}
}

// What others publish on the live subject is checked and skipped: a forged
// event is never shown in the real one's place, garbage does not end the
// watch, and a forged far-future sequence does not silence it.
func TestWatchSkipsWhatTheLedgerDidNotStore(t *testing.T) {
	r := newWatchRig(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "w", events.SessionStarted{Task: "watch me"}); err != nil {
		t.Fatal(err)
	}
	two := r.emit(t, "w", "two")
	r.watch(t, "w", 1)
	if ev := r.next(t); ev.Seq != 1 {
		t.Fatalf("first event shown: %d", ev.Seq)
	}
	if ev := r.next(t); ev.Seq != 2 || ev.Hash != two.Hash {
		t.Fatalf("second event shown: %d %s", ev.Seq, ev.Hash)
	}

	// Sealed correctly as the next event: only the log can tell.
	r.publishLive(t, "w", sealed(t, "w", 3, two.Hash, "mallory", "forged"))
	wantWarning(t, r.warning(t), 3, client.ErrForged, "the ledger's log has no event 3")

	tampered := strings.Replace(string(sealed(t, "w", 3, two.Hash, "mallory", "forged")), "forged", "altered", 1)
	r.publishLive(t, "w", []byte(tampered))
	wantWarning(t, r.warning(t), 3, client.ErrForged, "hash mismatch")

	r.publishLive(t, "w", sealed(t, "w", 3, strings.Repeat("0", 64), "mallory", "forged"))
	wantWarning(t, r.warning(t), 3, client.ErrForged, "chain link")

	r.publishLive(t, "w", []byte("garbage"))
	wantWarning(t, r.warning(t), 0, client.ErrNotEvent, "parse stored event")

	r.publishLive(t, "w", sealed(t, "other", 3, two.Hash, "mallory", "elsewhere"))
	wantWarning(t, r.warning(t), 3, client.ErrNotEvent, `names session "other"`)

	r.publishLive(t, "w", sealed(t, "w", 2147483646, strings.Repeat("1", 64), "mallory", "far ahead"))
	wantWarning(t, r.warning(t), 2147483646, client.ErrForged, "the ledger's log has no event 2147483646 (it ends at 2)")

	// A copy of an event shown already is dropped without a word.
	r.publishLive(t, "w", sealed(t, "w", 2, "whatever", "mallory", "old"))

	for i, content := range []string{"three", "four"} {
		a := r.emit(t, "w", content)
		ev := r.next(t)
		if ev.Seq != uint64(3+i) || ev.ID != a.ID || ev.Hash != a.Hash || ev.Source == "mallory" {
			t.Fatalf("shown %d %s from %s; want the ledger's %d %s", ev.Seq, ev.ID, ev.Source, a.Seq, a.ID)
		}
	}
	select {
	case w := <-r.warns:
		t.Errorf("unexpected warning: %s", w)
	default:
	}
}

// When a live event and the log disagree, the log wins: the ledger's event
// is shown, the live one reported.
func TestWatchTheLogWins(t *testing.T) {
	r := newWatchRig(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "w", events.SessionStarted{Task: "watch me"}); err != nil {
		t.Fatal(err)
	}
	// The real event 2's live copy is lost; a forged one arrives instead.
	ev, err := events.New("w", &events.ChunkAppended{Role: events.RoleUser, Content: "real"})
	if err != nil {
		t.Fatal(err)
	}
	r.watch(t, "w", 1, client.WithDroppedLive(func(m *nats.Msg) bool {
		return strings.Contains(string(m.Data), ev.ID())
	}))
	one := r.next(t)
	a, err := r.c.Append(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	r.publishLive(t, "w", sealed(t, "w", 2, one.Hash, "mallory", "forged"))
	if got := r.next(t); got.Seq != 2 || got.ID != a.ID || got.Hash != a.Hash {
		t.Fatalf("shown %d %s from %s; want the ledger's %s", got.Seq, got.ID, got.Source, a.ID)
	}
	wantWarning(t, r.warning(t), 2, client.ErrForged, "the ledger's log holds another event at 2")
}

// Events the live feed missed are shown from the log, in order, once each,
// whether the watch started mid-session or lost live messages.
func TestWatchFillsGapsFromTheLog(t *testing.T) {
	r := newWatchRig(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "w", events.SessionStarted{Task: "watch me"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"two", "three"} {
		r.emit(t, "w", s)
	}
	lose := map[uint64]bool{5: true, 6: true}
	r.watch(t, "w", 2, client.WithDroppedLive(func(m *nats.Msg) bool {
		ev, err := events.ParseStored(m.Data)
		return err == nil && lose[ev.Seq]
	}))
	var acks []api.Ack
	for _, s := range []string{"four", "five", "six", "seven", "eight"} {
		acks = append(acks, r.emit(t, "w", s))
	}
	for want := uint64(2); want <= 8; want++ {
		ev := r.next(t)
		if ev.Seq != want {
			t.Fatalf("shown %d, want %d", ev.Seq, want)
		}
		if want >= 4 && ev.ID != acks[want-4].ID {
			t.Fatalf("event %d is %s, want %s", want, ev.ID, acks[want-4].ID)
		}
	}
	// Shown in order, so nothing shown twice came before the next one.
	nine := r.emit(t, "w", "nine")
	if ev := r.next(t); ev.Seq != 9 || ev.ID != nine.ID {
		t.Fatalf("after 8 shown %d, want 9", ev.Seq)
	}
	select {
	case w := <-r.warns:
		t.Errorf("unexpected warning: %s", w)
	default:
	}
}

// With a Verify hook (a signature check, say), an event it refuses is
// skipped without asking the log, and the ones it accepts are shown.
func TestWatchVerifyHook(t *testing.T) {
	r := newWatchRig(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "w", events.SessionStarted{Task: "watch me"}); err != nil {
		t.Fatal(err)
	}
	errUnsigned := errors.New("no valid signature")
	r.watch(t, "w", 1, client.WithVerify(func(ev events.Stored) error {
		if ev.Source == "mallory" {
			return errUnsigned
		}
		return nil
	}))
	one := r.next(t)
	r.publishLive(t, "w", sealed(t, "w", 2, one.Hash, "mallory", "forged"))
	w := r.warning(t)
	wantWarning(t, w, 2, client.ErrForged, "no valid signature")
	a := r.emit(t, "w", "real")
	if ev := r.next(t); ev.Seq != 2 || ev.ID != a.ID {
		t.Fatalf("shown %d %s, want the ledger's %s", ev.Seq, ev.ID, a.ID)
	}
}

// Events a batch stores are signed in a record apart (their stored and live
// rathsig is a reference): a watch checking signatures shows them all, each
// once, in order, with its signature expanded from the log, and warns of
// nothing.
func TestWatchWithSignaturesShowsBatchedEvents(t *testing.T) {
	r := newWatchRig(t)
	ctx := context.Background()
	ids := make([]string, events.MinRecord)
	for i := range ids {
		ids[i] = "b" + string(rune('0'+i))
		if _, err := r.c.Start(ctx, ids[i], events.SessionStarted{Task: "batched"}); err != nil {
			t.Fatal(err)
		}
	}
	ring, err := r.c.Keyring(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.watch(t, ids[0], 1, client.WithSignatures(ring))
	if ev := r.next(t); ev.Seq != 1 {
		t.Fatalf("shown %d first", ev.Seq)
	}
	for round := range 3 {
		batch := make([]event.Event, len(ids))
		for i, id := range ids {
			if batch[i], err = events.New(id, &events.ChunkAppended{Role: events.RoleUser, Content: "round " + string(rune('0'+round))}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := r.c.AppendBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		a, err := res[0].Ack.Inline() // a compact receipt: the record's reference and the record
		if err != nil {
			t.Fatal(err)
		}
		ev := r.next(t)
		if ev.Seq != a.Seq || ev.ID != a.ID || ev.Sig != a.Sig {
			t.Fatalf("shown %d %s signed %q, want %d %s signed %q (the receipt's)", ev.Seq, ev.ID, ev.Sig, a.Seq, a.ID, a.Sig)
		}
		if err := ring.Verify(ev.Session, ev.Seq, ev.Hash, ev.Sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case w := <-r.warns:
		t.Fatalf("warned: %s", w)
	default:
	}
}
