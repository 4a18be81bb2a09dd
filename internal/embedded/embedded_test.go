package embedded_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/events"
)

// A tenant's user added while the server runs is refused until SetUsers
// reloads the identities, then connects with its own permissions; the
// services' connections stay up across the reload.
func TestSetUsersAddsATenantUserLive(t *testing.T) {
	dir := t.TempDir()
	set, err := auth.Ensure(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := embedded.Config{Listen: "127.0.0.1:0", StoreDir: dir, Users: set.Identities()}
	ns, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	connect := func(path string) (*nats.Conn, error) {
		opts, _, err := auth.Options(path)
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(ns.ClientURL(), opts...)
	}
	ledger, err := connect(set.Path(auth.RoleLedger))
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()

	alice := events.Principal{Tenant: "acme", User: "alice"}
	id, err := set.AddUser(alice)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := connect(id.Path); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("a user the server was not given connects: %v", err)
	}
	if err := embedded.SetUsers(ns, cfg, set.Identities()); err != nil {
		t.Fatal(err)
	}
	nc, err := connect(id.Path)
	if err != nil {
		t.Fatalf("alice after the reload: %v", err)
	}
	defer nc.Close()
	// Her permissions are a client's of acme: her replies, not bob's.
	if _, err := nc.SubscribeSync("_INBOX.acme.alice.x"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.LastError(); err != nil {
		t.Fatalf("alice subscribes to her replies: %v", err)
	}
	if !ledger.IsConnected() {
		t.Fatal("the ledger's connection did not survive the reload")
	}
	if err := embedded.SetUsers(ns, cfg, nil); err == nil {
		t.Fatal("SetUsers with no users would open the server to anyone")
	}
}

// A user removed from the identities is cut off: its open connection is
// closed by the reload and it cannot connect again.
func TestSetUsersCutsARemovedUser(t *testing.T) {
	dir := t.TempDir()
	set, err := auth.Ensure(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := set.AddUser(events.Principal{Tenant: "acme", User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := embedded.Config{Listen: "127.0.0.1:0", StoreDir: dir, Users: set.Identities()}
	ns, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	opts, _, err := auth.Options(id.Path)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(ns.ClientURL(), append(opts, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	without, err := auth.Ensure(filepath.Join(dir, "creds")) // the same roles, alice's file still there
	if err != nil {
		t.Fatal(err)
	}
	var users []auth.Identity
	for _, u := range without.Identities() {
		if u.Principal != id.Principal {
			users = append(users, u)
		}
	}
	if err := embedded.SetUsers(ns, cfg, users); err != nil {
		t.Fatal(err)
	}
	<-closed
	if nc2, err := nats.Connect(ns.ClientURL(), opts...); !errors.Is(err, nats.ErrAuthorization) {
		if nc2 != nil {
			nc2.Close()
		}
		t.Fatalf("a removed user connects again: %v", err)
	}
}
