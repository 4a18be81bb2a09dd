// Package natstest starts a real embedded NATS server with JetStream for tests:
// file storage in a temporary directory, a random loopback port, and the
// same authentication as rath up: one identity per role (ledger, selector,
// agent-worker, tool-runner, memory-svc, admin, client), each with its
// role's permissions, and no anonymous access.
//
// Start and Connect return connections of the admin role, which may do
// anything, so that a test can set up and inspect whatever it needs;
// ConnectAs returns a connection of one role, with that role's permissions
// enforced by the server. Wire services under test with ConnectAs, so that a
// permission a service lacks fails the test.
//
// StartCluster runs a JetStream cluster of several such servers in the
// test's process, with the same identities, for replicated (R3) streams and
// a node's loss and restart; StartClusterProcesses runs the same cluster as
// nats-server processes, so that a node can be killed with SIGKILL or
// stopped with SIGSTOP.
package natstest

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// servers maps a running server's client URL to it and its identities.
var servers sync.Map // string -> started

type started struct {
	ns  *server.Server
	cfg embedded.Config
	set *auth.Set
}

// users serialises adding tenants' users to a server's identities.
var users sync.Mutex

// Start runs a server for the test and returns it with a connected client
// of the admin role. Both are shut down when the test ends.
func Start(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	ns := StartServer(t, t.TempDir())
	return ns, Connect(t, ns.ClientURL())
}

// StartServer runs a server on storeDir; restarting on the same directory
// recovers what an earlier server stored, and its identities: the
// credentials files are in storeDir/creds, as rath up keeps them.
func StartServer(t testing.TB, storeDir string) *server.Server {
	t.Helper()
	set, err := auth.Ensure(filepath.Join(storeDir, "creds"))
	if err != nil {
		t.Fatalf("credentials: %v", err)
	}
	cfg := embedded.Config{Listen: "127.0.0.1:0", StoreDir: storeDir, Users: set.Identities()}
	ns, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	url := ns.ClientURL()
	servers.Store(url, started{ns: ns, cfg: cfg, set: set})
	t.Cleanup(func() {
		servers.Delete(url)
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// CredsDir returns the credentials directory of the server at url, laid out
// as rath up's: <role>.nk for each role, tenants/<tenant>/<user>.nk
// for tenants' users. Pass it (or CredsFile) to processes a test starts.
func CredsDir(t testing.TB, url string) string {
	t.Helper()
	dir, ok := Lookup(url)
	if !ok {
		t.Fatalf("natstest: no server started at %s", url)
	}
	return dir
}

// CredsFile returns the credentials file of a role (its name, such as
// "tool-runner" or "client") on the server at url.
func CredsFile[R ~string](t testing.TB, url string, role R) string {
	t.Helper()
	return filepath.Join(CredsDir(t, url), auth.FileName(auth.Role(role)))
}

// Lookup returns the credentials directory of the server at url, if
// natstest runs it.
func Lookup(url string) (string, bool) {
	v, ok := servers.Load(url)
	if !ok {
		return "", false
	}
	return v.(started).set.Dir, true
}

// Connect opens a client connection of the admin role, closed when the test
// ends. A server natstest did not start is connected to without credentials.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	if _, ok := servers.Load(url); !ok {
		return dial(t, url, "", nil)
	}
	return ConnectAs(t, url, auth.RoleAdmin)
}

// ConnectAs opens a connection of the given role (its name, such as
// "tool-runner" or "client": a credentials file's base name) to the server
// at url, closed when the test ends. A permission violation the server
// reports on it fails the test, unless opts set their own nats.ErrorHandler.
// A cluster's URL (Cluster.URL) connects to any of its nodes.
func ConnectAs[R ~string](t testing.TB, url string, role R, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return dial(t, url, auth.Role(role), opts)
}

func dial(t testing.TB, url string, role auth.Role, extra []nats.Option) *nats.Conn {
	t.Helper()
	if role == "" {
		return dialFile(t, url, "", "", extra)
	}
	return dialFile(t, url, CredsFile(t, url, role), string(role), extra)
}

// dialFile connects with the credentials file at path (none: anonymously);
// name names the identity in test failures.
func dialFile(t testing.TB, url, path, name string, extra []nats.Option) *nats.Conn {
	t.Helper()
	// Connections notice a frozen node as Rath's services do.
	opts := append([]nats.Option{nats.MaxReconnects(-1)}, client.KeepAlive()...)
	if path != "" {
		cred, _, err := auth.Options(path)
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		var (
			mu         sync.Mutex
			violations []error
		)
		opts = append(opts, cred...)
		opts = append(opts, nats.Name("natstest-"+name),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrPermissionViolation) {
					mu.Lock()
					violations = append(violations, err)
					mu.Unlock()
				}
			}))
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, err := range violations {
				t.Errorf("natstest: %s: %v", name, err)
			}
		})
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		t.Fatalf("connect to %s as %q: %v", url, name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ConnectUser opens a connection of a tenant's user to the server at url,
// closed when the test ends: the identity is created (in the server's
// credentials directory, as rath up's SIGHUP would have it) and, unless
// AddUsers already made it known, the server reloaded to accept it, with a
// client's permissions scoped to that tenant and user. A permission
// violation the server reports on it fails the test, unless opts set their
// own nats.ErrorHandler.
//
// A reload races (go test -race) with the server answering a direct get at
// the same time: nats-server v2.15 reads its options without their lock
// there. A test that needs a user once services run names it to AddUsers
// before starting them.
func ConnectUser(t testing.TB, url string, p events.Principal, opts ...nats.Option) *nats.Conn {
	t.Helper()
	ids := addUsers(t, url, p)
	return dialFile(t, url, ids[0].Path, p.String(), opts)
}

// AddUsers makes tenants' users known to the server at url in one reload,
// so that a later ConnectUser of any of them connects without reloading the
// server. Call it before starting services (see ConnectUser).
func AddUsers(t testing.TB, url string, ps ...events.Principal) {
	t.Helper()
	addUsers(t, url, ps...)
}

// addUsers adds ps to the server's identities, reloading it only if one of
// them was new, and returns their identities in order.
func addUsers(t testing.TB, url string, ps ...events.Principal) []auth.Identity {
	t.Helper()
	v, ok := servers.Load(url)
	if !ok {
		t.Fatalf("natstest: no server started at %s", url)
	}
	s := v.(started)
	if s.ns == nil {
		t.Fatalf("natstest: users on a cluster (%s) are not supported: adding one reloads one server's identities", url)
	}
	users.Lock()
	defer users.Unlock()
	known := map[string]bool{}
	for _, id := range s.set.Identities() {
		known[id.PublicKey] = true
	}
	ids := make([]auth.Identity, len(ps))
	fresh := false
	for i, p := range ps {
		id, err := s.set.AddUser(p)
		if err != nil {
			t.Fatalf("natstest: user %s: %v", p, err)
		}
		ids[i], fresh = id, fresh || !known[id.PublicKey]
	}
	if fresh {
		if err := embedded.SetUsers(s.ns, s.cfg, s.set.Identities()); err != nil {
			t.Fatalf("natstest: users %v: %v", ps, err)
		}
	}
	return ids
}
