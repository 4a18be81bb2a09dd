package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	ledgerservice "github.com/openrath/rath/services/session-ledger/service"
)

// The client's errors match the ledger's codes with errors.Is, wrapped as
// they are with the operation and the session.
func TestErrorsMatchSentinels(t *testing.T) {
	_, nc := natstest.Start(t)
	ctx := context.Background()
	alone, err := client.New(nc, client.WithTimeout(50*time.Millisecond), client.WithRetryFor(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alone.State(ctx, "s"); !errors.Is(err, api.ErrUnavailable) || errors.Is(err, api.ErrNotFound) {
		t.Fatalf("no ledger: %v, want it to match ErrUnavailable", err)
	}

	// One start a minute: the client is the default tenant's user.
	testrig.Ledger(t, nc.ConnectedUrl(), func(c *ledgerservice.Config) { c.Ledger.Quotas.StartsPerMinute = 1 })
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "s", events.SessionStarted{Task: "t"}); err != nil {
		t.Fatal(err)
	}
	_, exists := c.Start(ctx, "s", events.SessionStarted{Task: "t"})
	_, quota := c.Start(ctx, "s2", events.SessionStarted{Task: "a second in the minute"})
	_, notFound := c.State(ctx, "nope")
	_, outOfRange := c.StateAt(ctx, "s", 9)
	_, stale := c.Emit(ctx, "s", &events.ChunkAppended{Role: events.RoleUser, Content: "x"}, events.WithExpectedSeq(7))
	_, closed := c.Close(ctx, "s", events.SessionClosed{Outcome: "succeeded", Reason: "done"})
	_, afterClose := c.Emit(ctx, "s", &events.ChunkAppended{Role: events.RoleUser, Content: "x"})
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"start twice", exists, api.ErrExists},
		{"start past the tenant's quota", quota, api.ErrQuotaExceeded},
		{"state of a session that does not exist", notFound, api.ErrNotFound},
		{"state beyond the head", outOfRange, api.ErrOutOfRange},
		{"append on a stale head", stale, api.ErrStale},
		{"append after close", afterClose, api.ErrClosed},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want it to match %v", tc.name, tc.err, tc.want)
		}
		if errors.Is(tc.err, api.ErrUnavailable) {
			t.Errorf("%s: %v matches ErrUnavailable", tc.name, tc.err)
		}
	}
	if closed != nil {
		t.Fatal(closed)
	}
}
