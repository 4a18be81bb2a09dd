package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// Two tool-runner processes of different pools, with separate workspace
// roots, stand for two hosts: a session moves to the other pool through the
// bus, its calls run there, and when that process is killed mid-call a new
// runner of the pool takes the session over and runs the call again as a
// second attempt, the loss said in the placement.
func TestPoolsAcrossProcesses(t *testing.T) {
	r := startScaleRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gpu := r.startProc(t, kindRunner, "tool-runner-gpu-1", "--workspaces", t.TempDir(), "--timeout", "2m", "--sandbox", "local", "--pool", "gpu")

	const id = "pooled"
	if _, err := r.c.Start(ctx, id, events.SessionStarted{Labels: map[string]string{client.LabelWorkspace: r.seed}}); err != nil {
		t.Fatal(err)
	}
	r.call(t, ctx, id, "w1", "write_file", `{"path":"from-default.txt","content":"written by the default pool\n"}`)
	ack, err := r.c.Emit(ctx, id, &events.SandboxRequested{Backend: events.BackendLocal, Pool: "gpu", Reason: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	placed := r.await(t, ctx, id, ack.Seq, func(d any) bool {
		p, ok := d.(*events.SandboxPlaced)
		return ok && p.Pool == "gpu"
	}).(*events.SandboxPlaced)
	if !strings.HasPrefix(placed.Workspace, gpu.workspaces) || !strings.HasPrefix(placed.Runner, "gpu/") {
		t.Fatalf("placed %+v, want the gpu runner's root %s", placed, gpu.workspaces)
	}
	done := r.call(t, ctx, id, "r1", "run", `{"command":["cat","from-default.txt"]}`)
	if done.Sandbox.Pool != "gpu" || !strings.Contains(done.Result, "written by the default pool") {
		t.Fatalf("the call after the move: %+v", done)
	}

	// The gpu runner dies in the middle of a call.
	ack, err = r.c.Emit(ctx, id, &events.ToolRequested{CallID: "slow", Tool: "run", Agent: "a",
		Arguments: []byte(`{"command":["sh","-c","sleep 8; echo slept"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	r.await(t, ctx, id, ack.Seq, func(d any) bool {
		s, ok := d.(*events.ToolStarted)
		return ok && s.CallID == "slow"
	})
	gpu.kill9(t)
	gpu2 := r.startProc(t, kindRunner, "tool-runner-gpu-2", "--workspaces", t.TempDir(), "--timeout", "2m", "--sandbox", "local", "--pool", "gpu")

	var attempts []int
	var again *events.SandboxPlaced
	end := r.await(t, ctx, id, ack.Seq, func(d any) bool {
		switch d := d.(type) {
		case *events.ToolStarted:
			if d.CallID == "slow" {
				attempts = append(attempts, d.Attempt)
			}
		case *events.SandboxPlaced:
			again = d
		case *events.ToolCompleted:
			return d.CallID == "slow"
		case *events.ToolFailed:
			return d.CallID == "slow"
		}
		return false
	})
	slow, ok := end.(*events.ToolCompleted)
	if !ok {
		t.Fatalf("the call the lost runner had started ended %+v", end)
	}
	if fmt.Sprint(attempts) != "[1 2]" || slow.Sandbox.Pool != "gpu" || !strings.Contains(slow.Result, "slept") {
		t.Fatalf("attempts %v, completion %+v", attempts, slow)
	}
	if again == nil || !strings.HasPrefix(again.Workspace, gpu2.workspaces) || !strings.Contains(again.Reason, "are lost") {
		t.Fatalf("the placement after the loss: %+v", again)
	}
}

// call requests a tool call and waits for its completion.
func (r *scaleRig) call(t *testing.T, ctx context.Context, id, callID, tool, args string) *events.ToolCompleted {
	t.Helper()
	ack, err := r.c.Emit(ctx, id, &events.ToolRequested{CallID: callID, Tool: tool, Agent: "a", Arguments: []byte(args)})
	if err != nil {
		t.Fatal(err)
	}
	end := r.await(t, ctx, id, ack.Seq, func(d any) bool {
		switch d := d.(type) {
		case *events.ToolCompleted:
			return d.CallID == callID
		case *events.ToolFailed:
			return d.CallID == callID
		}
		return false
	})
	done, ok := end.(*events.ToolCompleted)
	if !ok {
		t.Fatalf("call %s failed: %+v", callID, end)
	}
	return done
}

// await watches session id after seq until match accepts an event, and
// returns that event's data.
func (r *scaleRig) await(t *testing.T, ctx context.Context, id string, seq uint64, match func(d any) bool) any {
	t.Helper()
	var got any
	found := errors.New("found")
	err := r.c.Watch(ctx, id, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		if match(d) {
			got = d
			return found
		}
		return nil
	}, client.From(seq+1))
	if !errors.Is(err, found) {
		t.Fatalf("session %s: %v", id, err)
	}
	return got
}
