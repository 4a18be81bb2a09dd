package selector

import (
	"context"
	"testing"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// A decision another producer stored for an event is not the selector's:
// rath replay --fork decides the fork's first turn itself, caused by the
// fork event. A selector that handles the fork event late, with that turn
// in flight, must not take the decision for its own and request the turn a
// second time (the agent worker would ask the model twice).
func TestForeignDecisionOfTheTriggerIsNotFollowed(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	r.start(t, "s1")
	ack, err := r.c.Fork(ctx, api.ForkRequest{Parent: "s1", At: 1, ID: "s1-b"})
	if err != nil {
		t.Fatal(err)
	}
	forked := r.at(t, "s1-b", ack.Seq)
	const turnID = "turn-whatif00"
	if _, err := r.c.Emit(ctx, "s1-b", &events.SelectorDecided{Rule: "what-if", Route: "agent:coder", Agent: "coder", TurnID: turnID},
		events.WithCausation(ack.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Emit(ctx, "s1-b", &events.TurnRequested{TurnID: turnID, Agent: "coder", Rule: "what-if"},
		events.WithCausation(ack.ID)); err != nil {
		t.Fatal(err)
	}
	before := r.log(t, "s1-b")

	if err := r.s.Handle(ctx, forked); err != nil {
		t.Fatal(err)
	}
	after := r.log(t, "s1-b")
	if len(after) != len(before) {
		t.Fatalf("handling the fork event appended %d events: %s", len(after)-len(before), fmtLog(after[len(before):]))
	}
}
