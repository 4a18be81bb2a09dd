package rath_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// rig is a whole Rath for the examples, as rath up runs it, in a temporary
// directory: a program connects to rath up instead (client.nk for the
// Session API, agent-worker.nk for the agents it serves).
type rig struct {
	rt     *runtime.Runtime
	c      *client.Client
	agents *nats.Conn // the agent worker's identity, which served agents use
	dir    string
}

// startRig starts the embedded server, the ledger, the memory service and
// the agent loop (selector, agent worker, tool runner on the local
// backend, which works everywhere).
func startRig() (*rig, error) {
	dir, err := os.MkdirTemp("", "rath-example")
	if err != nil {
		return nil, err
	}
	cfg := runtime.DefaultConfig().Private(dir)
	cfg.ToolRunner.Backend = events.BackendLocal
	rt, err := runtime.Start(context.Background(), cfg, runtime.WithClient("example"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start rath: %w", err)
	}
	rt.StartLoop()
	r := &rig{rt: rt, dir: dir}
	if r.c, err = client.New(rt.Conn); err != nil {
		r.stop()
		return nil, err
	}
	opts, _, err := client.Credentials(rt.Identities.Path(auth.RoleAgentWorker))
	if err != nil {
		r.stop()
		return nil, err
	}
	if r.agents, err = nats.Connect(rt.URL, append(opts, nats.Name("served-agents"))...); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// serve runs fn (an agent server) until the rig stops.
func (r *rig) serve(fn func(ctx context.Context, nc *nats.Conn) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx, r.agents); err != nil {
			fmt.Fprintln(os.Stderr, "agent server:", err)
		}
	}()
	return func() { cancel(); <-done }
}

func (r *rig) stop() {
	if r.agents != nil {
		r.agents.Drain()
	}
	if err := r.rt.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop rath:", err)
	}
	os.RemoveAll(r.dir)
}

// testdata names a file of testdata.
func testdata(name string) string { return filepath.Join("testdata", name) }
