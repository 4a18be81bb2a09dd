package service_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// The provenance questions across a fork and a merge:
//
//	p: 1 start, 2 X written, 3 recall R1 of X, 4 chunk, 5 recall R2 of X
//	f: fork of p at 3 (4), 5 recall R3 of X
//	g: fork of p at 2 (3), 4 Y written
//	m: 1 start, 2 merge of f (takes in p 2..3 and f 4..5), 3 X retracted
//
// f read X through its own R3 and through R1 inherited from p (before the
// fork point), not R2 (after it); m read X through R1 and R3 by the merge;
// g never read X.
func TestMemoryProvenanceAcrossForkAndMerge(t *testing.T) {
	r := setup(t, 1)
	ctx := context.Background()
	r.start(t, "p")
	x := r.add(t, memoryapi.AddRequest{Session: "p", Content: "the parser panics on empty input", Scope: "project:rath"})
	r1 := r.recall(t, memoryapi.RecallRequest{Session: "p", Query: "parser empty input", Agent: "coder", TurnID: "t1"})
	r.emit(t, "p", &events.ChunkAppended{Role: events.RoleUser, Content: "go on"})
	r2 := r.recall(t, memoryapi.RecallRequest{Session: "p", Query: "parser"})
	if r1.Ack.Seq != 3 || r2.Ack.Seq != 5 {
		t.Fatalf("recalls at %d and %d, want 3 and 5", r1.Ack.Seq, r2.Ack.Seq)
	}
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "p", At: 3, ID: "f"}); err != nil {
		t.Fatal(err)
	}
	if r3 := r.recall(t, memoryapi.RecallRequest{Session: "f", Query: "parser panics"}); r3.Ack.Seq != 5 {
		t.Fatalf("recall in f at %d, want 5", r3.Ack.Seq)
	}
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "p", At: 2, ID: "g"}); err != nil {
		t.Fatal(err)
	}
	y := r.add(t, memoryapi.AddRequest{Session: "g", Content: "the lexer is fine", Scope: "project:rath", Evidence: memoryapi.EvidenceValidationSignal})
	r.start(t, "m")
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "m", Source: "f"}); err != nil {
		t.Fatal(err)
	}

	rd, err := r.mem.Readers(ctx, x.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rr := range rd.Readers {
		if rr.Version != 1 {
			t.Errorf("reader %+v: version %d, want 1", rr, rr.Version)
		}
		got = append(got, fmt.Sprintf("%s %s %s@%d", rr.Session, rr.Via, rr.StoredIn, rr.Seq))
	}
	want := []string{
		"f fork p@3", "f own f@5",
		"m merge f@5", "m merge p@3",
		"p own p@3", "p own p@5",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("readers of X:\n got %q\nwant %q", got, want)
	}
	if i := slices.IndexFunc(rd.Readers, func(rr memoryapi.Reader) bool { return rr.Session == "p" && rr.Seq == 3 }); rd.Readers[i].Agent != "coder" || rd.Readers[i].TurnID != "t1" || rd.Readers[i].EventID != r1.Ack.ID {
		t.Fatalf("reader p@3 = %+v", rd.Readers[i])
	}
	if rd, err := r.mem.Readers(ctx, y.ItemID); err != nil || len(rd.Readers) != 0 {
		t.Fatalf("readers of Y = %+v, %v", rd, err)
	}

	present := func(session string, at uint64) []string {
		t.Helper()
		pr, err := r.mem.Present(ctx, memoryapi.PresentRequest{Session: session, At: at})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pr.Items {
			var why []string
			for _, c := range p.Because {
				why = append(why, fmt.Sprintf("%s@%d", c.Kind, c.Seq))
			}
			name := map[string]string{x.ItemID: "X", y.ItemID: "Y"}[p.ItemID]
			out = append(out, fmt.Sprintf("%s v%v %v retracted=%v", name, p.Versions, why, p.RetractedNow))
		}
		slices.Sort(out)
		return out
	}
	check := func(session string, at uint64, want ...string) {
		t.Helper()
		if got := present(session, at); !slices.Equal(got, want) {
			t.Errorf("present in %s at %d:\n got %q\nwant %q", session, at, got, want)
		}
	}
	check("p", 1)
	check("p", 2, "X v[1] [written@2] retracted=false")
	check("f", 0, "X v[1] [written@2 recalled@3 recalled@5] retracted=false")
	check("f", 4, "X v[1] [written@2 recalled@3] retracted=false")
	check("g", 0, "X v[1] [written@2] retracted=false", "Y v[1] [written@4] retracted=false")
	check("m", 0, "X v[1] [written@2 recalled@3 recalled@5] retracted=false")

	// A retraction in m's log removes X from m from then on; what m held
	// before stays, now flagged as retracted in the store.
	if _, err := r.mem.Retract(ctx, memoryapi.RetractRequest{ItemID: x.ItemID, Session: "m", By: "ana", Reason: "the parser was fixed"}); err != nil {
		t.Fatal(err)
	}
	check("m", 0)
	check("m", 2, "X v[1] [written@2 recalled@3 recalled@5] retracted=true")
	check("p", 5, "X v[1] [written@2 recalled@3 recalled@5] retracted=true")

	// Justify names the session and evidence of each version.
	j, err := r.mem.Justify(ctx, memoryapi.JustifyRequest{ItemID: y.ItemID, Version: 1})
	if err != nil || len(j.Versions) != 1 || j.Versions[0].Provenance.Session != "g" || j.Versions[0].Provenance.Evidence != memoryapi.EvidenceValidationSignal {
		t.Fatalf("justify Y = %+v, %v", j, err)
	}
}
