package service_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/selector/internal/timer"
	"github.com/openrath/rath/services/selector/service"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// A wall-time timer set before every process stops (the selector, the
// ledger and the NATS server) fires after they start again, on the
// server's schedule, and closes the session once; the same timer set and
// fired again after the close records nothing.
func TestTimerSurvivesARestartAndFiresOnce(t *testing.T) {
	dir, keyFile := t.TempDir(), ledger.KeyFileIn(t.TempDir())
	sameKey := func(c *ledger.Config) { c.KeyFile = keyFile }
	ctx := context.Background()

	ns := natstest.StartServer(t, dir)
	url := ns.ClientURL()
	led := testrig.Ledger(t, url, sameKey)
	snc := natstest.ConnectAs(t, url, auth.RoleSelector)
	sel := testrig.Run(t, "selector", func(ctx context.Context) error { return service.Run(ctx, snc, service.DefaultConfig(), quiet) })
	nc := natstest.Connect(t, url)
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Load("testdata/idle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The timer set is seen on its subject (RATH_TIMERS is a work queue: no
	// consumer but the selector's may read it).
	setSub, err := nc.SubscribeSync(events.TimerSubject("idle", timer.KindWallTime))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "idle", events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: testrig.Bundle(t, store, wf)}); err != nil {
		t.Fatal(err)
	}
	// The timer is set (a schedule on RATH_TIMERS) before anything stops.
	set, err := setSub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no timer set: %v", err)
	}
	var tm timer.Timer
	if err := json.Unmarshal(set.Data, &tm); err != nil || tm.Kind != timer.KindWallTime || tm.Budget != "4s" || set.Header.Get("Nats-Schedule") != "@at "+tm.Deadline {
		t.Fatalf("timer set %v %+v %v", set.Header, tm, err)
	}
	for _, s := range []*testrig.Service{sel, led} {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// Still set when everything stops (the server removes a schedule when
	// it fires).
	if st, err := store.JetStream().Stream(ctx, events.StreamTimers); err != nil {
		t.Fatal(err)
	} else if _, err := st.GetLastMsgForSubject(ctx, events.TimerSubject("idle", timer.KindWallTime)); err != nil {
		t.Fatalf("the timer fired before the restart (a machine too slow for the 4 s budget?): %v", err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()

	ns = natstest.StartServer(t, dir)
	url = ns.ClientURL()
	testrig.Ledger(t, url, sameKey)
	moot := testrig.NewLogWatch("timer moot")
	snc = natstest.ConnectAs(t, url, auth.RoleSelector)
	testrig.Run(t, "selector", func(ctx context.Context) error {
		return service.Run(ctx, snc, service.DefaultConfig(), slog.New(slog.NewTextHandler(moot, nil)))
	})
	nc = natstest.Connect(t, url)
	if c, err = client.New(nc); err != nil {
		t.Fatal(err)
	}
	closed := testrig.WaitFor(t, c, "idle", events.TypeSessionClosed)
	if closed.Source != timer.Source || closed.Actor != "rath/selector" || !strings.Contains(string(closed.Data), "wall_time=4s") {
		t.Fatalf("close %s by %s: %s", closed.Source, closed.Actor, closed.Data)
	}

	// Set again (a redelivered arm after the timer fired): it fires at once
	// and finds the session closed.
	again := timer.New(jetStream(t, natstest.ConnectAs(t, url, auth.RoleSelector)), nil, nil, quiet)
	if err := again.Set(ctx, tm); err != nil {
		t.Fatal(err)
	}
	select {
	case <-moot.Seen():
	case <-time.After(time.Minute):
		t.Fatalf("the timer set again was not found moot; selector log:\n%s", moot)
	}
	log, err := c.Log(ctx, "idle", client.Range{From: 1, Limit: api.MaxLogPage})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range log {
		if ev.Type == events.TypeSessionClosed {
			n++
		}
	}
	if n != 1 || len(log) != 2 {
		t.Fatalf("%d closes in %d events, want the start and one close", n, len(log))
	}
}

func jetStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
