package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// The worker, as a tenant's user, does the work assigned to it and records
// the work it gives up on in the session: a greeting is done (its output
// caused by the work item, with the item's correlation ID), a kind it
// cannot do is tried Attempts times and then recorded as rath.handler.failed
// after it, and work of another assignee is left alone.
func TestWorkerRecordsDoneAndPoisonedWorkInTheSession(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	alice := events.Principal{Tenant: "acme", User: "alice"}
	nc := natstest.ConnectUser(t, url, alice) // before the ledger: adding a user reloads the server
	testrig.Ledger(t, url)
	c, err := client.New(nc, client.As(alice), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "watermill-worker", func(ctx context.Context) error {
		return Run(ctx, c, slog.New(slog.DiscardHandler))
	})

	ctx := context.Background()
	if _, err := c.Start(ctx, "jobs", events.SessionStarted{Task: "jobs"}); err != nil {
		t.Fatal(err)
	}
	emit := func(w events.WorkPending, opts ...events.Option) string {
		t.Helper()
		ack, err := c.Emit(ctx, "jobs", &w, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ack.ID
	}
	greet := emit(events.WorkPending{WorkID: "w1", Kind: "greet", Description: "Ada", Assignee: Assignee}, events.WithCorrelation("order-42"))
	paint := emit(events.WorkPending{WorkID: "w2", Kind: "paint", Assignee: Assignee})
	emit(events.WorkPending{WorkID: "w3", Kind: "greet", Assignee: "someone-else"})
	last := emit(events.WorkPending{WorkID: "w4", Kind: "greet", Description: "Grace", Assignee: Assignee})

	// The feed delivers in order: once w4 is done, w1 to w3 were handled.
	var done []events.Stored
	var failed []events.Stored
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = c.Watch(wctx, "jobs", func(ev events.Stored) error {
		switch ev.Type {
		case events.TypeWorkDone:
			done = append(done, ev)
			if ev.Causation == last {
				return errFound
			}
		case events.TypeHandlerFailed:
			failed = append(failed, ev)
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("waiting for w4's work.done: %v", err)
	}

	if len(done) != 2 || done[0].Causation != greet || done[1].Causation != last {
		t.Fatalf("work.done events: %+v", done)
	}
	var w events.WorkDone
	if err := json.Unmarshal(done[0].Data, &w); err != nil || w.WorkID != "w1" || w.Outcome != "hello, Ada" {
		t.Fatalf("w1's outcome: %+v, %v", w, err)
	}
	if done[0].Correlation != "order-42" || done[0].Actor != alice.String() {
		t.Errorf("w1's work.done: correlation %q, actor %q", done[0].Correlation, done[0].Actor)
	}

	// Where the poisoned message lands: in the session, after the work
	// item it failed on.
	if len(failed) != 1 {
		t.Fatalf("handler.failed events: %+v", failed)
	}
	var f events.HandlerFailed
	if err := json.Unmarshal(failed[0].Data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Handler != Handler || f.EventID != paint || f.EventType != events.TypeWorkPending || f.Attempts != Attempts ||
		!strings.Contains(f.Error, `kind "paint"`) || failed[0].Causation != paint {
		t.Fatalf("handler.failed: %+v (causation %s)", f, failed[0].Causation)
	}
}

var errFound = errors.New("found")
