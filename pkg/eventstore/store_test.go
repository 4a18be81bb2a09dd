package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

func open(t testing.TB) *eventstore.Store {
	t.Helper()
	_, nc := natstest.Start(t)
	s, err := eventstore.Open(context.Background(), nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Open is idempotent: a second process opening the same store is fine.
	if _, err := eventstore.Open(context.Background(), nc, eventstore.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	return s
}

func sealed(t testing.TB, id string, seq uint64, prev string) ([]byte, string, string) {
	t.Helper()
	ev, err := events.New(id, &events.ChunkAppended{Role: events.RoleUser, Content: fmt.Sprint(seq)})
	if err != nil {
		t.Fatal(err)
	}
	body, hash, err := events.Seal(&ev, seq, prev, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return body, hash, ev.ID()
}

func TestAppendIsConditionalAndIdempotent(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	body, hash, id := sealed(t, "a", 1, "")
	first, err := s.Append(ctx, events.DefaultTenant, "a", events.TokenConversation, body, id, 1, hash, 0)
	if err != nil || first.Duplicate {
		t.Fatalf("first append: %+v %v", first, err)
	}
	// The same event again (a retry after a lost ack): stored once.
	again, err := s.Append(ctx, events.DefaultTenant, "a", events.TokenConversation, body, id, 1, hash, first.StreamSeq)
	if err != nil || !again.Duplicate || again.StreamSeq != first.StreamSeq {
		t.Fatalf("retry: %+v %v", again, err)
	}
	// Another event expecting a stale last sequence: a typed conflict.
	body2, hash2, id2 := sealed(t, "a", 2, hash)
	_, err = s.Append(ctx, events.DefaultTenant, "a", events.TokenConversation, body2, id2, 2, hash2, 0)
	var conflict *eventstore.ConflictError
	if !errors.As(err, &conflict) || conflict.Session != "a" {
		t.Fatalf("stale append: %v", err)
	}
	// Sessions are independent: b's first append expects 0.
	bb, bh, bid := sealed(t, "b", 1, "")
	if _, err := s.Append(ctx, events.DefaultTenant, "b", events.TokenConversation, bb, bid, 1, bh, 0); err != nil {
		t.Fatal(err)
	}
	last, err := s.Last(ctx, "a")
	if err != nil || last.StreamSeq != first.StreamSeq {
		t.Fatalf("last of a: %+v %v", last, err)
	}
	if _, err := s.Last(ctx, "nobody"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("last of nobody: %v", err)
	}
}

func TestScanReadsOneSessionAcrossBatches(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	prev := map[string]string{}
	last := map[string]uint64{}
	const n = 1300 // more than two direct-get batches
	for i := 1; i <= n; i++ {
		for _, id := range []string{"x", "y"} { // interleaved sessions
			body, hash, eid := sealed(t, id, uint64(i), prev[id])
			a, err := s.Append(ctx, events.DefaultTenant, id, events.TokenConversation, body, eid, uint64(i), hash, last[id])
			if err != nil {
				t.Fatal(err)
			}
			prev[id], last[id] = hash, a.StreamSeq
		}
	}
	var seqs []uint64
	if err := s.ScanSession(ctx, "x", 0, 0, func(m eventstore.Msg) error {
		ev, err := events.ParseStored(m.Body)
		if err != nil {
			return err
		}
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != n || seqs[0] != 1 || seqs[n-1] != n {
		t.Fatalf("scan of x: %d events, first %v", len(seqs), seqs[:3])
	}
	// Bounded scan: from and up-to stream sequences.
	count := 0
	if err := s.ScanSession(ctx, "y", 100, 200, func(m eventstore.Msg) error {
		if m.StreamSeq < 100 || m.StreamSeq > 200 {
			return fmt.Errorf("stream seq %d outside 100..200", m.StreamSeq)
		}
		count++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if count != 50 && count != 51 {
		t.Fatalf("bounded scan read %d", count)
	}
}

func TestSnapshotsIndexAndRejections(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	st := &session.State{ID: "s", Seq: 128, Hash: "h"}
	if err := s.PutSnapshot(ctx, "s", eventstore.Snapshot{State: st, StreamSeq: 900}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSnapshot(ctx, "s", 128)
	if err != nil || got.StreamSeq != 900 || got.State.Hash != "h" {
		t.Fatalf("snapshot: %+v %v", got, err)
	}
	if _, err := s.GetSnapshot(ctx, "s", 256); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("missing snapshot: %v", err)
	}
	for _, r := range []eventstore.Record{{ID: "p", Status: "active"}, {ID: "c", Status: "closed", Parent: "p", ForkSeq: 3}} {
		if err := s.PutRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.Records(ctx)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records: %+v %v", recs, err)
	}
	kids, err := s.Children(ctx, "p")
	if err != nil || len(kids) != 1 || kids[0] != "c" {
		t.Fatalf("children: %v %v", kids, err)
	}
	for i := 0; i < 2; i++ { // the same key twice: recorded once
		if err := s.Reject(ctx, eventstore.Rejection{Session: "p", Code: "schema", Message: "bad", Via: "inbox"}, "inbox-7"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reject(ctx, eventstore.Rejection{Code: "malformed", Message: "not JSON", Via: "request"}, ""); err != nil {
		t.Fatal(err)
	}
	var all []eventstore.Rejection
	if err := s.Rejections(ctx, "", "", 0, func(_ uint64, r eventstore.Rejection) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Session != "p" || all[1].Code != "malformed" {
		t.Fatalf("rejections: %+v", all)
	}
}

func TestBlobsAreContentAddressed(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	data := []byte(strings.Repeat("evidence ", 200000)) // larger than one chunk
	ref, err := s.PutBlob(ctx, data)
	if err != nil || ref != eventstore.BlobRef(data) {
		t.Fatalf("put: %s %v", ref, err)
	}
	again, err := s.PutBlob(ctx, data)
	if err != nil || again != ref {
		t.Fatalf("put again: %s %v", again, err)
	}
	got, err := s.GetBlob(ctx, ref)
	if err != nil || string(got) != string(data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if _, err := s.GetBlob(ctx, eventstore.BlobRef([]byte("nothing"))); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("missing blob: %v", err)
	}
}

// testKey signs the events the tests seal, as a ledger would.
var testKey = func() *events.SigningKey {
	k, err := events.GenerateSigningKey()
	if err != nil {
		panic(err)
	}
	return k
}()

// TestScanReadsLargeEventsInByteBoundedBatches: events of 200 KB come in
// batches the server ends at a byte bound, not a count, and the scan asks
// again until all are read, in order, once each.
func TestScanReadsLargeEventsInByteBoundedBatches(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	const n = 24 // 4.8 MB: several byte-bounded batches
	big := strings.Repeat("x", 200<<10)
	prev, last := "", uint64(0)
	for i := uint64(1); i <= n; i++ {
		ev, err := events.New("big", &events.ChunkAppended{Role: events.RoleUser, Content: big})
		if err != nil {
			t.Fatal(err)
		}
		body, hash, err := events.Seal(&ev, i, prev, testKey)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Append(ctx, events.DefaultTenant, "big", events.TokenConversation, body, ev.ID(), i, hash, last)
		if err != nil {
			t.Fatal(err)
		}
		prev, last = hash, a.StreamSeq
	}
	var seqs []uint64
	if err := s.ScanParsed(ctx, "big", 0, 0, func(ev events.Stored, _ eventstore.Msg) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != n {
		t.Fatalf("scan read %d events, want %d: %v", len(seqs), n, seqs)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("event %d has sequence %d: %v", i, seq, seqs)
		}
	}
}
