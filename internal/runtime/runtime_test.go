package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// testConfig is a runtime on a free port, storing under t's directories,
// its tools on the local backend.
func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Data = filepath.Join(t.TempDir(), "data")
	cfg.Listen = "127.0.0.1:0"
	cfg.ToolRunner.Backend = events.BackendLocal
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	return cfg
}

// The whole runtime starts, answers as a ledger, runs its loop, and stops
// cleanly, with no permission violation on any connection; a second start
// on the same data keeps the signing key.
func TestStartStop(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	rt, err := Start(ctx, cfg, WithClient("runtime-test"))
	if err != nil {
		t.Fatal(err)
	}
	rt.StartLoop()
	if rt.Server == nil || rt.Conn == nil || rt.Creds == "" || rt.KeyID == "" {
		t.Fatalf("runtime %+v: want a server, a client connection, its credentials and a key", rt)
	}
	c, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "s1", events.SessionStarted{Task: "t"}); err != nil {
		t.Fatalf("start a session: %v", err)
	}
	if err := rt.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	select {
	case <-rt.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	for _, err := range rt.Violations() {
		t.Errorf("permission violation: %v", err)
	}
	if err := rt.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	again, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if again.KeyID != rt.KeyID {
		t.Errorf("signing key after a restart: %s, want %s", again.KeyID, rt.KeyID)
	}
}

// Against a server named by URL, with WithRoles, only those services run:
// the ledger's requests go unanswered; and a ledger that runs without the
// memory service (its group has no other service) stays up.
func TestExternalServerSomeRoles(t *testing.T) {
	ns := natstest.StartServer(t, t.TempDir())
	cfg := testConfig(t)
	cfg.NATSURL, cfg.CredsDir = ns.ClientURL(), natstest.CredsDir(t, ns.ClientURL())
	rt, err := Start(context.Background(), cfg, WithServer(ns), WithClient("runtime-test"),
		WithRoles(auth.RoleSelector, auth.RoleAgentWorker, auth.RoleToolRunner))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	if rt.Server != nil || rt.KeyID != "" {
		t.Errorf("runtime %+v: want no server of its own and no ledger key", rt)
	}
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.Keys(ctx); err == nil {
		t.Error("a ledger answered, want none")
	}
	rt.StartLoop()
	if err := rt.StopLoop(); err != nil {
		t.Errorf("StopLoop: %v", err)
	}

	cfg.Data = t.TempDir()
	lrt, err := Start(context.Background(), cfg, WithServer(ns), WithClient("runtime-test"), WithRoles(auth.RoleLedger))
	if err != nil {
		t.Fatal(err)
	}
	defer lrt.Stop()
	lc, err := client.New(lrt.Conn, client.WithRetryFor(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Start(context.Background(), "s1", events.SessionStarted{Task: "t"}); err != nil {
		t.Errorf("the ledger alone: %v", err)
	}
}

// A failing service stops the others of its group (and the other way
// round): serve returns once all have returned, and Done closes.
func TestServeStopsAllWhenOneFails(t *testing.T) {
	boom := errors.New("boom")
	stopped := make(chan struct{})
	noConn := func(auth.Role) (*nats.Conn, func(), error) { return nil, func() {}, nil }
	err := serve(context.Background(), noConn,
		runner{run: func(ctx context.Context, _ *nats.Conn) error {
			<-ctx.Done()
			close(stopped)
			return nil
		}},
		runner{role: auth.RoleSelector, run: func(context.Context, *nats.Conn) error { return boom }},
	)
	if !errors.Is(err, boom) || err.Error() != "selector: boom" {
		t.Errorf("serve returned %v, want %v named by its role", err, boom)
	}
	select {
	case <-stopped:
	default:
		t.Error("serve returned before the other runner stopped")
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	cfg.Sync, cfg.Listen, cfg.Ledger.Ledger.SnapshotEvery = "sometimes", "nowhere", 1
	err := cfg.Validate()
	for _, want := range []string{"--sync", "listen address", "snapshot interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a problem with %q", err, want)
		}
	}
}

// A private runtime keeps everything under its directory and takes a free
// port, whatever the configuration it starts from named.
func TestPrivate(t *testing.T) {
	base := DefaultConfig()
	base.NATSURL, base.CredsDir = "nats://elsewhere:4222", "/creds"
	cfg := base.Private("/d")
	if cfg.NATSURL != "" || cfg.CredsPath() != "/d/jetstream/creds" || cfg.Data != "/d/jetstream" || cfg.Listen != "127.0.0.1:0" ||
		cfg.ToolRunner.Sandbox.Root != "/d/workspaces" || cfg.LedgerConfig().KeyFile != "/d/jetstream/keys/ledger.key" {
		t.Errorf("Private: %+v", cfg)
	}
}
