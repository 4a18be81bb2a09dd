package selector

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

// Each turn request the selector appends is handed off once, as the ledger
// stored it: every attribute the log holds but the previous hash, its stream
// sequence, and its data the same value. A redelivered trigger, whose
// request the ledger answers as a duplicate, hands nothing again.
func TestTurnRequestIsHandedOffAsStored(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	type handed struct {
		ev        events.Stored
		streamSeq uint64
	}
	var got []handed
	s := New(r.sc, fold.NewCache(r.store, fold.CacheConfig{}), workflow.NewLibrary(r.store.GetBlob), nil, quiet,
		WithHandOff(func(ev events.Stored, streamSeq uint64) { got = append(got, handed{ev, streamSeq}) }))
	trigger := r.start(t, "s1")
	for range 2 {
		if err := s.Handle(ctx, trigger); err != nil {
			t.Fatal(err)
		}
	}
	requests := ofType(r.log(t, "s1"), events.TypeTurnRequested)
	if len(requests) != 1 || len(got) != 1 {
		t.Fatalf("%d requests stored, %d handed off; want 1 and 1", len(requests), len(got))
	}
	want, h := requests[0], got[0].ev
	var wantData, gotData any
	if err := json.Unmarshal(want.Data, &wantData); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(h.Data, &gotData); err != nil {
		t.Fatal(err)
	}
	wd, _ := json.Marshal(wantData)
	gd, _ := json.Marshal(gotData)
	if !bytes.Equal(wd, gd) {
		t.Fatalf("handed data %s, stored %s", h.Data, want.Data)
	}
	want.Prev, want.Raw, want.Data, h.Data = "", nil, nil, nil
	if !want.Time.Equal(h.Time) {
		t.Fatalf("handed time %v, stored %v", h.Time, want.Time)
	}
	want.Time = h.Time
	if want.ID != h.ID || want.Source != h.Source || want.Type != h.Type || want.Session != h.Session || want.Seq != h.Seq ||
		want.Hash != h.Hash || want.Sig != h.Sig || want.Causation != h.Causation || want.Correlation != h.Correlation ||
		want.Actor != h.Actor || want.Tenant != h.Tenant || want.OnBehalf != h.OnBehalf {
		t.Fatalf("handed %+v\nstored %+v", h, want)
	}
	msg, err := r.store.JetStream().Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := msg.GetMsg(ctx, got[0].streamSeq)
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := events.ParseStored(raw.Data); err != nil || stored.ID != want.ID {
		t.Fatalf("stream sequence %d holds %s (%v), not the request %s", got[0].streamSeq, stored.ID, err, want.ID)
	}
}
