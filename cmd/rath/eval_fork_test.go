package main

import (
	"context"
	"testing"

	"github.com/openrath/rath/internal/eval"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// A run whose workflow forks and goes on on the fork (the session it
// started closes superseded) is graded on the fork, its tokens count both
// branches, and an eval given as a baseline by its ID counts it once.
func TestEvalFollowsForks(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	r := rath(t, rt.URL, "eval", "testdata/eval/forks.yaml", "--id", "ev-forks", "--runs", "2", "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if len(rep.Tasks) != 1 || len(rep.Tasks[0].Runs) != 2 || rep.Overall.Passed != 2 {
		t.Fatalf("report: %+v", rep)
	}
	for _, run := range rep.Tasks[0].Runs {
		root, err := c.State(ctx, run.Root)
		if err != nil {
			t.Fatalf("try %d: the started session %q: %v", run.Try, run.Root, err)
		}
		fork, err := c.State(ctx, run.Session)
		if err != nil {
			t.Fatalf("try %d: the graded session %q: %v", run.Try, run.Session, err)
		}
		if root.Outcome != eval.OutcomeSuperseded || fork.Outcome != "succeeded" || run.Outcome != "succeeded" || !run.Passed {
			t.Errorf("try %d: started session closed %q, fork %q; run %q passed %v", run.Try, root.Outcome, fork.Outcome, run.Outcome, run.Passed)
		}
		g, err := c.Lineage(ctx, run.Session)
		if err != nil || g.Root == nil || g.Root.Session != run.Root || len(g.Root.Children) != 1 || g.Root.Children[0].Session != run.Session {
			t.Errorf("try %d: lineage of %s: %+v, %v", run.Try, run.Session, g.Root, err)
		}
		// The fork shares only the start with the session it came from,
		// so every model call of both was spent on this run.
		if in, out := root.Usage.Total.In+fork.Usage.Total.In, root.Usage.Total.Out+fork.Usage.Total.Out; run.TokensIn != in || run.TokensOut != out || fork.Usage.Total.In == 0 || root.Usage.Total.In == 0 {
			t.Errorf("try %d: tokens %d/%d, the branches used %d/%d", run.Try, run.TokensIn, run.TokensOut, in, out)
		}
		if v, err := c.Verify(ctx, run.Session); err != nil || !v.OK || run.Head != v.Head || run.HeadSig != v.HeadSig {
			t.Errorf("try %d: head %d, verify of the fork says %+v (%v)", run.Try, run.Head, v, err)
		}
	}
	// Forks inherit the labels: the ledger lists four sessions of the eval,
	// two of them runs.
	if ss, err := c.List(ctx, api.ListRequest{Labels: map[string]string{eval.LabelEval: "ev-forks"}}); err != nil || len(ss) != 4 {
		t.Fatalf("sessions of the eval: %d, %v", len(ss), err)
	}
	if runs, err := eval.Runs(ctx, c, "ev-forks"); err != nil || len(runs) != 2 || runs[0].Parent != "" || runs[1].Parent != "" {
		t.Fatalf("runs of the eval: %+v, %v", runs, err)
	}
	r = rath(t, rt.URL, "eval", "testdata/eval/forks.yaml", "--id", "ev-forks-2", "--runs", "2", "--baseline", "ev-forks", "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval --baseline ev-forks: exit %d, stderr %q", r.code, r.stderr)
	}
	var cand eval.Report
	decode(t, r.stdout, &cand)
	// Graded on the forks, the baseline passed every run; counted once
	// each, it ran k = 2 as the candidate did, so pass^k compares.
	if g := cand.Gate; g == nil || len(g.Tasks) != 1 || len(g.Regressed) != 0 || g.Tasks[0].BaselinePassAt1 != 1 || g.Tasks[0].BaselinePassHatK == nil || *g.Tasks[0].BaselinePassHatK != 1 {
		t.Errorf("the gate against the eval by ID: %+v", g)
	}
}
