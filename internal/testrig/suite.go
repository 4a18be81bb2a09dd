package testrig

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// SuiteConfig is the configuration the end-to-end tests run the services
// with: role credentials for url, data and workspaces in temporary
// directories, seeds as the workspaces' seed directory, and the local
// sandbox backend whatever this machine offers (those tests are about the
// loop; the placement tests of services/tool-runner/service run bwrap).
func SuiteConfig(t testing.TB, url, seeds string) runtime.Config {
	cfg := runtime.DefaultConfig()
	cfg.NATSURL, cfg.CredsDir, cfg.Data = url, natstest.CredsDir(t, url), t.TempDir()
	cfg.ToolRunner.Backend = events.BackendLocal
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	cfg.ToolRunner.Seeds = seeds
	return cfg
}

// Suite runs the services through internal/runtime, each connected in
// process to ns as its own role, so that the server enforces its
// permissions. They stop when the test ends, the agent loop before the
// ledger, and must stop without an error or a permission violation.
func Suite(t testing.TB, ns *server.Server, cfg runtime.Config, opts ...runtime.Option) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.Start(context.Background(), cfg, append(opts, runtime.WithServer(ns))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Stop(); err != nil {
			t.Errorf("services: %v", err)
		}
		for _, err := range rt.Violations() {
			t.Errorf("permission violation: %v", err)
		}
	})
	rt.StartLoop()
	return rt
}

// Eventually polls cond until it holds or timeout passes, failing the test
// with what and cond's last state then, and returns how long it took. For
// conditions no event announces (a process's registration, a count across
// processes); a session's event is awaited with WaitFor.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s (last state: %s)", what, timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // pacing the polls
	}
}
