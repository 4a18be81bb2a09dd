package rath_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// A served agent's gated call stops the workflow's forward at the approval
// request (ErrAwaitingApproval); once a maintainer grants it, the call
// runs and the next forward reaches the close.
func TestForwardStopsAtAnApproval(t *testing.T) {
	r, err := startRig()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	t.Cleanup(r.serve(func(ctx context.Context, nc *nats.Conn) error {
		return agentserverPlanner(ctx, nc)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wf, err := workflowfile.Store(ctx, r.c, testdata("gated.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rath.Start(ctx, r.c, rath.StartOptions{ID: "gated", Workflow: wf, Task: "plan"})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := s.Forward(ctx, rath.Workflow{})
	if !errors.Is(err, rath.ErrAwaitingApproval) {
		t.Fatalf("forward: %v, want ErrAwaitingApproval", err)
	}
	pending, err := r.c.Pending(ctx, "gated")
	if err != nil || len(pending) != 1 || pending[0].Seq != waiting.Head() || pending[0].Agent != "planner" {
		t.Fatalf("pending %+v at %s: %v", pending, waiting, err)
	}
	if _, err := r.c.Approve(ctx, "gated", pending[0].ApprovalID, "fine"); err != nil {
		t.Fatal(err)
	}
	done, err := waiting.Forward(ctx, rath.Workflow{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := done.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" || st.Tools[pending[0].CallID].Status != "completed" || done.Head() <= waiting.Head() {
		t.Fatalf("closed %s at %s; call %+v", st.Outcome, done, st.Tools[pending[0].CallID])
	}
}

// Say, Open and Close are single appends: each returns the session at its
// event, and Open finds the head a value may lag.
func TestSayOpenClose(t *testing.T) {
	r, err := startRig()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	ctx := context.Background()
	s, err := rath.Start(ctx, r.c, rath.StartOptions{ID: "talk", Task: "talk", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	said, err := s.Say(ctx, "hello")
	if err != nil || said.Head() != s.Head()+1 {
		t.Fatalf("say: %s, %v", said, err)
	}
	opened, err := rath.Open(ctx, r.c, "talk")
	if err != nil || opened.Head() != said.Head() || opened.ID() != "talk" {
		t.Fatalf("open: %s, %v", opened, err)
	}
	closed, err := s.Close(ctx, "succeeded", "said it")
	if err != nil || closed.Head() != said.Head()+1 {
		t.Fatalf("close: %s, %v", closed, err)
	}
	st, err := closed.State(ctx)
	if err != nil || st.Outcome != "succeeded" || len(st.Chunks) != 1 || st.Labels["team"] != "a" {
		t.Fatalf("state %+v: %v", st, err)
	}
	if before, err := s.State(ctx); err != nil || len(before.Chunks) != 0 {
		t.Fatalf("the first value's state: %+v, %v", before, err)
	}
	if _, err := closed.Say(ctx, "too late"); err == nil {
		t.Fatal("a closed session took a message")
	}
}
