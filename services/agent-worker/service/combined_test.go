package service_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/service"
	selector "github.com/openrath/rath/services/selector/service"
)

// The agent worker with the selector in its process (--with-selector), each
// on a connection of its own identity, routes and answers a scripted
// session to its close with no other service but the ledger: the selector
// hands each turn request to the worker, which handles it once, and stops
// cleanly.
func TestWithSelectorRunsTheLoopInOneProcess(t *testing.T) {
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	wnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker)
	snc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleSelector)
	sink := &proctest.LogBuffer{}
	log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc := testrig.Run(t, "agent worker with selector", func(ctx context.Context) error {
		return service.WithSelector(ctx, wnc, snc, service.DefaultConfig(), selector.DefaultConfig(), log)
	})
	ctx := context.Background()
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Load("testdata/handoff.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "s1", events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: testrig.Bundle(t, store, wf)}); err != nil {
		t.Fatal(err)
	}
	closed := testrig.WaitFor(t, c, "s1", events.TypeSessionClosed)
	if err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	log2, err := c.Log(ctx, "s1", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	handled, handOffs := map[string]int{}, map[string]int{}
	dec := json.NewDecoder(strings.NewReader(sink.String()))
	for dec.More() {
		var l struct{ Msg, Event, Type, Handler string }
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if l.Type != events.TypeTurnRequested || l.Handler != auth.Durables(auth.RoleAgentWorker)[0] {
			continue
		}
		switch l.Msg {
		case "handled":
			handled[l.Event]++
		case "hand-off":
			handOffs[l.Event]++
		}
	}
	var turns, completed int
	for _, ev := range log2 {
		switch ev.Type {
		case events.TypeTurnRequested:
			turns++
			if handled[ev.ID] != 1 || handOffs[ev.ID] != 1 {
				t.Errorf("request %s handed off %d times, handled %d times; want once each", ev.ID, handOffs[ev.ID], handled[ev.ID])
			}
		case events.TypeTurnCompleted:
			completed++
		}
	}
	if turns != 2 || completed != 2 || closed.Seq != uint64(len(log2)) {
		t.Fatalf("%d requests, %d turns completed, closed at %d of %d events; want 2, 2, the last", turns, completed, closed.Seq, len(log2))
	}
}
