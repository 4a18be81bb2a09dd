package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/tool-runner/service"
)

// onHost makes the runner report host as its workspaces' host: two runners
// of one test stand for two machines (separate roots, hosts and pools).
func onHost(host string) func(*service.Config) {
	return func(c *service.Config) { c.Sandbox.Host = host }
}

// poolRunner runs a second tool runner, of pool, on "host" host with a
// workspaces root of its own, against the rig's bus, and returns it and
// its root.
func (r *rig) poolRunner(t *testing.T, pool, host string) (*testrig.Service, string) {
	t.Helper()
	nc := natstest.ConnectAs(t, r.url, auth.RoleToolRunner)
	cfg := service.DefaultConfig()
	cfg.Pool = pool
	cfg.Sandbox.Root = filepath.Join(t.TempDir(), "workspaces")
	cfg.Sandbox.Path = os.Getenv("PATH")
	cfg.Sandbox.Host = host
	cfg.MCP.Scratch = t.TempDir()
	cfg.Isolation.UIDBase = 300000
	return testrig.Run(t, "tool runner of pool "+pool, func(ctx context.Context) error { return service.Run(ctx, nc, cfg, quiet) }), cfg.Sandbox.Root
}

// servesPool waits until a runner of pool answers on the pool's subject
// (a request it refuses as malformed, which changes nothing).
func (r *rig) servesPool(t *testing.T, pool string) {
	t.Helper()
	nc := natstest.ConnectAs(t, r.url, auth.RoleToolRunner)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		reply, err := nc.RequestWithContext(ctx, "rath.toolrunner.pool."+pool, []byte("{"))
		if err == nil {
			if !strings.Contains(string(reply.Data), "malformed request") {
				t.Fatalf("pool %s answered a malformed request with %s", pool, reply.Data)
			}
			return
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("no runner of pool %s: %v", pool, err)
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A session moves to a runner of another pool, on another host, through
// the bus: the move waits while the pool has no runner (and so do the
// session's later calls), the workspace arrives at its head commit with its
// history, the placement names the pool and the runner, the calls after it
// run there, and the session moves back, its old workspace brought forward.
func TestMoveToAnotherPool(t *testing.T) {
	needBwrap(t)
	ctx := context.Background()
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal, onHost("host-a"))
	r.startWith(t, "p1", nil)
	wrote := r.ok(t, "p1", "w1", "plain", "write_file", `{"path":"notes.txt","content":"written on host-a\n"}`)

	// No runner of pool gpu yet: the move waits, and the session says so.
	ack, err := r.c.Emit(ctx, "p1", &events.SandboxRequested{Backend: "bwrap", Pool: "gpu", Reason: "needs the GPU"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.c.State(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Moving == nil || st.Moving.Pool != "gpu" || st.Moving.Backend != "bwrap" || st.Moving.ID != ack.ID {
		t.Fatalf("moving %+v, want the request %s to gpu/bwrap", st.Moving, ack.ID)
	}
	// A call requested after the move runs after it, on the pool's runner.
	if _, err := r.c.Emit(ctx, "p1", &events.ToolRequested{CallID: "r1", Tool: "run", Agent: "plain",
		Arguments: []byte(`{"command":["sh","-c","cat notes.txt; echo on-b > b.txt"]}`)}); err != nil {
		t.Fatal(err)
	}

	_, rootB := r.poolRunner(t, "gpu", "host-b")
	log := r.finish(t, "p1", "r1")
	var placed *events.SandboxPlaced
	for _, ev := range log {
		if ev.Type == events.TypeSandboxPlaced && ev.Causation == ack.ID {
			placed = decode(t, ev).(*events.SandboxPlaced)
		}
	}
	if placed == nil {
		t.Fatalf("no placement answers the move before the call after it ended: %v", types(log))
	}
	if placed.Pool != "gpu" || placed.Host != "host-b" || placed.Backend != "bwrap" || placed.Commit != wrote.CommitAfter ||
		!strings.HasPrefix(placed.Runner, "gpu/host-b:") || !strings.HasPrefix(placed.Workspace, rootB) ||
		placed.From == nil || *placed.From != (events.Sandbox{Backend: "local", SandboxID: "local-p1"}) ||
		!strings.Contains(placed.Reason, "needs the GPU") {
		t.Fatalf("placed %+v (from %+v)", placed, placed.From)
	}
	ran := decode(t, log[len(log)-1]).(*events.ToolCompleted)
	if ran.Sandbox.Pool != "gpu" || ran.CommitBefore != wrote.CommitAfter || !strings.Contains(ran.Result, "written on host-a") {
		t.Fatalf("the call after the move: %+v", ran)
	}
	if st, err = r.c.State(ctx, "p1"); err != nil || st.Moving != nil || st.Sandbox.Pool != "gpu" || st.Sandbox.Runner != placed.Runner {
		t.Fatalf("state after the move: %v moving %+v placement %+v", err, st.Moving, st.Sandbox)
	}

	// Back to the default pool: host-a's old workspace comes forward.
	back, refused := r.movePool(t, "p1", "default", "local")
	if refused != nil {
		t.Fatalf("move back refused: %s", refused.Reason)
	}
	if back.Pool != "" || back.Host != "host-a" || back.Commit != ran.CommitAfter || back.From == nil || back.From.Pool != "gpu" {
		t.Fatalf("moved back %+v from %+v", back, back.From)
	}
	read := r.ok(t, "p1", "r2", "plain", "run", `{"command":["cat","b.txt"]}`)
	if read.Sandbox.Pool != "" || read.Sandbox.Backend != "local" || !strings.Contains(read.Result, "on-b") {
		t.Fatalf("after moving back: %+v", read)
	}
	if _, refused := r.movePool(t, "p1", "default", "local"); refused == nil || !strings.Contains(refused.Reason, "already") {
		t.Fatalf("a move to where the session is: refused %+v", refused)
	}
}

// movePool is move to a backend of a pool.
func (r *rig) movePool(t *testing.T, id, pool, backend string) (*events.SandboxPlaced, *events.SandboxRefused) {
	t.Helper()
	return r.moveReq(t, id, &events.SandboxRequested{Backend: backend, Pool: pool, Reason: "test"})
}

func types(log []events.Stored) []string {
	out := make([]string, len(log))
	for i, ev := range log {
		out[i] = ev.Type
	}
	return out
}

// A pool's runner that is gone: a call of a session it held fails, saying
// so, while no other runner of the pool is there; once one is, the next
// call is taken over by it, which places the session again (the lost
// workspace's changes said lost in the placement) and runs the call as a
// new attempt of one the lost runner had started.
func TestLostRunnerOfAPool(t *testing.T) {
	needBwrap(t)
	ctx := context.Background()
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal, onHost("host-a"))
	b, _ := r.poolRunner(t, "gpu", "host-b")
	r.servesPool(t, "gpu")
	r.servesPool(t, "default") // the session starts there (TestSessionsStartInTheDefaultPool)
	r.startWith(t, "l1", nil)
	if _, refused := r.movePool(t, "l1", "gpu", "bwrap"); refused != nil {
		t.Fatalf("move refused: %s", refused.Reason)
	}
	wrote := r.ok(t, "l1", "w1", "plain", "write_file", `{"path":"lost.txt","content":"only on host-b\n"}`)
	if wrote.Sandbox.Pool != "gpu" {
		t.Fatalf("write ran on %+v", wrote.Sandbox)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("stop the gpu runner: %v", err)
	}

	_, failed := r.call(t, "l1", "c1", "plain", "list_files", `{}`)
	if failed == nil || !strings.Contains(failed.Error, "no other tool runner of pool gpu does") {
		t.Fatalf("a call while the pool has no runner: failed %+v", failed)
	}

	_, rootC := r.poolRunner(t, "gpu", "host-c")
	r.servesPool(t, "gpu")
	// The lost runner had started c2 when it went.
	req, err := events.New("l1", &events.ToolRequested{CallID: "c2", Tool: "run", Agent: "plain", Arguments: []byte(`{"command":["ls"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	started, err := events.New("l1", &events.ToolStarted{CallID: "c2", Tool: "run", Attempt: 1, Sandbox: wrote.Sandbox})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.AppendAtomic(ctx, []event.Event{req, started}); err != nil {
		t.Fatal(err)
	}
	log := r.finish(t, "l1", "c2")
	var placed *events.SandboxPlaced
	var attempts []int
	for _, ev := range log {
		switch d := decode(t, ev).(type) {
		case *events.SandboxPlaced:
			placed = d
		case *events.ToolStarted:
			if d.CallID == "c2" {
				attempts = append(attempts, d.Attempt)
			}
		}
	}
	done, ok := decode(t, log[len(log)-1]).(*events.ToolCompleted)
	if !ok {
		t.Fatalf("c2 failed: %s", log[len(log)-1].Data)
	}
	if done.Sandbox.Pool != "gpu" || strings.Contains(done.Result, "lost.txt") {
		t.Fatalf("c2 ended %s: %+v", log[len(log)-1].Type, done)
	}
	if placed == nil || placed.Host != "host-c" || placed.Pool != "gpu" || !strings.HasPrefix(placed.Workspace, rootC) ||
		!strings.Contains(placed.Reason, "did not answer, its changes since commit") {
		t.Fatalf("the placement after the loss: %+v", placed)
	}
	if len(attempts) != 2 || attempts[1] != 2 {
		t.Fatalf("c2's attempts %v, want the lost one and a second", attempts)
	}
}

// Only tool runners speak on a pool's subject: a client of the bus (any
// tenant's program) cannot hand a runner a workspace or a call to take
// over, nor listen for the workspaces moving between runners.
func TestClientsCannotReachAPool(t *testing.T) {
	r := setupWith(t, backendWorkflow(""), sandboxUIDs)
	r.servesPool(t, "default")
	for _, role := range []auth.Role{auth.RoleClient, auth.RoleAgentWorker, auth.RoleSelector, auth.RoleMemory} {
		denied := make(chan error, 2)
		nc := natstest.ConnectAs(t, r.url, role, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
		if _, err := nc.SubscribeSync("rath.toolrunner.pool.default"); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("rath.toolrunner.pool.default", []byte(`{"event":{},"take_over":true}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-denied; !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("%s on a pool's subject: %v, want a permissions violation", role, err)
			}
		}
	}
}

// A session starts in the default pool, whichever runner its first call is
// delivered to (the pools' runners share the calls' consumer); with no
// runner of the default pool, a runner of another pool places it itself.
func TestSessionsStartInTheDefaultPool(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow(""), sandboxUIDs, onHost("host-a"))
	r.poolRunner(t, "gpu", "host-b")
	// Both runners up: a call the gpu runner gets before the default one
	// serves its pool would be placed on gpu (no runner of the default pool).
	r.servesPool(t, "gpu")
	r.servesPool(t, "default")
	for i := range 6 {
		id := fmt.Sprintf("d%d", i)
		r.startWith(t, id, nil)
		done := r.ok(t, id, "c1", "plain", "list_files", `{}`)
		if done.Sandbox.Pool != "" {
			t.Errorf("session %s started on pool %s", id, done.Sandbox.Pool)
		}
		if p := r.placements(t, id); len(p) != 1 || p[0].Host != "host-a" || p[0].Pool != "" {
			t.Errorf("session %s placements %+v, want one on host-a, default pool", id, p)
		}
	}
	if err := r.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	r.startWith(t, "alone", nil)
	if done := r.ok(t, "alone", "c1", "plain", "list_files", `{}`); done.Sandbox.Pool != "gpu" {
		t.Errorf("with no runner of the default pool, placed on pool %q", done.Sandbox.Pool)
	}
}
