package testrig_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// A ledger from the rig stores what a client appends, and stops cleanly
// when asked.
func TestLedgerAppendsAndStops(t *testing.T) {
	ns, nc := natstest.Start(t)
	l := testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(nc, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := c.Start(context.Background(), "s1", events.SessionStarted{Task: "rig"})
	if err != nil || ack.Seq != 1 {
		t.Fatalf("start: %+v, %v", ack, err)
	}
	if err := l.Stop(); err != nil {
		t.Fatalf("ledger stopped with %v", err)
	}
}

// Stop returns what the service returned, once its context is cancelled,
// and the same again.
func TestStopReturnsTheServicesError(t *testing.T) {
	boom := errors.New("boom")
	s := testrig.Run(t, "service", func(ctx context.Context) error {
		<-ctx.Done()
		return boom
	})
	for range 2 {
		if err := s.Stop(); !errors.Is(err, boom) {
			t.Fatalf("Stop: %v, want %v", err, boom)
		}
	}
}
