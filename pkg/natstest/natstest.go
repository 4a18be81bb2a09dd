// Package natstest starts a real embedded NATS server with JetStream for tests:
// file storage in a temporary directory, a random loopback port.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/embedded"
)

// Start runs a server for the test and returns it with a connected client.
// Both are shut down when the test ends.
func Start(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	ns := StartServer(t, t.TempDir())
	return ns, Connect(t, ns.ClientURL())
}

// StartServer runs a server on storeDir; restarting on the same directory
// recovers what an earlier server stored.
func StartServer(t testing.TB, storeDir string) *server.Server {
	t.Helper()
	ns, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", StoreDir: storeDir})
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// Connect opens a client connection closed when the test ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
