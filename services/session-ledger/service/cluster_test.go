package service_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

// A ledger started on a cluster that cannot place its R3 streams yet (no
// meta leader: one node of three; or a leader but a node short) waits,
// saying so, and serves once the missing nodes start: it never exits.
func TestRunWaitsForAFormingCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   int
	}{
		{"no meta leader", 1},
		{"one node down", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natstest.StartClusterPartly(t, 3, tc.up)
			waiting := testrig.NewLogWatch("waiting for the JetStream cluster")
			log := slog.New(slog.NewTextHandler(waiting, nil))
			cfg := service.ConfigIn(t.TempDir())
			cfg.Store.Replicas = 3
			lnc := natstest.ConnectAs(t, c.URL(), auth.RoleLedger)
			testrig.Run(t, "ledger", func(ctx context.Context) error { return service.Run(ctx, lnc, cfg, log) })

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			select {
			case <-waiting.Seen():
			case <-ctx.Done():
				t.Fatalf("the ledger never said it waits for the cluster; its log:\n%s", waiting)
			}
			started := time.Now()
			for i := tc.up; i < c.Len(); i++ {
				c.Restart(i)
			}
			cl, err := client.New(natstest.ConnectAs(t, c.URL(), auth.RoleAdmin))
			if err != nil {
				t.Fatal(err)
			}
			a, err := cl.Start(ctx, "", events.SessionStarted{Task: "on a cluster"})
			if err != nil {
				t.Fatalf("start a session: %v\nledger log:\n%s", err, waiting)
			}
			rep, err := cl.Verify(ctx, a.Session)
			if err != nil || !rep.OK {
				t.Fatalf("verify: %+v (fault %+v) %v", rep, rep.Fault, err)
			}
			t.Logf("serving %s after the cluster's last node started", time.Since(started).Round(time.Millisecond))
		})
	}
}
