package selector

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
	memorysvc "github.com/openrath/rath/services/memory-svc/service"
)

// A memory rule writes its item once, with the trigger as provenance, when
// the trigger is delivered again, one after the other or at the same time;
// neither the turn in flight nor the tool call still running holds it back,
// and it starts no turn.
func TestMemoryRouteWritesOnce(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sequential", true: "concurrent"}[concurrent], func(t *testing.T) {
			ns, nc := natstest.Start(t)
			r := setupWith(t, nc, "testdata/memory.yaml")
			mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
			testrig.Run(t, "memory service", func(ctx context.Context) error { return memorysvc.Run(ctx, mnc, memorysvc.DefaultConfig(), quiet) })
			ctx := context.Background()

			// The start routes the coder: its turn is in flight, and it
			// runs a tool whose verdict is the trigger.
			start := r.start(t, "s1")
			if err := r.s.Handle(ctx, start); err != nil {
				t.Fatal(err)
			}
			r.emit(t, "s1", &events.ToolRequested{CallID: "c1", Tool: "validate", Agent: "coder"})
			r.emit(t, "s1", &events.ToolStarted{CallID: "c1", Tool: "validate", Attempt: 1})
			trigger := r.emit(t, "s1", &events.ValidationFailed{Validator: "go test", Reason: "TestMake keeps capitals"})

			const deliveries = 3
			errs := make(chan error, deliveries)
			var wg sync.WaitGroup
			for range deliveries {
				wg.Add(1)
				handle := func() {
					defer wg.Done()
					errs <- r.s.Handle(ctx, trigger)
				}
				if concurrent {
					go handle()
				} else {
					handle()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("handle: %v", err)
				}
			}

			log := r.log(t, "s1")
			var decided []events.Stored
			for _, ev := range ofType(log, events.TypeSelectorDecided) {
				if ev.Causation == trigger.ID {
					decided = append(decided, ev)
				}
			}
			if len(decided) != 1 {
				t.Fatalf("%d decisions on the trigger", len(decided))
			}
			d, err := decided[0].Decode()
			if err != nil {
				t.Fatal(err)
			}
			if dd := d.(*events.SelectorDecided); dd.Rule != "record-failure" || dd.Route != "memory:project:demo" || dd.TurnID != "" {
				t.Fatalf("decision %+v", dd)
			}
			if n := len(ofType(log, events.TypeTurnRequested)); n != 1 {
				t.Fatalf("%d turns requested, want only the start's", n)
			}
			written := ofType(log, events.TypeMemoryWritten)
			if len(written) != 1 {
				t.Fatalf("%d memory writes", len(written))
			}
			w, err := written[0].Decode()
			if err != nil {
				t.Fatal(err)
			}
			mw := w.(*events.MemoryWritten)
			if mw.Content != "Failure pattern: TestMake keeps capitals" || mw.Scope != "project:demo" || !slices.Equal(mw.Tags, []string{"failure-pattern"}) ||
				mw.Provenance.Session != "s1" || !slices.Equal(mw.Provenance.EventIDs, []string{trigger.ID}) ||
				mw.Provenance.Evidence != memoryapi.EvidenceValidationSignal || mw.Version != 1 {
				t.Fatalf("written %+v", mw)
			}

			// The store holds the one item, recallable by its tag.
			res, err := r.c.Memory().Search(ctx, memoryapi.SearchRequest{Query: "failure pattern capitals",
				Filter: memoryapi.Filter{Scopes: []string{"project:demo"}, Tags: []string{"failure-pattern"}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Hits) != 1 || res.Hits[0].ItemID != mw.ItemID {
				t.Fatalf("hits %+v", res.Hits)
			}
			hist, err := r.c.Memory().History(ctx, mw.ItemID)
			if err != nil || len(hist.Records) != 1 {
				t.Fatalf("history %+v, %v", hist, err)
			}
		})
	}
}
