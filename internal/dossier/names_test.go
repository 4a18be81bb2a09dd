package dossier_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// The names the lineage gives (rath graph, rath audit, the console) are the
// dossier's, of every branch, whichever session of the tree is asked: also
// when a merge took events from another tree, whose forks are numbered
// among the tree's own.
func TestLineageNamesAreTheDossiers(t *testing.T) {
	c := ledger(t)
	ctx := context.Background()
	dt.Tree(t, c)
	// Another tree, whose fork is made between two of the first tree's,
	// merged into the first.
	if _, err := c.Start(ctx, "other", events.SessionStarted{Task: "another way"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, api.ForkRequest{Parent: "other", ID: "other-b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Emit(ctx, "other-b", &events.ChunkAppended{Role: events.RoleUser, Content: "a note"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, api.ForkRequest{Parent: dt.Root, ID: "late"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Merge(ctx, api.MergeRequest{Target: "late", Source: "other-b"}); err != nil {
		t.Fatal(err)
	}
	for _, asked := range []string{dt.Root, dt.Accepted, "late"} {
		d, err := dossier.Build(ctx, c, asked, dossier.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, b := range d.Branches {
			want[b.ID] = b.Name
		}
		got, err := dossier.LineageNames(ctx, c, asked)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("asked %s: the lineage names %v, the dossier %v", asked, got, want)
		}
		if got["other-b"] != "fork-3@1" || got["late"] != "fork-4@"+forkSeqOf(d, "late") || got["other"] != "root-2" {
			t.Errorf("asked %s: names %v; want the other tree's fork numbered among this one's", asked, got)
		}
	}
	if got := dossier.Labelled(map[string]string{"s": "root", "root": "root"}, "s"); got != "root (s)" {
		t.Errorf("Labelled = %q", got)
	}
	if got := dossier.Labelled(map[string]string{"root": "root"}, "root"); got != "root" {
		t.Errorf("Labelled of a branch called by its name = %q", got)
	}
}

// forkSeqOf is the fork point of branch id in d.
func forkSeqOf(d *dossier.Dossier, id string) string {
	for _, b := range d.Branches {
		if b.ID == id {
			return fmt.Sprint(b.ForkSeq)
		}
	}
	return "?"
}
