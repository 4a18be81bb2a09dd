package worker_test

import (
	"context"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// A model is asked once per turn, whatever the deliveries: the request
// delivered again, and a second request of the same turn stored after the
// turn ended (a selector that followed rath replay --fork's own decision of
// a fork's first turn stored one), find the turn ended, ask nothing and
// record nothing, and the turn counts once against the budgets.
func TestWorkerAsksTheModelOncePerTurn(t *testing.T) {
	r := setup(t, "")
	ctx := context.Background()
	r.start(t, "s1")
	r.emit(t, "s1", &events.SelectorDecided{Rule: "what-if", Route: "agent:coder", Agent: "coder", TurnID: "turn-1"})
	req := r.request(t, "s1", "turn-1", "coder")
	m := answering(toolUse)
	w := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet)
	if err := w.Handle(ctx, req); err != nil {
		t.Fatal(err)
	}
	again := r.request(t, "s1", "turn-1", "coder", events.WithSource("rath/selector"))
	before := len(r.log(t, "s1"))
	for _, ev := range []events.Stored{req, again, again} {
		if err := w.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if m.calls() != 1 {
		t.Fatalf("the model was asked %d times for one turn", m.calls())
	}
	if after := len(r.log(t, "s1")); after != before {
		t.Fatalf("deliveries of an answered turn appended %d events: %s", after-before, r.types(t, "s1"))
	}
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Turn != nil || st.Counts.Turns != 1 || st.Usage.Total.Calls != 1 {
		t.Fatalf("turn in flight %+v, counts %+v, usage %+v", st.Turn, st.Counts, st.Usage.Total)
	}
}
