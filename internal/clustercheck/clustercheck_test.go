package clustercheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/clustercheck"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// What the ledger acknowledged passes; an ack of an event it never stored
// is lost, an event acknowledged at two places is a duplicate.
func TestCheckFindsLostAndDuplicatedAcks(t *testing.T) {
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := clustercheck.NewRecorder()
	var acks []api.Ack
	for i, data := range []any{&events.SessionStarted{Task: "check"}, &events.ChunkAppended{Role: events.RoleUser, Content: "one"}} {
		a, err := c.Emit(ctx, "chk", data)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		rec.Acked(a)
		acks = append(acks, a)
	}
	rep, err := clustercheck.Check(ctx, c, rec)
	if err != nil || !rep.OK() || rep.Acked != 2 || rep.Read != 2 {
		t.Fatalf("clean run: %v %v", rep, err)
	}

	rec.Acked(api.Ack{ID: "never-stored", Session: "chk", Seq: 3, Hash: "x"})
	moved := acks[1]
	moved.Seq = 1
	rec.Acked(moved)
	rep, err = clustercheck.Check(ctx, c, rec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Lost) != 2 || len(rep.Duplicates) != 1 || len(rep.Unverified) != 1 {
		t.Fatalf("want 2 lost (never stored, stored elsewhere), 1 duplicate, 1 head below an ack: %v", rep)
	}
	if !strings.Contains(rep.String(), "never-stored") {
		t.Fatalf("report does not name the lost event: %v", rep)
	}
}
