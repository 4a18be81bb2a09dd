package ledger_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// foldLog folds a session's logical log as read from the ledger, the way a
// client replaying the stitched logs would (sessions without merges).
func foldLog(t *testing.T, r *rig, id string) *session.State {
	t.Helper()
	log, err := r.c.Log(context.Background(), id, client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	st := &session.State{}
	for _, ev := range log {
		session.Apply(st, ev)
	}
	return st
}

func sameState(t *testing.T, what string, got, want *session.State) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gm, wm map[string]any
	_ = json.Unmarshal(g, &gm)
	_ = json.Unmarshal(w, &wm)
	if !reflect.DeepEqual(gm, wm) {
		t.Fatalf("%s:\n got  %s\n want %s", what, g, w)
	}
}

func TestForkOfForkAndMerge(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "s")              // 1
	r.emit(t, "s", chunk("a"))   // 2
	r.emit(t, "s", usage(10, 1)) // 3
	r.emit(t, "s", chunk("b"))   // 4
	r.emit(t, "s", usage(20, 2)) // 5
	r.emit(t, "s", chunk("c"))   // 6

	f1, err := r.c.Fork(ctx, api.ForkRequest{Parent: "s", At: 5, ID: "f1", Reason: "try another strategy"})
	if err != nil {
		t.Fatal(err)
	}
	if f1.Seq != 6 {
		t.Fatalf("fork ack %+v", f1)
	}
	r.emit(t, "f1", chunk("f1-a")) // 7
	r.emit(t, "f1", usage(5, 5))   // 8
	r.emit(t, "f1", chunk("f1-b")) // 9
	r.emit(t, "f1", chunk("f1-c")) // 10
	f2, err := r.c.Fork(ctx, api.ForkRequest{Parent: "f1", At: 8, ID: "f2"})
	if err != nil || f2.Seq != 9 {
		t.Fatalf("fork of fork: %+v %v", f2, err)
	}
	r.emit(t, "f2", usage(7, 7))   // 10
	r.emit(t, "f2", chunk("f2-a")) // 11

	// The fork's state is the fold of the stitched logs s[1..5] f1[6..8] f2[9..11].
	for _, id := range []string{"f1", "f2"} {
		st, err := r.c.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, id+" state vs fold of its stitched log", st, foldLog(t, r, id))
	}
	st2, _ := r.c.State(ctx, "f2")
	if st2.Usage.Total.In != 10+20+5+7 || len(st2.Chunks) != 4 || st2.Lineage.Parent != "f1" || st2.Lineage.ForkSeq != 8 {
		t.Fatalf("f2: usage %+v chunks %d lineage %+v", st2.Usage.Total, len(st2.Chunks), st2.Lineage)
	}
	// State of a fork at a sequence inside its own range, across a snapshot.
	at10, err := r.c.StateAt(ctx, "f2", 10)
	if err != nil || at10.Seq != 10 || at10.Usage.Total.In != 42 || at10.ID != "f2" {
		t.Fatalf("f2 at 10: %+v %v", at10, err)
	}
	// The parent is untouched by its forks.
	s, _ := r.c.State(ctx, "s")
	if s.Seq != 6 || s.Usage.Total.In != 30 {
		t.Fatalf("parent changed: seq %d usage %+v", s.Seq, s.Usage.Total)
	}
	for _, id := range []string{"s", "f1", "f2"} {
		r.verifyOK(t, id)
	}

	// Merge f2 into s: takes f1[6..8] and f2[9..11] once; s[1..5] is shared.
	m, err := r.c.Merge(ctx, api.MergeRequest{Target: "s", Source: "f2", Reason: "keep the better branch"})
	if err != nil {
		t.Fatal(err)
	}
	log, _ := r.c.Log(ctx, "s", client.Range{From: m.Seq, To: m.Seq})
	d, _ := log[0].Decode()
	md := d.(*events.SessionMerged)
	wantSegs := []events.Segment{{Session: "f1", From: 6, To: 8}, {Session: "f2", From: 9, To: 11}}
	if !reflect.DeepEqual(md.Segments, wantSegs) || md.Ancestor == nil || md.Ancestor.Session != "s" || md.Ancestor.Seq != 5 || md.SourceHead.Seq != 11 {
		t.Fatalf("merge record: %+v ancestor %+v", md.Segments, md.Ancestor)
	}
	s, _ = r.c.State(ctx, "s")
	if s.Usage.Total.In != 10+20+5+7 || s.Usage.ByAgent["coder"].Calls != 4 {
		t.Fatalf("merged usage %+v: shared prefix counted twice or merge missing", s.Usage)
	}
	if len(s.Chunks) != 3+2 || s.Chunks[3].Origin != "f1" || s.Chunks[4].Origin != "f2" {
		t.Fatalf("merged chunks: %+v", s.Chunks)
	}
	if len(s.Lineage.Merges) != 1 || s.Lineage.Merges[0].Events != 6 || s.Status != session.StatusActive {
		t.Fatalf("merge lineage %+v status %s", s.Lineage.Merges, s.Status)
	}
	// Re-read from the stream (not the cache): same state.
	s7, err := r.c.StateAt(ctx, "s", m.Seq-1)
	if err != nil || s7.Usage.Total.In != 30 {
		t.Fatalf("state before merge: %+v %v", s7, err)
	}
	// Nothing new: refused. Something new: only that comes in.
	_, err = r.c.Merge(ctx, api.MergeRequest{Target: "s", Source: "f2"})
	wantCode(t, err, api.CodeNothingToMerge)
	r.emit(t, "f2", usage(1, 1)) // 12
	m2, err := r.c.Merge(ctx, api.MergeRequest{Target: "s", Source: "f2"})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = r.c.State(ctx, "s")
	if s.Usage.Total.In != 43 || s.Seq != m2.Seq {
		t.Fatalf("second merge usage %+v", s.Usage.Total)
	}
	// Merging an ancestor's later events into a fork takes only those.
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "f2", Source: "f1"}); err != nil {
		t.Fatal(err)
	}
	f2s, _ := r.c.State(ctx, "f2")
	if f2s.Usage.Total.In != 43 || len(f2s.Chunks) != 4+2 {
		t.Fatalf("f2 after merging f1: usage %+v chunks %d", f2s.Usage.Total, len(f2s.Chunks))
	}
	for _, id := range []string{"s", "f1", "f2"} {
		r.verifyOK(t, id)
	}

	g, err := r.c.Lineage(ctx, "f2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Ancestors, []string{"s", "f1"}) || g.Root.Session != "s" ||
		len(g.Root.Children) != 1 || g.Root.Children[0].Session != "f1" || g.Root.Children[0].Children[0].Session != "f2" ||
		len(g.Root.Merges) != 2 {
		b, _ := json.Marshal(g)
		t.Fatalf("lineage: %s", b)
	}
	// Each node carries the time of its first own event, by which the
	// dossier numbers forks, and a closed session's outcome.
	n1 := g.Root.Children[0]
	if f1s, _ := r.c.State(ctx, "f1"); n1.Created.IsZero() || !n1.Created.Equal(f1s.Created) || n1.Created.Before(g.Root.Created) {
		t.Errorf("f1 created %v (root %v), want its fork event's time", n1.Created, g.Root.Created)
	}
	r.emit(t, "f2", &events.SessionClosed{Outcome: "superseded"})
	if g, err := r.c.Lineage(ctx, "s"); err != nil || g.Root.Children[0].Children[0].Outcome != "superseded" || g.Root.Outcome != "" {
		t.Errorf("lineage after f2 closed: %+v %v", g.Root, err)
	}
}

func TestForkErrors(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "p")
	r.emit(t, "p", chunk("x"))
	_, err := r.c.Fork(ctx, api.ForkRequest{Parent: "p", At: 9})
	wantCode(t, err, api.CodeOutOfRange)
	_, err = r.c.Fork(ctx, api.ForkRequest{Parent: "nope"})
	wantCode(t, err, api.CodeNotFound)
	_, err = r.c.Fork(ctx, api.ForkRequest{Parent: "p", ID: "p"})
	wantCode(t, err, api.CodeExists)
	// Forking a closed session is how work continues after it.
	r.emit(t, "p", &events.SessionClosed{Reason: "rejected"})
	a, err := r.c.Fork(ctx, api.ForkRequest{Parent: "p", At: 2, ID: "retry"})
	if err != nil || a.Seq != 3 {
		t.Fatalf("fork of closed: %+v %v", a, err)
	}
	st, _ := r.c.State(ctx, "retry")
	if st.Status != session.StatusActive {
		t.Fatalf("fork status %s", st.Status)
	}
	// A retried fork with the same event ID forks once.
	req := api.ForkRequest{Parent: "p", At: 1, ID: "once", EventID: events.NewID()}
	a1, err1 := r.c.Fork(ctx, req)
	a2, err2 := r.c.Fork(ctx, req)
	if err1 != nil || err2 != nil || !a2.Duplicate || a1.Hash != a2.Hash {
		t.Fatalf("retried fork: %+v %v / %+v %v", a1, err1, a2, err2)
	}
}

// Merges in both directions and through a third session take every event's
// content exactly once.
func TestMergesNeverApplyAnEventTwice(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	total := func(id string) int64 {
		st, err := r.c.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Usage.Total.In
	}
	r.start(t, "a")
	r.emit(t, "a", usage(1, 0))
	r.start(t, "b") // unrelated root
	r.emit(t, "b", usage(10, 0))
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "b", Source: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := total("b"); got != 11 {
		t.Fatalf("b after a: %d", got)
	}
	r.emit(t, "b", usage(100, 0))
	// b now holds a's events; merging b back into a must not bring them again.
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "a", Source: "b"}); err != nil {
		t.Fatal(err)
	}
	if got := total("a"); got != 111 {
		t.Fatalf("a after b (which holds a): %d, want 111", got)
	}
	// c is a fork of a; p takes c in through b, then c directly: once.
	if _, err := r.c.Fork(ctx, forkAt("a", 2, "c")); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "c", usage(1000, 0))
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "b", Source: "c"}); err != nil {
		t.Fatal(err)
	}
	if got := total("b"); got != 1111 {
		t.Fatalf("b after c: %d, want 1111", got)
	}
	r.start(t, "p")
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "p", Source: "b"}); err != nil {
		t.Fatal(err)
	}
	_, err := r.c.Merge(ctx, api.MergeRequest{Target: "p", Source: "c"})
	wantCode(t, err, api.CodeNothingToMerge)
	// a's only event p lacks is a's merge of b, whose content p holds: the
	// merge records it and adds nothing.
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "p", Source: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := total("p"); got != 1111 {
		t.Fatalf("p: %d, want 1111", got)
	}
	for _, id := range []string{"a", "b", "c", "p"} {
		r.verifyOK(t, id)
	}
	// The states rebuilt from the stream agree with the cached ones.
	fresh := serveOn(t, natstest.Connect(t, r.nc.ConnectedUrl()), "fresh")
	for _, id := range []string{"a", "b", "p"} {
		want, _ := r.l.State(ctx, id, 0)
		got, err := fresh.l.State(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, id+" rebuilt", got, want)
	}
}

func TestForkAndMergeRefuseAnotherSessionsEventID(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "x")
	a := r.emit(t, "x", chunk("one"))
	_, err := r.c.Fork(ctx, api.ForkRequest{Parent: "x", ID: "y", EventID: a.ID})
	wantCode(t, err, api.CodeDuplicateID)
	if _, err := r.c.Fork(ctx, forkAt("x", 1, "z")); err != nil {
		t.Fatal(err)
	}
	b := r.emit(t, "z", chunk("two"))
	_, err = r.c.Merge(ctx, api.MergeRequest{Target: "x", Source: "z", EventID: b.ID})
	wantCode(t, err, api.CodeDuplicateID)
}

// A fork onto another workflow (ADR 0035) names its bundle: the fork
// record carries it and the fork's state runs it; a name without a
// reference, or a reference that is not a blob's, is refused and forks
// nothing.
func TestForkOntoAnotherWorkflow(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "p")
	ref := "sha256:" + strings.Repeat("ab", 32)
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "p", ID: "cf", Workflow: "changed", WorkflowHash: "h", WorkflowRef: ref}); err != nil {
		t.Fatal(err)
	}
	st, err := r.c.State(ctx, "cf")
	if err != nil {
		t.Fatal(err)
	}
	if st.Workflow != "changed" || st.WorkflowHash != "h" || st.WorkflowRef != ref {
		t.Errorf("fork's workflow %q %q %q", st.Workflow, st.WorkflowHash, st.WorkflowRef)
	}
	if list, err := r.c.List(ctx, api.ListRequest{}); err != nil || len(list) != 2 || list[1].Workflow != "changed" {
		t.Errorf("index: %+v, %v", list, err)
	}
	_, err = r.c.Fork(ctx, api.ForkRequest{Parent: "p", ID: "x1", Workflow: "changed"})
	wantCode(t, err, api.CodeMalformed)
	_, err = r.c.Fork(ctx, api.ForkRequest{Parent: "p", ID: "x2", Workflow: "changed", WorkflowRef: "../etc/passwd"})
	wantCode(t, err, api.CodeSchema)
	for _, id := range []string{"x1", "x2"} {
		if _, err := r.c.State(ctx, id); api.CodeOf(err) != api.CodeNotFound {
			t.Errorf("refused fork %s: %v", id, err)
		}
	}
}
