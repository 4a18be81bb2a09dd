package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// TestComposeClusterForms starts the three NATS nodes of docker-compose.yml in
// this process, each from its configuration as the container loads it, with
// only the addresses moved to loopback (the containers' host names do not
// resolve here): the nodes form one JetStream cluster, the ledger's minted
// identity creates an R3 stream and writes to it, and the client's identity
// may not touch JetStream. It runs no Rath service (that is issue 14 item 4).
func TestComposeClusterForms(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	m := credentials(t)
	p, err := loadCompose(repoRoot, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, s := range p.Services {
		if len(s.Image) > 5 && s.Image[:5] == "nats:" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) != natsNodes {
		t.Fatalf("NATS services %v, want %d", names, natsNodes)
	}
	// Chosen together: ports chosen one at a time, each closed before the
	// next, can repeat, and a node whose cluster port its peer took never
	// becomes ready (seen once in CI: "nats-2 not ready").
	clusterPorts := map[string]int{}
	for i, port := range natstest.FreePorts(t, len(names)) {
		clusterPorts[names[i]] = port
	}
	var servers []*server.Server
	for _, n := range names {
		s := p.Services[n]
		conf, errs := natsServerView(t, "service "+n, s)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		for k, v := range m.nkeys {
			t.Setenv(k, v)
		}
		t.Setenv("NATS_SERVER_NAME", *s.Environment["NATS_SERVER_NAME"])
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", clusterPorts[n]
		for i, r := range opts.Routes {
			port, ok := clusterPorts[r.Hostname()]
			if !ok {
				t.Fatalf("%s: route %s names no NATS service", n, r)
			}
			opts.Routes[i] = &url.URL{Scheme: r.Scheme, Host: fmt.Sprintf("127.0.0.1:%d", port)}
		}
		opts.StoreDir = filepath.Join(t.TempDir(), "jetstream")
		opts.NoSigs, opts.NoLog = true, true
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		go srv.Start()
		t.Cleanup(srv.Shutdown)
		servers = append(servers, srv)
	}
	for i, srv := range servers {
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("%s not ready after 30 s (client listener %v, cluster listener %v on port %d)",
				names[i], srv.Addr(), srv.ClusterAddr(), clusterPorts[names[i]])
		}
	}
	checkClusterServes(t, m, servers)
}

// checkClusterServes checks that servers form one JetStream cluster enforcing
// internal/auth's table: the minted ledger identity creates an R3 stream and
// appends to it, the client identity is refused JetStream, admin deletes the
// stream.
func checkClusterServes(t *testing.T, m minted, servers []*server.Server) {
	t.Helper()
	connect := func(r auth.Role, extra ...nats.Option) *nats.Conn {
		t.Helper()
		opts, _, err := auth.Options(filepath.Join(m.dir, auth.FileName(r)))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, extra...)
		nc, err := nats.Connect(servers[0].ClientURL(), opts...)
		if err != nil {
			t.Fatalf("connect as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	js, err := jetstream.New(connect(auth.RoleLedger))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "RATH_DEPLOY_CHECK", Subjects: []string{events.SessionsWildcard[:len(events.SessionsWildcard)-1] + "deploycheck.>"}, Replicas: natsNodes}
	var stream jetstream.Stream
	for stream == nil { // the cluster elects its meta leader first; until then requests go unanswered
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		s, err := js.CreateStream(attempt, cfg)
		cancelAttempt()
		switch {
		case err == nil:
			stream = s
		case ctx.Err() != nil:
			t.Fatalf("no R3 stream within a minute (the cluster did not form?): %v", err)
		default:
			time.Sleep(250 * time.Millisecond)
		}
	}
	if _, err := js.Publish(ctx, cfg.Subjects[0][:len(cfg.Subjects[0])-1]+"x", []byte("ok")); err != nil {
		t.Fatalf("the ledger's identity cannot append: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != natsNodes-1 || info.State.Msgs != 1 {
		t.Errorf("stream on %+v with %d messages, want a leader and %d replicas holding 1", info.Cluster, info.State.Msgs, natsNodes-1)
	}

	violations := make(chan error, 8)
	client, err := jetstream.New(connect(auth.RoleClient, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := client.CreateStream(short, jetstream.StreamConfig{Name: "RATH_CLIENT_STREAM", Subjects: []string{"x.>"}}); err == nil {
		t.Error("the client identity created a stream: the cluster does not enforce internal/auth's table")
	}
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("the client's stream creation failed with %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("no permissions violation for the client's stream creation")
	}
	admin, err := jetstream.New(connect(auth.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteStream(ctx, cfg.Name); err != nil {
		t.Errorf("admin cannot delete the stream: %v", err)
	}
}

// TestOneHostClusterForms starts three nodes from deploy/nats-one-host.conf as
// docs/operations.md ("Three nodes on one host") starts them: one file, each
// node's name, ports, store and the shared routes from the environment. The
// ports are free ones rather than the doc's 4222-4224, 6222-6224 and
// 8222-8224, which a developer's rath up may hold. The nodes form one
// JetStream cluster that enforces the roles' permissions.
func TestOneHostClusterForms(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	m := credentials(t)
	for k, v := range m.nkeys {
		t.Setenv(k, v)
	}
	conf := filepath.Join(repoRoot, "deploy", "nats-one-host.conf")
	// Chosen together, so that no two nodes get the same port.
	ports := natstest.FreePorts(t, 3*natsNodes)
	client, cluster, monitor := ports[:natsNodes], ports[natsNodes:2*natsNodes], ports[2*natsNodes:]
	routes := make([]string, natsNodes)
	for i, p := range cluster {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	t.Setenv("NATS_ROUTES", "["+strings.Join(routes, ", ")+"]")
	var servers []*server.Server
	for i := range natsNodes {
		name := fmt.Sprintf("nats-%d", i+1)
		store := filepath.Join(t.TempDir(), name)
		t.Setenv("NATS_SERVER_NAME", name)
		t.Setenv("NATS_PORT", strconv.Itoa(client[i]))
		t.Setenv("NATS_CLUSTER_PORT", strconv.Itoa(cluster[i]))
		t.Setenv("NATS_HTTP_PORT", strconv.Itoa(monitor[i]))
		t.Setenv("NATS_STORE_DIR", store)
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// What the file must take from the environment, and keep on loopback.
		if opts.ServerName != name || opts.Port != client[i] || opts.Cluster.Port != cluster[i] ||
			opts.HTTPPort != monitor[i] || opts.StoreDir != store || opts.Cluster.Name != "rath" {
			t.Fatalf("%s: loaded as name %q, ports %d/%d/%d, store %q, cluster %q; want %q, %d/%d/%d, %q, rath",
				name, opts.ServerName, opts.Port, opts.Cluster.Port, opts.HTTPPort, opts.StoreDir, opts.Cluster.Name,
				name, client[i], cluster[i], monitor[i], store)
		}
		if opts.Host != "127.0.0.1" || opts.Cluster.Host != "127.0.0.1" {
			t.Errorf("%s: listens on %q, routes on %q; want loopback only", name, opts.Host, opts.Cluster.Host)
		}
		if len(opts.Routes) != natsNodes {
			t.Fatalf("%s: routes %v, want the %d nodes of NATS_ROUTES", name, opts.Routes, natsNodes)
		}
		if opts.MaxPayload != maxPayload || !opts.JetStream {
			t.Errorf("%s: max_payload %d, JetStream %v; want %d and JetStream", name, opts.MaxPayload, opts.JetStream, maxPayload)
		}
		opts.NoSigs, opts.NoLog = true, true
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		go srv.Start()
		t.Cleanup(srv.Shutdown)
		servers = append(servers, srv)
	}
	for i, srv := range servers {
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats-%d not ready after 30 s (client listener %v, cluster listener %v)", i+1, srv.Addr(), srv.ClusterAddr())
		}
	}
	checkClusterServes(t, m, servers)
}
