// Package testsuite runs Rath's services in a test as rath up wires them,
// each connected in process as its own role: the end-to-end tests' rig.
// It is apart from testrig because it links every service, and the
// services' own tests use testrig.
package testsuite

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// Config is the configuration the end-to-end tests run the services
// with: role credentials for url, data and workspaces in temporary
// directories, and the local
// sandbox backend whatever this machine offers (those tests are about the
// loop; the placement tests of services/tool-runner/service run bwrap).
func Config(t testing.TB, url string) runtime.Config {
	cfg := runtime.DefaultConfig()
	cfg.NATSURL, cfg.CredsDir, cfg.Data = url, natstest.CredsDir(t, url), t.TempDir()
	cfg.ToolRunner.Backend = events.BackendLocal
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	return cfg
}

// Start runs the services through internal/runtime, each connected in
// process to ns as its own role, so that the server enforces its
// permissions. They stop when the test ends, the agent loop before the
// ledger, and must stop without an error or a permission violation.
func Start(t testing.TB, ns *server.Server, cfg runtime.Config, opts ...runtime.Option) *runtime.Runtime {
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
