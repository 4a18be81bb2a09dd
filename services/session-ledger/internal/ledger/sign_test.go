package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// forge seals ev onto the head of session id the way the ledger would, with
// key (nil: unsigned), and publishes it straight into the stream: what
// anyone who can publish to the stored subjects (an admin, a stolen
// credential) can do.
func forge(t *testing.T, r *rig, id string, data any, key *events.SigningKey) uint64 {
	t.Helper()
	ctx := context.Background()
	rep := r.verifyOK(t, id)
	ev, err := events.New(id, data)
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := events.Seal(&ev, rep.Head+1, rep.HeadHash, key)
	if err != nil {
		t.Fatal(err)
	}
	kind, _ := events.Lookup(ev.Type())
	if _, err := r.store.JetStream().Publish(ctx, events.SessionSubject(events.DefaultTenant, id, kind.Token), body); err != nil {
		t.Fatal(err)
	}
	return rep.Head + 1
}

func otherKey(t *testing.T) *events.SigningKey {
	t.Helper()
	k, err := events.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Every ack is a receipt: the ledger's signature of session, sequence and
// hash, which the ledger's public key checks.
func TestAcksAreSignedReceipts(t *testing.T) {
	r := newRig(t)
	a := r.start(t, "s")
	b := r.emit(t, "s", chunk("one"))
	ring := events.NewKeyring(testKey.Public())
	for _, ack := range []api.Ack{a, b} {
		if err := ring.Verify(ack.Session, ack.Seq, ack.Hash, ack.Sig); err != nil {
			t.Fatalf("receipt %+v: %v", ack, err)
		}
	}
	rep := r.verifyOK(t, "s")
	if rep.HeadSig != b.Sig || rep.KeyID != testKey.Public().ID || rep.Signatures != 1 {
		t.Fatalf("report %+v: want the head's signature by %s, one signature checked", rep, testKey.Public().ID)
	}
}

// An event published straight into the stream with a correct chain hash is
// named by verify, whatever it is signed with, and the ledger refuses to
// chain onto it: neither the running ledger nor a restarted one appends
// after it, so no later signature can vouch for it.
func TestForgedEventsAreReportedAndNeverChainedOnto(t *testing.T) {
	cases := []struct {
		name    string
		key     func(t *testing.T) *events.SigningKey
		because string
	}{
		{"unsigned", func(*testing.T) *events.SigningKey { return nil }, "not signed"},
		{"signed with another key", otherKey, "unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.start(t, "s")
			r.emit(t, "s", chunk("real"))
			seq := forge(t, r, "s", chunk("forged"), tc.key(t))

			rep, err := r.c.Verify(context.Background(), "s")
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.Fault == nil || rep.Fault.Seq != seq || !strings.Contains(rep.Fault.Reason, tc.because) {
				t.Fatalf("verify: %+v %+v, want a fault at %d saying %q", rep, rep.Fault, seq, tc.because)
			}
			_, err = r.c.Append(context.Background(), mustEvent(t, "s", chunk("after")))
			wantCode(t, err, api.CodeDamaged)
			if !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "at 3") {
				t.Fatalf("refusal does not name the damage: %v", err)
			}

			// A ledger that starts now finds the forgery at the head.
			r2 := serveOn(t, r.nc, "ledger-b")
			_, err = r2.l.Append(context.Background(), mustEvent(t, "s", chunk("after restart")))
			wantCode(t, err, api.CodeDamaged)
			// Its state is not presented as the session's; its log stays
			// readable, forgery included, for the investigation.
			_, err = r2.c.State(context.Background(), "s")
			wantCode(t, err, api.CodeDamaged)
			got, err := r2.c.Log(context.Background(), "s", client.Range{From: 1})
			if err != nil || len(got) != 3 || got[2].Seq != seq {
				t.Fatalf("log of the damaged session: %d events, %v", len(got), err)
			}
		})
	}
}

// An event altered in the middle of the log and every event after it
// re-hashed so the chain holds: only the signatures can tell, and verify
// names the first altered event.
func TestVerifyNamesTheFirstEventARehashedChainChanged(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	for i := 2; i <= 9; i++ {
		r.emit(t, "s", chunk("step "+string(rune('0'+i))))
	}
	attacker := otherKey(t)
	// Rebuild the log from sequence 5 on, sealing with the attacker's key
	// but claiming the ledger's key ID, so the cheap key check passes.
	rewrite(t, r, "s", func(ms []eventstore.Msg) []eventstore.Msg {
		prev := ""
		for i := range ms {
			st, err := events.ParseStored(ms[i].Body)
			if err != nil {
				t.Fatal(err)
			}
			if st.Seq < 5 {
				prev = st.Hash
				continue
			}
			ev, err := events.FromNATS(nil, ms[i].Body)
			if err != nil {
				t.Fatal(err)
			}
			if st.Seq == 5 {
				ev.SetData(event.ApplicationJSON, chunk("step X"))
			}
			body, hash, err := events.Seal(&ev, st.Seq, prev, nil)
			if err != nil {
				t.Fatal(err)
			}
			forged, err := attacker.Sign("s", st.Seq, hash)
			if err != nil {
				t.Fatal(err)
			}
			sig := testKey.Public().ID + ":" + strings.SplitN(forged, ":", 2)[1]
			body = append(body[:len(body)-1], []byte(`,"rathsig":"`+sig+`"}`)...)
			ms[i].Body, prev = body, hash
		}
		return ms
	})
	rep, err := r.c.Verify(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Fault == nil || rep.Fault.Seq != 5 || !strings.Contains(rep.Fault.Reason, "bad signature") {
		t.Fatalf("verify: %+v %+v, want a bad signature at 5", rep, rep.Fault)
	}
	if rep.Signatures > 6 {
		t.Fatalf("%d signatures checked for 9 events: bisection should need at most 1+⌈log2 9⌉+1", rep.Signatures)
	}
}

// A byte-for-byte copy of one of the session's own earlier events carries a
// valid signature; published again after the head, it must not make the
// ledger step back and sign a second event at a sequence it signed before.
func TestReplayedCopyIsNotChainedOnto(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	for _, c := range []string{"two", "three", "four"} {
		r.emit(t, "s", chunk(c))
	}
	var three eventstore.Msg
	if err := r.store.ScanSession(context.Background(), "s", 0, 0, func(m eventstore.Msg) error {
		if st, _ := events.ParseStored(m.Body); st.Seq == 3 {
			three = m
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.JetStream().Publish(context.Background(), three.Subject, three.Body); err != nil {
		t.Fatal(err)
	}
	_, err := r.l.Append(context.Background(), mustEvent(t, "s", chunk("after the copy")))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "replayed or copied in around the ledger") {
		t.Fatalf("refusal: %v", err)
	}
	if got, err := r.c.Log(context.Background(), "s", client.Range{From: 1}); err != nil || len(got) != 5 || got[4].Seq != 3 {
		t.Fatalf("the log holds the four events and the copy, nothing more: %d events, %v", len(got), err)
	}
}

// A fork below the head chains onto an event the ledger did not just read
// as a head: it is checked like one, so forged history below a valid head
// cannot be forked from.
func TestForkBelowTheHeadChecksTheForkPoint(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	for i := 2; i <= 6; i++ {
		r.emit(t, "s", chunk("step "+string(rune('0'+i))))
	}
	// Events 1..3 rewritten with a valid chain but no signature; 4..6 kept.
	rewrite(t, r, "s", func(ms []eventstore.Msg) []eventstore.Msg {
		prev := ""
		for i := range ms[:3] {
			ev, err := events.FromNATS(nil, ms[i].Body)
			if err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				ev.SetData(event.ApplicationJSON, chunk("forged step 3"))
			}
			st, _ := events.ParseStored(ms[i].Body)
			body, hash, err := events.Seal(&ev, st.Seq, prev, nil)
			if err != nil {
				t.Fatal(err)
			}
			ms[i].Body, prev = body, hash
		}
		return ms
	})
	fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
	_, err := fresh.l.Fork(context.Background(), forkAt("s", 3, "s-b"))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "its event at 3") {
		t.Fatalf("refusal: %v", err)
	}
}

// Rotation: a ledger started with a new key refuses sessions signed with the
// old one, naming the likely cause, until it trusts the old public key; then
// the old events verify and new ones are signed with the new key.
func TestKeyRotation(t *testing.T) {
	r := newRig(t)
	r.start(t, "s")
	r.emit(t, "s", chunk("signed with the old key"))
	headsRecorded(t, r)
	r.stop()
	newKey := otherKey(t)

	untrusting := serveWith(t, natstest.Connect(t, r.nc.ConnectedUrl()), "new-key", func(c *ledger.Config) { c.Key = newKey })
	_, err := untrusting.l.Append(context.Background(), mustEvent(t, "s", chunk("refused")))
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "--trust its ledger.pub") {
		t.Fatalf("refusal does not name the harmless cause: %v", err)
	}
	untrusting.stop()

	rotated := serveWith(t, natstest.Connect(t, r.nc.ConnectedUrl()), "rotated", func(c *ledger.Config) {
		c.Key, c.Trusted = newKey, []events.PublicKey{testKey.Public()}
	})
	a, err := rotated.l.Append(context.Background(), mustEvent(t, "s", chunk("signed with the new key")))
	if err != nil {
		t.Fatal(err)
	}
	if events.SigKeyID(a.Sig) != newKey.Public().ID {
		t.Fatalf("new event signed by %s, want the new key %s", events.SigKeyID(a.Sig), newKey.Public().ID)
	}
	rep, err := rotated.l.Verify(context.Background(), "s")
	if err != nil || !rep.OK || rep.KeyID != newKey.Public().ID {
		t.Fatalf("verify after rotation: %+v %v", rep, err)
	}
	keys, err := rotated.l.Keys()
	if err != nil || keys.Current != newKey.Public().ID || len(keys.Keys) != 2 {
		t.Fatalf("keys after rotation: %+v %v", keys, err)
	}
}

// The events of a batch round are signed with one signature whose leaves
// are stored once, apart (a signature record on rath.sig.<ID>): each stored
// body carries a short reference, and so does each ack, with the record
// beside it, so each ack is still a receipt on its own (Inline spells the
// inline group signature); the log serves the events with their signatures
// expanded, and verify holds. Concurrent single appends share inline group
// signatures.
func TestGroupSignedBatchesAndConcurrentAppends(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var evs []event.Event
	for i := range 20 {
		id := fmt.Sprintf("g%02d", i)
		r.start(t, id)
		evs = append(evs, mustEvent(t, id, chunk("batched")))
	}
	ring := events.NewKeyring(testKey.Public())
	groups := map[string]int{} // root signature → events under it
	for _, res := range r.l.AppendBatch(ctx, evs) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if !events.IsRecordRef(res.Ack.Sig) || len(res.Ack.Record) == 0 || res.RecordID == "" {
			t.Fatalf("ack of %s: sig %q, record of %d bytes, want a reference and its record", res.Ack.Session, res.Ack.Sig, len(res.Ack.Record))
		}
		a, err := res.Ack.Inline()
		if err != nil {
			t.Fatal(err)
		}
		if err := ring.Verify(a.Session, a.Seq, a.Hash, a.Sig); err != nil {
			t.Fatalf("receipt of %s: %v", a.Session, err)
		}
		parts := strings.Split(a.Sig, ":")
		if len(parts) != 6 || parts[3] != "20" {
			t.Fatalf("a batch of 20 sessions signed %s in a group of %q, want one of 20: %q", a.Session, parts[3], a.Sig)
		}
		groups[parts[1]]++

		m, err := r.store.Last(ctx, a.Session)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := events.ParseStored(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		ref, ok, err := events.ParseRecordRef(stored.Sig)
		if !ok || err != nil {
			t.Fatalf("stored rathsig of %s is not a record reference: %q (%v)", a.Session, stored.Sig, err)
		}
		if len(stored.Sig) > 64 {
			t.Fatalf("stored reference is %d bytes: %q", len(stored.Sig), stored.Sig)
		}
		if err := ring.Verify(a.Session, a.Seq, a.Hash, stored.Sig); !errors.Is(err, events.ErrDetached) {
			t.Fatalf("a reference verified without its record: %v", err)
		}
		rec, err := r.store.SigRecord(ctx, ref.Record)
		if err != nil {
			t.Fatalf("record %s of %s: %v", ref.Record, a.Session, err)
		}
		full, err := events.Expand(ref, rec)
		if err != nil || full != a.Sig {
			t.Fatalf("record expands to %q (%v), the receipt is %q", full, err, a.Sig)
		}
		served, err := r.c.Log(ctx, a.Session, client.Range{From: a.Seq})
		if err != nil || len(served) != 1 || served[0].Sig != a.Sig {
			t.Fatalf("the log serves %s's event %d with rathsig %q (%v), want the receipt's", a.Session, a.Seq, sigOf(served), err)
		}
		if h, err := events.ComputeHash(served[0].Raw); err != nil || h != a.Hash {
			t.Fatalf("the served body hashes to %s (%v), want %s", h, err, a.Hash)
		}
	}
	if len(groups) != 1 {
		t.Fatalf("20 events in %d groups, want 1: %v", len(groups), groups)
	}

	var wg sync.WaitGroup
	acks := make(chan api.Ack, 20)
	for i := range 20 {
		wg.Go(func() {
			a, err := r.l.Append(ctx, mustEvent(t, fmt.Sprintf("g%02d", i), chunk("concurrent")))
			if err != nil {
				t.Error(err)
				return
			}
			acks <- a
		})
	}
	wg.Wait()
	close(acks)
	for a := range acks {
		if err := ring.Verify(a.Session, a.Seq, a.Hash, a.Sig); err != nil {
			t.Fatalf("receipt of %s: %v", a.Session, err)
		}
	}
	for i := range 20 {
		if rep := r.verifyOK(t, fmt.Sprintf("g%02d", i)); rep.Head != 3 {
			t.Fatalf("head %d", rep.Head)
		}
	}
}

// The bench's unsigned baseline is no way around signing: verify, by any
// ledger, reports the first event it stored.
func TestUnsignedLedgerEventsFailVerify(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveWith(t, nc, "baseline", func(c *ledger.Config) { c.Unsigned, c.Key = true, nil })
	r.start(t, "u")
	r.emit(t, "u", chunk("unsigned"))
	signed := serveOn(t, natstest.Connect(t, nc.ConnectedUrl()), "signed")
	for _, c := range []*rig{r, signed} {
		rep, err := c.c.Verify(context.Background(), "u")
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK || rep.Fault == nil || rep.Fault.Seq != 1 {
			t.Fatalf("verify of an unsigned session: %+v %+v, want a fault at 1", rep, rep.Fault)
		}
		t.Logf("fault: %s", rep.Fault.Reason)
	}
}

func sigOf(evs []events.Stored) string {
	if len(evs) == 0 {
		return ""
	}
	return evs[0].Sig
}

// A signature record removed from RATH_SIGS (an administrator's purge) or
// replaced leaves the events that refer to it unverifiable: verify reports
// the head, a ledger loading the session refuses to append to it, and the
// log refuses to serve the event rather than serve it unsigned.
func TestMissingSignatureRecordIsReported(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var evs []event.Event
	for i := range events.MinRecord {
		id := fmt.Sprintf("m%d", i)
		r.start(t, id)
		evs = append(evs, mustEvent(t, id, chunk("batched")))
	}
	for _, res := range r.l.AppendBatch(ctx, evs) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	r.verifyOK(t, "m0")
	sigs, err := r.store.JetStream().Stream(ctx, events.StreamSigs)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigs.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	wantFault(t, r, "m0", 2, "is not in "+events.StreamSigs)

	fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
	_, err = fresh.l.Append(ctx, mustEvent(t, "m1", chunk("after the purge"))) // loads m1: its head is unverifiable
	wantCode(t, err, api.CodeDamaged)
	if !strings.Contains(err.Error(), "is not in "+events.StreamSigs) {
		t.Fatalf("refusal does not name the missing record: %v", err)
	}
	if _, _, err := fresh.l.Log(ctx, "m2", 0, 0, 0); err == nil { // this ledger, which never read the record
		t.Fatal("the log served an event whose signature record is gone")
	}
}
