package ledger_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/archive"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// clock is a test clock: "now" moves only when the test says.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newLedger builds a ledger on nc that is not serving: tests call its
// methods directly (a second ledger, cold caches, its own retention pass).
func newLedger(t *testing.T, nc *nats.Conn, name string, ret ledger.Retention, clk *clock) *ledger.Ledger {
	t.Helper()
	store, err := eventstore.Open(context.Background(), nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.Key = testKey
	cfg.SnapshotEvery, cfg.Name, cfg.Retention = testK, name, ret
	l, err := ledger.New(store, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		l.SetClock(clk.Now)
	}
	return l
}

// ownStored counts a session's own events still in the hot stream.
func ownStored(t *testing.T, store *eventstore.Store, id string) []string {
	t.Helper()
	var types []string
	err := store.ScanSession(context.Background(), id, 1, 0, func(m eventstore.Msg) error {
		ev, err := events.ParseStored(m.Body)
		if err != nil {
			return err
		}
		types = append(types, ev.Type)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return types
}

func TestLifecycleRefusalsAreRecordedAndLoseNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "life")
	r.emit(t, "life", chunk("one"))
	r.emit(t, "life", &events.SessionPaused{Reason: "review"})
	// Paused: events are still accepted.
	r.emit(t, "life", chunk("while paused"))

	check := func(name string, err error, code api.Code, inMsg string) {
		t.Helper()
		wantCode(t, err, code)
		if !strings.Contains(err.Error(), inMsg) {
			t.Errorf("%s: error %q does not say %q", name, err, inMsg)
		}
		rej := r.rejections(t, "life")
		if len(rej) == 0 || rej[len(rej)-1].Code != string(code) {
			t.Errorf("%s: refusal not recorded: %+v", name, rej)
		}
	}
	_, err := r.c.Pause(ctx, "life", "again")
	check("pause paused", err, api.CodeTransition, "already paused")
	_, err = r.c.Archive(ctx, api.ArchiveRequest{Session: "life"})
	check("archive paused", err, api.CodeTransition, "only a closed session can be archived")
	r.emit(t, "life", &events.SessionResumed{Reason: "ok"})
	_, err = r.c.Archive(ctx, api.ArchiveRequest{Session: "life"})
	check("archive active", err, api.CodeTransition, "close it first")
	_, err = r.c.Emit(ctx, "life", &events.SessionArchived{BundleRef: "sha256:" + strings.Repeat("0", 64), FromSeq: 1, HeadSeq: 1,
		HeadHash: strings.Repeat("0", 64), HeadStreamSeq: 1, Events: 1})
	check("forged archive", err, api.CodeUseOperation, "archive")

	before, err := r.c.State(ctx, "life")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Close(ctx, "life", events.SessionClosed{Outcome: "succeeded", Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.c.Pause(ctx, "life", "late")
	check("pause closed", err, api.CodeClosed, "is closed")
	_, err = r.c.Emit(ctx, "life", chunk("late"))
	check("chunk after close", err, api.CodeClosed, "is closed")
	_, err = r.c.Archive(ctx, api.ArchiveRequest{Session: "life", Purge: false})
	if err != nil {
		t.Fatalf("archive closed: %v", err)
	}
	_, err = r.c.Resume(ctx, "life", "late")
	check("resume archived", err, api.CodeClosed, "is archived")

	st, err := r.c.State(ctx, "life")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != session.StatusArchived || st.Seq != before.Seq+2 || len(st.Chunks) != 2 {
		t.Fatalf("state after refusals: status %s seq %d chunks %d (before: seq %d)", st.Status, st.Seq, len(st.Chunks), before.Seq)
	}
	r.verifyOK(t, "life")
	_, err = r.c.Archive(ctx, api.ArchiveRequest{Session: "ghost"})
	wantCode(t, err, api.CodeNotFound)
}

func TestArchiveAndPurgeKeepEveryReadExact(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveOn(t, nc, "ledger-a")
	ctx := context.Background()
	r.start(t, "old")
	for i := range 9 {
		r.emit(t, "old", chunk("step "+string(rune('a'+i))))
	}
	fork, err := r.c.Fork(ctx, forkAt("old", 5, "kid"))
	if err != nil {
		t.Fatal(err)
	}
	r.emit(t, "kid", chunk("kid's own"))
	if _, err := r.c.Close(ctx, "old", events.SessionClosed{Outcome: "succeeded", Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	head := uint64(11)
	wantStates := map[uint64]string{}
	for at := uint64(1); at <= head; at++ {
		st, err := r.c.StateAt(ctx, "old", at)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(st)
		wantStates[at] = string(b)
	}
	wantLog, err := r.c.LogRaw(ctx, "old", client.Range{From: 1, To: head})
	if err != nil {
		t.Fatal(err)
	}
	wantKid, _ := r.c.State(ctx, "kid")

	rep, err := r.c.Archive(ctx, api.ArchiveRequest{Session: "old", Purge: true})
	wantCode(t, err, api.CodeTransition)
	if !strings.Contains(err.Error(), "live fork kid") {
		t.Fatalf("purge refusal does not name the fork: %v", err)
	}
	if got := ownStored(t, r.store, "old"); len(got) != 12 {
		t.Fatalf("refused purge removed events: %d left of 12 (%v)", len(got), got)
	}
	rej := r.rejections(t, "old")
	if len(rej) == 0 || rej[len(rej)-1].Type != events.TypeSessionPurged {
		t.Fatalf("purge refusal not recorded: %+v", rej)
	}
	// Archived meanwhile (the purge came second); archiving again answers it.
	again, err := r.c.Archive(ctx, api.ArchiveRequest{Session: "old"})
	if err != nil || !again.Archived.Duplicate {
		t.Fatalf("archive again: %+v %v", again, err)
	}
	if _, err := r.c.Close(ctx, "kid", events.SessionClosed{Outcome: "abandoned", Reason: "explored"}); err != nil {
		t.Fatal(err)
	}
	rep, err = r.c.Archive(ctx, api.ArchiveRequest{Session: "old", Purge: true})
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	if got := ownStored(t, r.store, "old"); !reflect.DeepEqual(got, []string{events.TypeSessionArchived, events.TypeSessionPurged}) {
		t.Fatalf("hot stream after purge holds %v", got)
	}

	// The bundle verifies offline, with nothing but pkg/events' chain.
	data, err := r.store.GetBlob(ctx, rep.BundleRef)
	if err != nil {
		t.Fatal(err)
	}
	b, err := archive.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(); err != nil || b.HeadSeq != head || b.Events != int(head) {
		t.Fatalf("bundle: head %d events %d verify %v", b.HeadSeq, b.Events, err)
	}

	// Every read still answers exactly, on the serving ledger and on a
	// cold one that never saw the session.
	cold := newLedger(t, nc, "ledger-cold", ledger.Retention{}, nil)
	for at := uint64(1); at <= head; at++ {
		for name, get := range map[string]func() (*session.State, error){
			"served": func() (*session.State, error) { return r.c.StateAt(ctx, "old", at) },
			"cold":   func() (*session.State, error) { return cold.State(ctx, "old", at) },
		} {
			st, err := get()
			if err != nil {
				t.Fatalf("%s state at %d: %v", name, at, err)
			}
			if b, _ := json.Marshal(st); string(b) != wantStates[at] {
				t.Fatalf("%s state at %d changed after purge:\n got %s\nwant %s", name, at, b, wantStates[at])
			}
		}
	}
	gotLog, err := r.c.LogRaw(ctx, "old", client.Range{From: 1, To: head})
	if err != nil || len(gotLog) != len(wantLog) {
		t.Fatalf("log after purge: %d events, %v", len(gotLog), err)
	}
	for i := range wantLog {
		var a, b any
		_ = json.Unmarshal(wantLog[i], &a)
		_ = json.Unmarshal(gotLog[i], &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("log event %d differs after purge", i+1)
		}
	}
	r.verifyOK(t, "old")
	if rep, err := cold.Verify(ctx, "old"); err != nil || !rep.OK || rep.Head != head+2 {
		t.Fatalf("cold verify: %+v %v", rep, err)
	}
	// The fork reads its parent's prefix out of the archive.
	r.verifyOK(t, "kid")
	kid, err := cold.State(ctx, "kid", fork.Seq+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(kid.Chunks) != len(wantKid.Chunks) || kid.Chunks[3].Content != "step d" {
		t.Fatalf("fork's state through the purged parent: %+v", kid.Chunks)
	}
	st, _ := r.c.State(ctx, "old")
	if st.Archive == nil || st.Archive.PurgedSeq != head+2 || st.Archive.BundleRef != rep.BundleRef {
		t.Fatalf("archive in state: %+v", st.Archive)
	}
}

func TestRetentionPassArchivesAndPurgesOnceAcrossLedgers(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveOn(t, nc, "ledger-a")
	ctx := context.Background()
	clk := &clock{now: time.Now().UTC()}
	pol := ledger.Retention{ArchiveAfter: 7 * 24 * time.Hour, PurgeAfter: 30 * 24 * time.Hour}
	a := newLedger(t, nc, "ret-a", pol, clk)
	b := newLedger(t, nc, "ret-b", pol, clk)

	r.start(t, "s1")
	r.emit(t, "s1", chunk("work"))
	r.emit(t, "s1", &events.SessionClosed{Reason: "done"}, events.WithTime(clk.Now()))
	r.start(t, "s2") // stays active: never archived

	pass := func(l *ledger.Ledger) ledger.RetentionReport {
		t.Helper()
		rep, err := l.Retain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := pass(a); len(rep.Archived)+len(rep.Purged) != 0 {
		t.Fatalf("too early: %+v", rep)
	}
	clk.Advance(8 * 24 * time.Hour)
	ra, rb := pass(a), pass(b)
	if !reflect.DeepEqual(ra.Archived, []string{"s1"}) {
		t.Fatalf("ledger a archived %v", ra.Archived)
	}
	if got := ownStored(t, r.store, "s1"); len(got) != 4 || got[3] != events.TypeSessionArchived {
		t.Fatalf("after two passes s1 holds %v (b archived %v)", got, rb.Archived)
	}
	clk.Advance(31 * 24 * time.Hour)
	pass(b)
	pass(a)
	if got := ownStored(t, r.store, "s1"); !reflect.DeepEqual(got, []string{events.TypeSessionArchived, events.TypeSessionPurged}) {
		t.Fatalf("after purge passes s1 holds %v", got)
	}
	if rep := pass(a); len(rep.Archived)+len(rep.Purged)+len(rep.Skipped) != 0 {
		t.Fatalf("a pass after everything is done did %+v", rep)
	}
	// The index marks the session purged, so later passes skip it without
	// reading the stream.
	if rec, err := r.store.GetRecord(ctx, "s1"); err != nil || !rec.Purged {
		t.Fatalf("index record of s1: %+v %v, want purged", rec, err)
	}
	st, err := r.c.State(ctx, "s2")
	if err != nil || st.Status != session.StatusActive {
		t.Fatalf("active session touched: %+v %v", st, err)
	}
	r.verifyOK(t, "s1")
	if st, err := r.c.StateAt(ctx, "s1", 2); err != nil || st.Chunks[0].Content != "work" {
		t.Fatalf("purged s1 at 2: %+v %v", st, err)
	}
}

func TestCompactionLeavesReplayAndVerifyExact(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "talk")
	for i := range 8 {
		r.emit(t, "talk", chunk(strings.Repeat("word ", 60+i)))
	}
	var before []string
	for at := uint64(1); at <= 9; at++ {
		st, _ := r.c.StateAt(ctx, "talk", at)
		b, _ := json.Marshal(st)
		before = append(before, string(b))
	}
	ack, plan, err := r.c.Compact(ctx, "talk", 3)
	if err != nil {
		t.Fatal(err)
	}
	if plan.FromSeq != 2 || plan.ToSeq != 6 || plan.TokensAfter >= plan.TokensBefore {
		t.Fatalf("plan %+v", plan)
	}
	for at := uint64(1); at <= 9; at++ {
		st, _ := r.c.StateAt(ctx, "talk", at)
		if b, _ := json.Marshal(st); string(b) != before[at-1] {
			t.Fatalf("state at %d changed by the compaction", at)
		}
	}
	st, _ := r.c.State(ctx, "talk")
	if st.Seq != ack.Seq || len(st.Chunks) != 8 || len(st.Compactions) != 1 {
		t.Fatalf("after compaction: seq %d chunks %d compactions %d", st.Seq, len(st.Chunks), len(st.Compactions))
	}
	r.verifyOK(t, "talk")

	_, _, err = r.c.Compact(ctx, "missing", 3)
	wantCode(t, err, api.CodeNotFound)
	if _, err := r.c.Close(ctx, "talk", events.SessionClosed{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.c.Compact(ctx, "talk", 1)
	wantCode(t, err, api.CodeClosed)
	if st2, _ := r.c.State(ctx, "talk"); len(st2.Chunks) != 8 || len(st2.Compactions) != 1 {
		t.Fatalf("refused compaction changed the state")
	}
}
