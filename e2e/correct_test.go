package e2e_test

import (
	"context"
	"errors"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// turnEnds are the sequences of the session's rath.agent.turn.completed
// events, in order.
func turnEnds(log []events.Stored) []uint64 {
	var out []uint64
	for _, ev := range log {
		if ev.Type == events.TypeTurnCompleted {
			out = append(out, ev.Seq)
		}
	}
	return out
}

// closeFork waits for a corrected fork to close and returns its state and
// last chunk.
func (r *rig) closeFork(t *testing.T, id string) (*session.State, session.Chunk) {
	t.Helper()
	r.until(t, id, "close", ofType(events.TypeSessionClosed))
	st, err := r.c.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st, st.Chunks[len(st.Chunks)-1]
}

// Rewind, correct, resume: a person's message on a fork taken between two
// turns resumes the agent of the last turn there, which reads it; the
// correction and its author are in the fork's log.
func TestCorrectWithAMessage(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	st, log := r.run(t, "ask", "correctable.yaml", "repo")
	if last := st.Chunks[len(st.Chunks)-1]; st.Outcome != "succeeded" || last.Content != "The tool's result is in." {
		t.Fatalf("original ended %s with %+v", st.Outcome, last)
	}
	ends := turnEnds(log)
	done, err := r.c.Correct(ctx, client.Correction{Session: "ask", At: ends[1], ID: "ask-blue", Say: "use blue"})
	if err != nil {
		t.Fatal(err)
	}
	if done.Agent != "asker" || done.Fork.Session != "ask-blue" || done.Correction.Seq != ends[1]+2 {
		t.Fatalf("corrected %+v", done)
	}
	fork, last := r.closeFork(t, "ask-blue")
	if fork.Outcome != "succeeded" || last.Agent != "asker" || last.Content != "Blue it is, as corrected." {
		t.Fatalf("fork ended %s with %+v", fork.Outcome, last)
	}
	evs, err := r.c.Log(ctx, "ask-blue", client.Range{From: done.Correction.Seq, To: done.Correction.Seq + 1})
	if err != nil {
		t.Fatal(err)
	}
	said := data[events.ChunkAppended](t, evs[0])
	if !said.Correction || said.Role != events.RoleUser || evs[0].Actor != r.c.Principal().String() || evs[0].Causation != done.Fork.ID {
		t.Fatalf("correction %+v by %s caused by %s", said, evs[0].Actor, evs[0].Causation)
	}
	if d := data[events.SelectorDecided](t, evs[1]); d.Rule != "correction" || d.Agent != "asker" {
		t.Fatalf("after the correction: %+v", d)
	}

	// Inside a turn (its request, before its end) nothing would resume.
	if _, err := r.c.Correct(ctx, client.Correction{Session: "ask", At: ends[1] - 1, Say: "too early"}); !errors.Is(err, client.ErrNotResumable) {
		t.Fatalf("a correction inside a turn: %v, want ErrNotResumable", err)
	}
}

// A person's result in place of a tool call's: the fork taken after the
// turn that made the call, before the call ran, records the result as the
// person's, nothing runs the call there, and the agent continues with it.
func TestCorrectAToolResult(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	st, log := r.run(t, "tool", "correctable.yaml", "repo")
	var callID string
	for id := range st.Tools {
		callID = id
	}
	at := turnEnds(log)[0]
	done, err := r.c.Correct(ctx, client.Correction{Session: "tool", At: at, ID: "tool-person", CallID: callID, Result: "from a person"})
	if err != nil {
		t.Fatal(err)
	}
	fork, last := r.closeFork(t, "tool-person")
	if fork.Outcome != "succeeded" || last.Content != "The person's result is in." {
		t.Fatalf("fork ended %s with %+v", fork.Outcome, last)
	}
	if call := fork.Tools[callID]; call.Status != session.ToolCompleted || len(r.started(t, "tool-person", callID)) != 0 {
		t.Fatalf("call %+v in the fork, started %d times", call, len(r.started(t, "tool-person", callID)))
	}
	evs, err := r.c.Log(ctx, "tool-person", client.Range{From: done.Correction.Seq, To: done.Correction.Seq})
	if err != nil {
		t.Fatal(err)
	}
	if result := data[events.ToolCompleted](t, evs[0]); !result.Correction || result.Result != "from a person" || evs[0].Actor != r.c.Principal().String() {
		t.Fatalf("result %+v by %s", result, evs[0].Actor)
	}

	// A call finished at the point is not corrected there.
	if _, err := r.c.Correct(ctx, client.Correction{Session: "tool", CallID: callID, Result: "late"}); !errors.Is(err, client.ErrNotResumable) {
		t.Fatalf("correcting a finished call: %v, want ErrNotResumable", err)
	}
}
