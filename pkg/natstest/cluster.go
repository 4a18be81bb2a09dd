package natstest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
)

// Cluster is a JetStream cluster of real nats-server instances in the test's
// process: loopback client ports picked at random, routes between every
// node, file storage in a directory of each node's own, and the identities
// Start hands out (one set, accepted by every node). A node can be shut
// down and started again on the same store and ports, as an operator
// restarts a crashed server.
type Cluster struct {
	t     testing.TB
	name  string
	creds *auth.Set
	url   string // every node's client URL, comma-separated
	bin   string // the nats-server command the nodes run; "": in-process

	mu    sync.Mutex
	nodes []*node
}

// node is one server of a cluster and what it needs to start again.
type node struct {
	name        string
	dir         string
	clientPort  int
	clusterPort int
	httpPort    int            // monitoring, of a process node
	ns          *server.Server // an in-process node; nil while down
	proc        *nodeProc      // a process node; nil while down
}

// clusterReady bounds the wait for a meta leader (about 6 s on a 2-core
// machine) and for a restarted node to catch up.
const clusterReady = 90 * time.Second

// StartCluster runs an n-node JetStream cluster for the test and waits
// until it is ready (WaitReady). Every node shuts down when the test ends.
// Connect to it with ConnectAs(t, c.URL(), role): the URL lists every node,
// so a connection fails over when its node goes down.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := StartClusterNoWait(t, n)
	c.WaitReady()
	return c
}

// StartClusterNoWait starts the nodes of an n-node cluster and returns as
// soon as each accepts client connections, before the cluster has elected
// its meta leader: for tests of services that start on a forming cluster.
func StartClusterNoWait(t testing.TB, n int) *Cluster {
	t.Helper()
	return startNodesWith(t, n, n, "")
}

// StartClusterPartly starts up nodes of an n-node cluster (the others stay
// down until Restart starts them), without waiting for a meta leader.
func StartClusterPartly(t testing.TB, n, up int) *Cluster {
	t.Helper()
	return startNodesWith(t, n, up, "")
}

// startNodesWith starts up of n nodes, in this process (bin "") or as
// processes of the nats-server command bin.
func startNodesWith(t testing.TB, n, up int, bin string) *Cluster {
	t.Helper()
	if n < 1 || up > n {
		t.Fatalf("natstest: cluster of %d nodes, %d up", n, up)
	}
	base := t.TempDir()
	set, err := auth.Ensure(filepath.Join(base, "creds"))
	if err != nil {
		t.Fatalf("credentials: %v", err)
	}
	c := &Cluster{t: t, name: "rath-test", creds: set, bin: bin}
	urls := make([]string, n)
	ports := FreePorts(t, 3*n)
	for i := range n {
		nd := &node{
			name:        fmt.Sprintf("rath-%d", i),
			dir:         filepath.Join(base, fmt.Sprintf("n%d", i)),
			clientPort:  ports[3*i],
			clusterPort: ports[3*i+1],
			httpPort:    ports[3*i+2],
		}
		c.nodes = append(c.nodes, nd)
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", nd.clientPort)
	}
	c.url = strings.Join(urls, ",")
	entry := started{set: set}
	servers.Store(c.url, entry)
	for _, u := range urls {
		servers.Store(u, entry)
	}
	t.Cleanup(func() {
		servers.Delete(c.url)
		for _, u := range urls {
			servers.Delete(u)
		}
		for i := range c.nodes {
			c.Shutdown(i)
		}
		if c.bin != "" && t.Failed() {
			for _, nd := range c.nodes {
				t.Logf("natstest: log of node %s (all its runs), last lines:\n%s", nd.name, c.logTail(nd, 30))
			}
		}
	})
	for i := range up {
		c.Restart(i)
	}
	return c
}

// FreePorts returns n distinct loopback ports free now (all held open until
// every one is chosen, so none is handed out twice: ports chosen one at a
// time, each closed before the next, can repeat). A node's ports are fixed
// before it starts, so that routes can name them and a restarted node comes
// back where its peers and clients look for it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// URL lists every node's client URL, comma-separated, as nats.Connect
// takes them.
func (c *Cluster) URL() string { return c.url }

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Server returns node i, or nil while it is down or when it is a process
// (StartClusterProcesses).
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].ns
}

// ClientURL returns node i's client URL.
func (c *Cluster) ClientURL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].clientPort)
}

// NameOf returns the name of the node whose client URL is url, or "".
func (c *Cluster) NameOf(url string) string {
	for i, nd := range c.nodes {
		if c.ClientURL(i) == url {
			return nd.name
		}
	}
	return ""
}

// Name returns node i's server name, as JetStream's cluster info names it.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index returns the index of the node with the given server name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// Shutdown stops node i (as a crash does: its clients see the connection
// drop), keeping its store for Restart. Stopping a node that is down does
// nothing. A process node is stopped cleanly (SIGTERM); Kill crashes it.
func (c *Cluster) Shutdown(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	ns, p := nd.ns, nd.proc
	nd.ns, nd.proc = nil, nil
	c.mu.Unlock()
	if p != nil {
		stopProcess(p)
	}
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts node i (again) on its store directory and ports. It
// returns once the node accepts client connections; call WaitReady to wait
// until it rejoined JetStream. It returns the in-process server (nil for a
// process node).
func (c *Cluster) Restart(i int) *server.Server {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.ns != nil || nd.proc != nil {
		return nd.ns
	}
	if c.bin != "" {
		nd.proc = c.startProcess(nd)
		return nil
	}
	ns, err := server.NewServer(c.options(nd))
	if err != nil {
		c.t.Fatalf("natstest: node %s: %v", nd.name, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		c.t.Fatalf("natstest: node %s not accepting connections after 30s", nd.name)
	}
	nd.ns = ns
	return ns
}

// options are node nd's server options: Start's (embedded.Start with the
// identities) plus the cluster.
func (c *Cluster) options(nd *node) *server.Options {
	var routes []*url.URL
	for _, o := range c.nodes {
		if o != nd {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", o.clusterPort)})
		}
	}
	users := c.creds.Identities()
	nkeys := make([]*server.NkeyUser, 0, len(users))
	for _, u := range users {
		nkeys = append(nkeys, &server.NkeyUser{Nkey: u.PublicKey, Permissions: embedded.Permissions(u.Permissions())})
	}
	return &server.Options{
		ServerName: nd.name,
		Host:       "127.0.0.1",
		Port:       nd.clientPort,
		JetStream:  true,
		StoreDir:   nd.dir,
		MaxPayload: 8 << 20,
		NoSigs:     true,
		NoLog:      true,
		Nkeys:      nkeys,
		Cluster: server.ClusterOpts{
			Name: c.name,
			Host: "127.0.0.1",
			Port: nd.clusterPort,
		},
		Routes: routes,
	}
}

// Ready reports whether JetStream has a meta leader that sees every running
// node online, and every running node is current with it: streams and
// buckets can be placed on the nodes that are up.
func (c *Cluster) Ready() bool {
	ok, _ := c.ready()
	return ok
}

// ready is Ready, and when not, why, if known.
func (c *Cluster) ready() (bool, string) {
	if c.bin != "" {
		return c.processesReady()
	}
	return c.inProcessReady(), ""
}

func (c *Cluster) inProcessReady() bool {
	c.mu.Lock()
	var up []*server.Server
	for _, nd := range c.nodes {
		if nd.ns != nil {
			up = append(up, nd.ns)
		}
	}
	c.mu.Unlock()
	leaders := 0
	for _, ns := range up {
		if !ns.JetStreamIsCurrent() {
			return false
		}
		if ns.JetStreamIsLeader() {
			leaders++
			if len(ns.JetStreamClusterPeers()) < len(up) {
				return false
			}
		}
	}
	return leaders == 1
}

// WaitReady polls the nodes' JetStream state until Ready, failing the test
// after a minute and a half.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(clusterReady)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := c.ready()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: cluster not ready after %s: %s", clusterReady, why)
		}
		<-tick.C
	}
}
