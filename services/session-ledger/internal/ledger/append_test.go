package ledger_test

import (
	"context"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

func TestAppendAssignsSequenceAndChain(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a1 := r.start(t, "s1")
	if a1.Seq != 1 || a1.Session != "s1" || a1.Hash == "" {
		t.Fatalf("start ack: %+v", a1)
	}
	var last = a1
	for i := 0; i < 10; i++ {
		last = r.emit(t, "s1", chunk("step"))
	}
	r.emit(t, "s1", usage(100, 20))
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Seq != 12 || len(st.Chunks) != 10 || st.Usage.Total.In != 100 || st.Usage.ByAgent["coder"].Out != 20 {
		t.Fatalf("state: seq %d chunks %d usage %+v", st.Seq, len(st.Chunks), st.Usage)
	}
	mid, err := r.c.StateAt(ctx, "s1", 11)
	if err != nil {
		t.Fatal(err)
	}
	if mid.Seq != 11 || mid.Hash != last.Hash || mid.Usage.Total.In != 0 {
		t.Fatalf("state at 11: seq %d hash %s usage %+v", mid.Seq, mid.Hash, mid.Usage)
	}
	log, err := r.c.Log(ctx, "s1", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 12 {
		t.Fatalf("log has %d events", len(log))
	}
	for i, ev := range log {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("log[%d].Seq = %d", i, ev.Seq)
		}
		if i > 0 && ev.Prev != log[i-1].Hash {
			t.Fatalf("log[%d] does not chain", i)
		}
	}
	r.verifyOK(t, "s1")
}

func TestStartWithoutIDGetsOne(t *testing.T) {
	r := newRig(t)
	a := r.start(t, "")
	if err := events.ValidateSessionID(a.Session); err != nil || a.Seq != 1 {
		t.Fatalf("ack %+v: %v", a, err)
	}
}

func TestReproposedEventIDReturnsOriginalAck(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "s1")
	ev, err := events.New("s1", chunk("once"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.c.Append(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	r.emit(t, "s1", chunk("later"))
	again, err := r.c.Append(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Seq != first.Seq || again.Hash != first.Hash {
		t.Fatalf("re-proposal: first %+v, again %+v", first, again)
	}
	st, _ := r.c.State(ctx, "s1")
	if st.Seq != 3 {
		t.Fatalf("head %d, want 3: the re-proposal was stored again", st.Seq)
	}
	// A re-proposed session start is a duplicate too, not "already exists".
	start, _ := events.New("s2", &events.SessionStarted{Task: "x"})
	a1, err := r.c.Append(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := r.c.Append(ctx, start)
	if err != nil || !a2.Duplicate || a2.Hash != a1.Hash {
		t.Fatalf("re-proposed start: %+v %v", a2, err)
	}
}
