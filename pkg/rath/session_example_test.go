package rath_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// Fork a session at the planner's step, forward the fork through the
// reviewer, and merge the review back: the session takes in exactly the
// fork's own events, with provenance; the value before the merge still
// reads the state at its step.
func ExampleSession_Merge() {
	r, err := startRig()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.stop()
	defer r.serve(func(ctx context.Context, nc *nats.Conn) error {
		return agentserver.Serve(ctx, nc, "planner", agentserver.Func(
			func(context.Context, agentserver.Turn) (agentserver.Answer, error) {
				return agentserver.Answer{Text: "Plan: fix Add.", Usage: agentserver.Usage{TokensIn: 30, TokensOut: 4}}, nil
			}))
	})()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wf, err := workflowfile.Store(ctx, r.c, testdata("by-hand.yaml"))
	var s rath.Session
	if err == nil {
		s, err = rath.Start(ctx, r.c, rath.StartOptions{ID: "main", Workflow: wf, Task: "TestAdd"})
	}
	if err == nil {
		s, err = rath.Agent("planner").Forward(ctx, s)
	}
	var review, merged rath.Session
	if err == nil {
		review, err = s.Fork(ctx, 0, "main-review", "review on a branch")
	}
	if err == nil {
		review, err = review.Forward(ctx, rath.Agent("reviewer"))
	}
	if err == nil {
		merged, err = s.Merge(ctx, review, "take the review")
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range []rath.Session{s, review, merged} {
		st, err := v.State(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d chunks, %d turns, %d tokens in\n", v, len(st.Chunks), st.Counts.Turns, st.Usage.Total.In)
	}
	before, err := merged.StateAt(ctx, s.Head())
	if err == nil {
		fmt.Printf("main at %d: %d chunks\n", s.Head(), len(before.Chunks))
	}
	// Output:
	// main@5: 1 chunks, 1 turns, 30 tokens in
	// main-review@10: 2 chunks, 2 turns, 150 tokens in
	// main@6: 2 chunks, 2 turns, 150 tokens in
	// main at 5: 1 chunks
}

// Move a session between sandbox backends between tool calls: the tool
// runner answers the request with a placement or a refusal. (The examples'
// runtime runs tools on local only: a session nothing has placed yet is
// placed there, and a second move to where it is is refused.)
func ExampleSession_To() {
	r, err := startRig()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := rath.Start(ctx, r.c, rath.StartOptions{ID: "moved", Task: "build"})
	if err == nil {
		s, err = s.To(ctx, events.BackendLocal, "no isolation needed")
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := s.State(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: on %s\n", s, st.Sandbox.Backend)
	s, err = s.To(ctx, events.BackendLocal, "again")
	var refused *rath.MoveError
	fmt.Println(s, errors.Is(err, rath.ErrMoveRefused), errors.As(err, &refused) && refused.Backend == events.BackendLocal)
	// default/local names the pool too: the session is there already.
	s, err = s.To(ctx, "default/local", "again, naming the pool")
	fmt.Println(s, errors.Is(err, rath.ErrMoveRefused))
	// A pool's name is one subject token: nothing is asked.
	s, err = s.To(ctx, "../gpu/local", "")
	fmt.Println(s, err)
	// Output:
	// moved@3: on local
	// moved@5 true true
	// moved@7 true
	// moved@7 move moved: pool "..": want 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter or digit
}
