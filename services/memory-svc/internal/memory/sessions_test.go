package memory

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// Sync returns only once every lifecycle event stored before the call is
// applied: a fork acknowledged by the ledger is in the graph when Sync
// returns, every time.
func TestSessionsSyncHoldsEveryEventStoredBefore(t *testing.T) {
	ns, nc := natstest.Start(t)
	// 200 starts and 200 forks in a few seconds: past the default
	// per-tenant rate of starts, which this test is not about.
	testrig.Ledger(t, ns.ClientURL(), func(c *ledger.Config) { c.Ledger.Quotas.StartsPerMinute = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
	store, err := eventstore.AttachWait(ctx, mnc)
	if err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	s, err := FollowSessions(fctx, store, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if err := s.Wait(); err != nil {
			t.Error(err)
		}
	}()
	c, err := client.New(nc, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		parent, child := fmt.Sprintf("p%d", i), fmt.Sprintf("f%d", i)
		if _, err := c.Start(ctx, parent, events.SessionStarted{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Fork(ctx, api.ForkRequest{Parent: parent, At: 1, ID: child}); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.reach(parent); !slices.Contains(got, child) {
			t.Fatalf("after Sync, round %d: reach(%s) = %q, want %s in it", i, parent, got, child)
		}
	}
}
