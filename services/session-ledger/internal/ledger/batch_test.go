package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// A batch spanning sessions, several events each and interleaved, is stored
// in the batch's order per session, with gap-free sequences and chains that
// verify; the acks name what was stored.
func TestBatchAppendsInOrderPerSession(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const sessions, per = 5, 3*testK + 1 // crosses snapshots
	var evs []event.Event
	for i := range per {
		for s := range sessions {
			id := fmt.Sprintf("batch-%d", s)
			if i == 0 {
				ev, err := events.New(id, &events.SessionStarted{Task: "batch"})
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
				continue
			}
			evs = append(evs, mustEvent(t, id, chunk(fmt.Sprintf("%s #%d", id, i))))
		}
	}
	res, err := r.c.AppendBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]uint64{}
	for i, x := range res {
		if x.Err != nil {
			t.Fatalf("event %d: %v", i, x.Err)
		}
		id := evs[i].Subject()
		next[id]++
		if x.Ack.Session != id || x.Ack.Seq != next[id] || x.Ack.ID != evs[i].ID() {
			t.Fatalf("event %d (%s of %s): ack %+v, want seq %d", i, evs[i].ID(), id, x.Ack, next[id])
		}
	}
	for s := range sessions {
		id := fmt.Sprintf("batch-%d", s)
		log, err := r.c.Log(ctx, id, client.Range{From: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != per {
			t.Fatalf("%s holds %d events, want %d", id, len(log), per)
		}
		for i, ev := range log[1:] {
			if want := fmt.Sprintf("%s #%d", id, i+1); !containsContent(ev.Data, want) {
				t.Fatalf("%s seq %d holds %s, want %q", id, ev.Seq, ev.Data, want)
			}
		}
		r.verifyOK(t, id)
		// The ledger's cached head equals a fold of the stored log.
		fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
		want, _ := fresh.l.State(ctx, id, 0)
		got, _ := r.l.State(ctx, id, 0)
		sameState(t, id, got, want)
	}

	// The same batch again is stored once: every ack is the original's.
	again, err := r.c.AppendBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range again {
		if x.Err != nil || !x.Ack.Duplicate || x.Ack.Seq != res[i].Ack.Seq || x.Ack.Hash != res[i].Ack.Hash {
			t.Fatalf("retried event %d: %+v %v, want the original ack %+v", i, x.Ack, x.Err, res[i].Ack)
		}
	}
}

func containsContent(data []byte, s string) bool {
	var c events.ChunkAppended
	return jsonUnmarshal(data, &c) == nil && c.Content == s
}

// Each bad proposal of a batch gets its own error and rejection record; the
// good ones around it are stored, and nothing accepted before is lost.
func TestBatchRefusesBadProposalsOneByOne(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "good")
	r.start(t, "shut")
	r.emit(t, "shut", &events.SessionClosed{Reason: "done"})
	before, _ := r.c.State(ctx, "good")

	unknown := mustEvent(t, "good", chunk("x"))
	unknown.SetType("rath.no.such.kind")
	badData := mustEvent(t, "good", chunk("x"))
	if err := badData.SetData(event.ApplicationJSON, map[string]any{"role": "narrator", "content": 3}); err != nil {
		t.Fatal(err)
	}
	stale := mustEvent(t, "good", chunk("stale"))
	stale.SetExtension(events.ExtExpectedSeq, int32(before.Seq+7))
	forked := mustEvent(t, "good", &events.SessionForked{Parent: "x", AtSeq: 1, ParentHash: "h"})
	forked.SetType(events.TypeSessionForked)
	ok1, ok2 := mustEvent(t, "good", chunk("kept 1")), mustEvent(t, "good", chunk("kept 2"))
	evs := []event.Event{
		ok1, unknown, badData, mustEvent(t, "missing", chunk("x")), mustEvent(t, "shut", chunk("x")), stale, forked, ok2,
	}
	want := []api.Code{"", api.CodeUnknownType, api.CodeSchema, api.CodeNotFound, api.CodeClosed, api.CodeStale, api.CodeUseOperation, ""}
	res, err := r.c.AppendBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range res {
		if want[i] == "" {
			if x.Err != nil {
				t.Fatalf("proposal %d: %v", i, x.Err)
			}
			continue
		}
		wantCode(t, x.Err, want[i])
	}
	after, _ := r.c.State(ctx, "good")
	if after.Seq != before.Seq+2 || res[7].Ack.Seq != before.Seq+2 {
		t.Fatalf("good: head %d, last ack %d; want %d", after.Seq, res[7].Ack.Seq, before.Seq+2)
	}
	r.verifyOK(t, "good")
	r.verifyOK(t, "shut")
	recorded := map[string]string{}
	for _, id := range []string{"good", "missing", "shut"} {
		for _, rj := range r.rejections(t, id) {
			recorded[rj.EventID] = rj.Code
			if rj.Via != "batch" || len(rj.Proposal) == 0 {
				t.Fatalf("rejection of %s: via %q, proposal %q", rj.EventID, rj.Via, rj.Proposal)
			}
		}
	}
	for i, ev := range evs {
		if want[i] != "" && recorded[ev.ID()] != string(want[i]) {
			t.Fatalf("proposal %d (%s): recorded %q, want %q", i, ev.ID(), recorded[ev.ID()], want[i])
		}
	}
}

// A body that is not a batch is refused as a whole, with a record; a
// malformed member is refused alone.
func TestMalformedBatch(t *testing.T) {
	r := newRig(t)
	r.start(t, "m")
	for _, body := range []string{`{"not":"an array"}`, `[{"specversion":"1.0"`} {
		msg := nats.NewMsg(events.DefaultClient.Ledger(events.OpBatch))
		msg.Data = []byte(body)
		reply, err := r.nc.Request(msg.Subject, msg.Data, testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(api.HeaderError); code != string(api.CodeMalformed) {
			t.Fatalf("%s: error header %q, body %s", body, code, reply.Data)
		}
	}
	good := mustEvent(t, "m", chunk("fine"))
	raw, _ := good.MarshalJSON()
	reply, err := r.nc.Request(events.DefaultClient.Ledger(events.OpBatch), []byte(`[{"specversion":"1.0","id":"x"},`+string(raw)+`]`), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var br api.BatchReply
	if err := jsonUnmarshal(reply.Data, &br); err != nil || len(br.Results) != 2 {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	if br.Results[0].Error == nil || br.Results[0].Error.Code != api.CodeMalformed || br.Results[1].Ack == nil || br.Results[1].Ack.Seq != 2 {
		t.Fatalf("results: %s", reply.Data)
	}
	// More than api.MaxBatch proposals: refused as a whole, and recorded.
	tooMany := "[" + strings.Repeat(string(raw)+",", api.MaxBatch) + string(raw) + "]"
	reply, err = r.nc.Request(events.DefaultClient.Ledger(events.OpBatch), []byte(tooMany), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(api.HeaderError); code != string(api.CodeTooLarge) {
		t.Fatalf("%d proposals: error header %q, body %.200s", api.MaxBatch+1, code, reply.Data)
	}
	if n := len(r.rejections(t, "unknown")); n != 4 {
		t.Fatalf("%d rejections recorded without a session, want 4 (three bodies, one member)", n)
	}
	if st, _ := r.c.State(context.Background(), "m"); st.Seq != 2 {
		t.Fatalf("head of m %d after the refused batch, want 2", st.Seq)
	}
	if _, err := r.c.AppendBatch(context.Background(), make([]event.Event, api.MaxBatch+1)); !errors.Is(err, api.ErrTooLarge) {
		t.Fatalf("client.AppendBatch of %d: %v, want too_large", api.MaxBatch+1, err)
	}
}

// Two ledgers taking batches for the same sessions at once: every event is
// stored once, sequences are gap-free, chains verify.
func TestTwoLedgersRaceBatches(t *testing.T) {
	_, nc1 := natstest.Start(t)
	a := serveOn(t, nc1, "a")
	b := serveOn(t, natstest.Connect(t, nc1.ConnectedUrl()), "b")
	ctx := context.Background()
	const sessions, batches, per = 6, 8, 3
	for s := range sessions {
		a.start(t, fmt.Sprintf("rb-%d", s))
	}
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	for k := range batches {
		wg.Add(1)
		go func(l *rig) {
			defer wg.Done()
			var evs []event.Event
			for i := range per {
				for s := range sessions {
					ev, err := events.New(fmt.Sprintf("rb-%d", s), chunk(fmt.Sprintf("b%d-%d", k, i)))
					if err != nil {
						errs <- err
						return
					}
					evs = append(evs, ev)
				}
			}
			// Directly on each ledger, so both certainly serve each session.
			for i, x := range l.l.AppendBatch(ctx, evs) {
				if x.Err != nil {
					errs <- fmt.Errorf("batch %d event %d: %w", k, i, x.Err)
					return
				}
			}
		}([]*rig{a, b}[k%2])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for s := range sessions {
		id := fmt.Sprintf("rb-%d", s)
		log, err := a.c.Log(ctx, id, client.Range{From: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 1+batches*per {
			t.Fatalf("%s holds %d events, want %d", id, len(log), 1+batches*per)
		}
		a.verifyOK(t, id)
	}
}

// testTimeout bounds a raw request in these tests; the ledger answers in
// milliseconds, this only keeps a broken ledger from hanging the test.
const testTimeout = 30 * time.Second

// A log page carries each event as stored: characters encoding/json would
// escape (<, >, &, U+2028) reach the client unchanged, so the chain hash of
// the bytes it gets is the stored one.
func TestLogCarriesStoredBytes(t *testing.T) {
	r := newRig(t)
	r.start(t, "html")
	ack := r.emit(t, "html", chunk("a <b>bold</b> & \u2028 line"))
	raws, err := r.c.LogRaw(context.Background(), "html", client.Range{From: ack.Seq, To: ack.Seq})
	if err != nil || len(raws) != 1 {
		t.Fatalf("log: %d events, %v", len(raws), err)
	}
	if !strings.Contains(string(raws[0]), "<b>bold</b> & \u2028") {
		t.Fatalf("the page rewrote the stored body: %s", raws[0])
	}
	if h, err := events.ComputeHash(raws[0]); err != nil || h != ack.Hash {
		t.Fatalf("hash of the page's bytes %s (%v), want the stored %s", h, err, ack.Hash)
	}
}

// Through the bus the Go client asks for compact receipts
// (api.HeaderReceipts): an ack of an event signed in a signature record
// carries the reference its stored body carries, and the reply carries the
// record once. Each ack is still a receipt on its own, also kept as JSON:
// Inline expands it to a signature the ledger's key verifies. An altered
// or missing record is refused. A request without the header gets inline
// signatures and no records, as before.
func TestCompactBatchReceipts(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	ring := events.NewKeyring(testKey.Public())
	batch := func(tag string) []event.Event {
		var evs []event.Event
		for i := range 2 * events.MinRecord {
			id := fmt.Sprintf("%s%d", tag, i)
			r.start(t, id)
			evs = append(evs, mustEvent(t, id, chunk(tag)))
		}
		return evs
	}
	batchEvs := batch("c")
	res, err := r.c.AppendBatch(ctx, batchEvs)
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]bool{}
	for _, x := range res {
		if x.Err != nil {
			t.Fatal(x.Err)
		}
		a := x.Ack
		ref, isRef, err := events.ParseRecordRef(a.Sig)
		if !isRef || err != nil || len(a.Record) == 0 {
			t.Fatalf("ack of %s: sig %q (%v), record of %d bytes; want a reference and its record", a.Session, a.Sig, err, len(a.Record))
		}
		records[ref.Record] = true
		if err := ring.Verify(a.Session, a.Seq, a.Hash, a.Sig); !errors.Is(err, events.ErrDetached) {
			t.Fatalf("a reference verified without its record: %v", err)
		}
		raw, err := json.Marshal(a) // as a client keeps a receipt
		if err != nil {
			t.Fatal(err)
		}
		var kept api.Ack
		if err := json.Unmarshal(raw, &kept); err != nil {
			t.Fatal(err)
		}
		in, err := kept.Inline()
		if err != nil {
			t.Fatalf("receipt of %s: %v", a.Session, err)
		}
		if err := ring.Verify(in.Session, in.Seq, in.Hash, in.Sig); err != nil || in.Record != nil {
			t.Fatalf("expanded receipt of %s: %v (record kept: %t)", a.Session, err, in.Record != nil)
		}
		m, err := r.store.Last(ctx, a.Session)
		if err != nil {
			t.Fatal(err)
		}
		if stored, err := events.ParseStored(m.Body); err != nil || stored.Sig != a.Sig {
			t.Fatalf("stored rathsig of %s %q, the ack's %q (%v)", a.Session, stored.Sig, a.Sig, err)
		}
	}
	if len(records) != 1 {
		t.Fatalf("%d records for a round of %d events, want 1", len(records), len(res))
	}
	// Proposed again alone, an event answers with its receipt inline; the
	// signed head recorded from the batch is inline too.
	dup, err := r.c.Append(ctx, batchEvs[1])
	if err != nil || !dup.Duplicate || dup.Seq != res[1].Ack.Seq {
		t.Fatalf("the event proposed again: %+v, %v", dup, err)
	}
	if err := ring.Verify(dup.Session, dup.Seq, dup.Hash, dup.Sig); err != nil || dup.Record != nil {
		t.Fatalf("the duplicate's receipt: %v", err)
	}
	if err := r.l.FlushHeads(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := r.store.GetHead(ctx, res[2].Ack.Session)
	if err != nil || h.Seq != res[2].Ack.Seq {
		t.Fatalf("head of %s: %+v, %v", res[2].Ack.Session, h, err)
	}
	if err := ring.Verify(h.Session, h.Seq, h.Hash, h.Sig); err != nil {
		t.Fatalf("the head recorded from a batch: %v", err)
	}

	a := res[0].Ack
	var rec events.SigRecord
	if err := json.Unmarshal(a.Record, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Leaves[0], rec.Leaves[1] = rec.Leaves[1], rec.Leaves[0]
	swapped := a
	swapped.Record, _ = json.Marshal(rec)
	if _, err := swapped.Inline(); !errors.Is(err, events.ErrBadSignature) {
		t.Fatalf("a record with its leaves swapped: %v, want a bad signature", err)
	}
	bare := a
	bare.Record = nil
	if _, err := bare.Inline(); !errors.Is(err, events.ErrDetached) {
		t.Fatalf("a reference without its record: %v, want detached", err)
	}

	// Without the header: inline signatures, no records.
	body := []byte{'['}
	for i, ev := range batch("i") {
		raw, _ := ev.MarshalJSON()
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, raw...)
	}
	reply, err := r.nc.Request(events.DefaultClient.Ledger(events.OpBatch), append(body, ']'), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var br api.BatchReply
	if err := json.Unmarshal(reply.Data, &br); err != nil {
		t.Fatal(err)
	}
	if br.Records != nil {
		t.Fatalf("records in a reply that did not ask for them: %d", len(br.Records))
	}
	for _, x := range br.Results {
		if x.Ack == nil || events.IsRecordRef(x.Ack.Sig) {
			t.Fatalf("result %+v: want an ack with an inline signature", x)
		}
		if err := ring.Verify(x.Ack.Session, x.Ack.Seq, x.Ack.Hash, x.Ack.Sig); err != nil {
			t.Fatal(err)
		}
	}
}
