package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// headsRecorded writes the heads the ledger holds back (it coalesces them
// for up to HeadEvery) and waits until JetStream has acknowledged them.
func headsRecorded(t *testing.T, r *rig) {
	t.Helper()
	if err := r.l.FlushHeads(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// wantFault checks a verify report names a fault at seq whose reason says
// because.
func wantFault(t *testing.T, r *rig, id string, seq uint64, because string) {
	t.Helper()
	rep, err := r.c.Verify(context.Background(), id)
	if err != nil {
		t.Fatalf("verify %s: %v", id, err)
	}
	if rep.OK || rep.Fault == nil || rep.Fault.Seq != seq || !strings.Contains(rep.Fault.Reason, because) {
		t.Fatalf("verify %s: %+v %+v, want a fault at %d saying %q", id, rep, rep.Fault, seq, because)
	}
}

// A tail removed from the stream (nats stream rmm) is named by verify, the
// next append is refused as damaged instead of losing to "conflicts", and a
// ledger started afterwards never stores another event at that sequence.
func TestCutTailIsReportedAndNeverReused(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	r.emit(t, "s", chunk("two"))
	last := r.emit(t, "s", chunk("three"))
	headsRecorded(t, r)
	r.verifyOK(t, "s")

	stream, err := r.store.JetStream().Stream(context.Background(), events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(context.Background(), last.StreamSeq); err != nil {
		t.Fatal(err)
	}
	wantFault(t, r, "s", 3, "missing sequences 3..3")

	_, err = r.c.Append(context.Background(), mustEvent(t, "s", chunk("after the cut")))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "events 3..3 were removed or lost") {
		t.Fatalf("refusal does not name the missing range: %v", err)
	}
	fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
	_, err = fresh.l.Append(context.Background(), mustEvent(t, "s", chunk("after a restart"))) // not cached there
	wantCode(t, err, api.CodeDamaged)
	if got, err := r.c.Log(context.Background(), "s", client.Range{From: 1}); err != nil || len(got) != 2 {
		t.Fatalf("nothing may be stored at the cut sequence: %d events, %v", len(got), err)
	}
}

// A session whose every event vanished is damaged, not "not found", and its
// ID cannot be started again.
func TestVanishedSessionCannotStartAgain(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	r.emit(t, "s", chunk("two"))
	headsRecorded(t, r)
	stream, err := r.store.JetStream().Stream(context.Background(), events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background(), jetstream.WithPurgeSubject(events.SessionFilter("s"))); err != nil {
		t.Fatal(err)
	}
	// A ledger that did not see the session (the rig's own still caches
	// it; requests on the bus may reach either, so this one is called).
	fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
	_, err = fresh.l.Append(context.Background(), mustEvent(t, "s", &events.SessionStarted{Task: "a second life"}))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "never used twice") {
		t.Fatalf("refusal: %v", err)
	}
	_, err = fresh.l.State(context.Background(), "s", 0)
	wantCode(t, err, api.CodeDamaged)
	rep, err := fresh.l.Verify(context.Background(), "s")
	if err != nil || rep.OK || rep.Fault == nil || !strings.Contains(rep.Fault.Reason, "the log of s is gone") {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// The last record damaged on disk while the server was down: JetStream
// drops it when it starts again, and the ledger reports the session as
// damaged instead of giving it a second life.
func TestLastRecordDamagedOnDisk(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.StartServer(t, dir)
	r := serveOn(t, natstest.Connect(t, ns.ClientURL()), "before")
	r.start(t, "s")
	r.emit(t, "s", chunk("two"))
	r.emit(t, "s", chunk("the last record, to be damaged on disk"))
	headsRecorded(t, r)
	r.stop()
	ns.Shutdown()
	ns.WaitForShutdown()

	blocks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", events.StreamSessions, "msgs", "*.blk"))
	if len(blocks) == 0 {
		t.Fatalf("no block file of %s under %s", events.StreamSessions, dir)
	}
	blk := blocks[len(blocks)-1]
	data, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	at := strings.LastIndex(string(data), "the last record")
	if at < 0 {
		t.Fatalf("the last event is not in %s", blk)
	}
	data[at] ^= 0x20
	if err := os.WriteFile(blk, data, 0o600); err != nil {
		t.Fatal(err)
	}

	ns2 := natstest.StartServer(t, dir)
	nc := natstest.Connect(t, ns2.ClientURL())
	after := serveOn(t, nc, "after")
	if got, err := after.c.Log(context.Background(), "s", client.Range{From: 1}); err != nil || len(got) != 2 {
		t.Fatalf("JetStream should have dropped the damaged record: %d events, %v", len(got), err)
	}
	_, err = after.c.Append(context.Background(), mustEvent(t, "s", chunk("second life")))
	wantCode(t, err, api.CodeDamaged)
	wantFault(t, after, "s", 3, "missing sequences 3..3")
}

// A cut that also removed the head record (both need administrator
// credentials) is still seen by the running ledger that stored the events:
// it refuses to store anything at a sequence it signed.
func TestCutTailAndHeadRecordSeenByTheLedger(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	last := r.emit(t, "s", chunk("two"))
	headsRecorded(t, r)
	ctx := context.Background()
	stream, err := r.store.JetStream().Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, last.StreamSeq); err != nil {
		t.Fatal(err)
	}
	heads, err := r.store.JetStream().KeyValue(ctx, events.BucketHeads)
	if err != nil {
		t.Fatal(err)
	}
	if err := heads.Purge(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	_, err = r.l.Append(ctx, mustEvent(t, "s", chunk("at a sequence signed before")))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "ends before 2, which this ledger stored and signed") {
		t.Fatalf("refusal: %v", err)
	}
	if got, err := r.c.Log(ctx, "s", client.Range{From: 1}); err != nil || len(got) != 1 {
		t.Fatalf("nothing may be stored at the cut sequence: %d events, %v", len(got), err)
	}
}

// Heads are coalesced: a session's first head is recorded at once (its ID
// can never start again), later ones wait and only the latest is written,
// and a ledger that stops writes what it held back.
func TestHeadsCoalescedFirstAtOnceLatestOnStop(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveWith(t, nc, "ledger-a", func(c *ledger.Config) { c.HeadEvery = time.Hour })
	ctx := context.Background()
	js := r.store.JetStream()
	r.start(t, "s")
	<-js.PublishAsyncComplete()
	if h, err := r.store.GetHead(ctx, "s"); err != nil || h.Seq != 1 {
		t.Fatalf("first head: %+v, %v; want it recorded at once at 1", h, err)
	}
	var last api.Ack
	for i := range 5 {
		last = r.emit(t, "s", chunk(fmt.Sprint("turn ", i)))
	}
	<-js.PublishAsyncComplete()
	if h, err := r.store.GetHead(ctx, "s"); err != nil || h.Seq != 1 {
		t.Fatalf("head before the interval: %+v, %v; want still 1", h, err)
	}
	// rath ls shows the head at once all the same: the ledger knows it.
	recs, err := r.c.List(ctx, api.ListRequest{})
	if err != nil || len(recs) != 1 || recs[0].Seq != last.Seq {
		t.Fatalf("list: %+v, %v; want s at %d", recs, err, last.Seq)
	}
	r.stop()
	h, err := r.store.GetHead(ctx, "s")
	if err != nil || h.Seq != last.Seq || h.Hash != last.Hash || h.Sig != last.Sig {
		t.Fatalf("head after stop: %+v, %v; want the last ack %+v", h, err, last)
	}
	bucket, err := js.Stream(ctx, "KV_"+events.BucketHeads)
	if err != nil {
		t.Fatal(err)
	}
	info, err := bucket.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 2 {
		t.Fatalf("%d head records written for 6 appends; want 2 (the first, the latest)", info.State.LastSeq)
	}
}

// A negative head interval is refused, named, with the other problems.
func TestConfigRefusesNegativeHeadInterval(t *testing.T) {
	cfg := ledger.DefaultConfig()
	cfg.HeadEvery, cfg.CacheSessions = -time.Second, 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "head record interval must not be negative, got -1s") || !strings.Contains(err.Error(), "session cache size") {
		t.Fatalf("Validate = %v, want both problems named", err)
	}
}

// Verify names the tail no recorded head covers yet: within that window a
// cut of the last events (written around the ledger) leaves a log that
// verifies, and the report says which events the window holds, so an
// auditor knows what only the receipts prove (issue 29).
func TestVerifyNamesTheUnrecordedTail(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveWith(t, nc, "ledger-a", func(c *ledger.Config) { c.HeadEvery, c.SnapshotEvery = time.Hour, 128 })
	ctx := context.Background()
	js := r.store.JetStream()
	r.start(t, "s")
	for i := range 3 {
		r.emit(t, "s", chunk(fmt.Sprint("turn ", i)))
	}
	<-js.PublishAsyncComplete()
	rep, err := r.c.Verify(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if from, to, ok := rep.Unrecorded(); !rep.OK || rep.RecordedHead != 1 || !ok || from != 2 || to != 4 {
		t.Fatalf("report %+v: unrecorded %d..%d (%v), want OK with 2..4", rep, from, to, ok)
	}
	// An operator cuts the last event behind the ledger's back (snapshots
	// are far apart, as by default: none shows the cut either).
	stream, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, info.State.LastSeq); err != nil {
		t.Fatal(err)
	}
	rep, err = r.c.Verify(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if from, to, ok := rep.Unrecorded(); !rep.OK || rep.Head != 3 || !ok || from != 2 || to != 3 {
		t.Fatalf("after the cut: %+v (%+v), unrecorded %d..%d (%v); want OK at 3, naming 2..3 as the window", rep, rep.Fault, from, to, ok)
	}
	// Once the head the ledger signed is recorded the window closes: the
	// same cut shows (a stopping ledger records what it held back).
	r.stop()
	r = serveWith(t, nc, "ledger-b", func(c *ledger.Config) { c.HeadEvery, c.SnapshotEvery = time.Hour, 128 })
	rep, err = r.c.Verify(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Fault == nil || rep.Fault.Seq != 4 || !strings.Contains(rep.Fault.Reason, "the tail was removed or lost") {
		t.Fatalf("after the head was recorded: %+v (%+v); want the cut at 4 shown", rep, rep.Fault)
	}
}
