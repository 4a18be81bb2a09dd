package natstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/proctest"
)

// natsServerModule is the module whose command the process nodes run: the
// nats-server this repository embeds, at the version go.mod requires.
const natsServerModule = "github.com/nats-io/nats-server/v2"

// StartClusterProcesses runs an n-node JetStream cluster as n nats-server
// OS processes (the real command, built once from the module go.mod
// requires) and waits until it is ready. Its nodes can be lost as a
// machine loses them: Kill (SIGKILL, no clean shutdown), Pause and Resume
// (SIGSTOP and SIGCONT: a node that hangs with its connections open), and
// Restart on the same store and ports. Everything else is as StartCluster:
// the identities, their permissions (from a configuration file, as
// deploy/nats-server.conf gives them), ConnectAs on URL and WaitReady. Server
// returns nil for its nodes. The processes die with the test's process.
func StartClusterProcesses(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := natsServerBinary()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	c := startNodesWith(t, n, n, bin)
	c.WaitReady()
	return c
}

// nodeProc is a running nats-server process of a node.
type nodeProc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	paused bool
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// natsServerBinary returns the nats-server command of the version go.mod
// requires, building it the first time into a directory named after that
// version (kept for later test binaries: a build takes seconds, and the
// binary is the same for every run of one version).
func natsServerBinary() (string, error) {
	binOnce.Do(func() {
		version := "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, d := range bi.Deps {
				if d.Path == natsServerModule {
					version = d.Version
					if d.Replace != nil {
						version = "replaced"
					}
				}
			}
		}
		dir := filepath.Join(os.TempDir(), "rath-natstest-nats-server-"+version)
		binPath = filepath.Join(dir, "nats-server")
		if version != "replaced" && version != "unknown" {
			if _, err := os.Stat(binPath); err == nil {
				return
			}
		}
		if binErr = os.MkdirAll(dir, 0o755); binErr != nil {
			return
		}
		// Built beside and renamed into place, so that test binaries
		// building at once never run a half-written file.
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			binErr = err
			return
		}
		defer os.RemoveAll(tmp)
		if binErr = proctest.BuildCommand(tmp, natsServerModule); binErr != nil {
			return
		}
		binErr = os.Rename(filepath.Join(tmp, "nats-server"), binPath)
	})
	return binPath, binErr
}

// config is node nd's nats-server configuration file: its name, addresses
// and store, the cluster's routes, and every identity with its role's
// permissions in one JetStream account, as deploy/nats-server.conf has
// them.
func (c *Cluster) config(nd *node) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nmax_payload: 8MB\n", nd.name, nd.clientPort, nd.httpPort)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(nd.dir, "jetstream"))
	fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  routes: [\n", c.name, nd.clusterPort)
	for _, o := range c.nodes {
		if o != nd {
			fmt.Fprintf(&b, "    nats-route://127.0.0.1:%d\n", o.clusterPort)
		}
	}
	fmt.Fprintf(&b, "  ]\n}\naccounts {\n  %s {\n    jetstream: enabled\n    users: [\n", auth.Account)
	for _, id := range c.creds.Identities() {
		b.Write(auth.UserBlock(id))
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.Bytes()
}

// startProcess starts node nd's process and returns once it accepts client
// connections.
func (c *Cluster) startProcess(nd *node) *nodeProc {
	c.t.Helper()
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		c.t.Fatalf("natstest: node %s: %v", nd.name, err)
	}
	conf := filepath.Join(nd.dir, "nats-server.conf")
	if err := os.WriteFile(conf, c.config(nd), 0o600); err != nil {
		c.t.Fatalf("natstest: node %s: %v", nd.name, err)
	}
	logf, err := os.OpenFile(c.logPath(nd), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("natstest: node %s: %v", nd.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(c.bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A node outlives no test: it dies with the test's process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("natstest: start node %s: %v", nd.name, err)
	}
	p := &nodeProc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, _ := c.health(nd, "?js-server-only=true"); ok {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-p.exited
			c.t.Fatalf("natstest: node %s not accepting connections after 30s:\n%s", nd.name, c.logTail(nd, 20))
		}
		select {
		case <-p.exited:
			c.t.Fatalf("natstest: node %s exited while starting:\n%s", nd.name, c.logTail(nd, 20))
		case <-tick.C:
		}
	}
	return p
}

func (c *Cluster) logPath(nd *node) string { return filepath.Join(nd.dir, "nats-server.log") }

// logTail is the last lines of node nd's log, over all its runs.
func (c *Cluster) logTail(nd *node, lines int) string {
	raw, err := os.ReadFile(c.logPath(nd))
	if err != nil {
		return err.Error()
	}
	l := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// monitor is a short-lived client of the nodes' monitoring endpoints.
var monitor = &http.Client{Timeout: time.Second}

// health reports whether node nd's /healthz answers OK with the query,
// and what it answered when not.
func (c *Cluster) health(nd *node, query string) (bool, string) {
	resp, err := monitor.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz%s", nd.httpPort, query))
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return true, ""
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return false, fmt.Sprintf("/healthz: %s %s", resp.Status, bytes.TrimSpace(body))
}

// processesReady is Ready of a cluster of processes: every running node is
// healthy (JetStream current with the meta leader, its streams and
// consumers current), and the meta leader sees every running node current.
// When not, it says why.
func (c *Cluster) processesReady() (bool, string) {
	c.mu.Lock()
	var up []*node
	for _, nd := range c.nodes {
		if nd.proc != nil && !nd.proc.paused {
			up = append(up, nd)
		}
	}
	c.mu.Unlock()
	if len(up) == 0 {
		return false, "no node running"
	}
	for _, nd := range up {
		if ok, why := c.health(nd, ""); !ok {
			return false, fmt.Sprintf("node %s: %s", nd.name, why)
		}
	}
	// Only the meta leader knows whether its followers are current: ask
	// one node who leads, then the leader.
	info, err := metaInfo(up[0])
	if err != nil {
		return false, err.Error()
	}
	if info.Leader != up[0].name {
		i := c.Index(info.Leader)
		if i < 0 || !slices.Contains(up, c.nodes[i]) {
			return false, fmt.Sprintf("meta leader %q is not a running node", info.Leader)
		}
		if info, err = metaInfo(c.nodes[i]); err != nil {
			return false, err.Error()
		}
	}
	current := map[string]bool{info.Leader: true}
	for _, p := range info.Replicas {
		if p.Current && !p.Offline {
			current[p.Name] = true
		}
	}
	for _, nd := range up {
		if !current[nd.name] {
			return false, fmt.Sprintf("meta leader %s does not see %s current", info.Leader, nd.name)
		}
	}
	return true, ""
}

// metaInfo is node nd's view of the JetStream meta group (/jsz).
func metaInfo(nd *node) (*server.MetaClusterInfo, error) {
	resp, err := monitor.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", nd.httpPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var info server.JSInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return nil, fmt.Errorf("node %s /jsz: %w", nd.name, err)
	}
	if info.Meta == nil || info.Meta.Leader == "" {
		return nil, fmt.Errorf("no meta leader known to %s", nd.name)
	}
	return info.Meta, nil
}

// process returns node i's process, failing the test if the cluster's
// nodes are not processes or node i is down.
func (c *Cluster) process(i int, what string) *nodeProc {
	c.t.Helper()
	if c.bin == "" {
		c.t.Fatalf("natstest: %s node %d: only the nodes of StartClusterProcesses are processes", what, i)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.nodes[i].proc
	if p == nil {
		c.t.Fatalf("natstest: %s node %s: it is down", what, c.nodes[i].name)
	}
	return p
}

// Kill kills node i's process with SIGKILL, as a crash or the OOM killer
// does: no clean shutdown, no leader handover, whatever it had not written
// to its files is lost. Its store stays for Restart.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	p := c.process(i, "kill")
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatalf("natstest: kill node %s: %v", c.nodes[i].name, err)
	}
	<-p.exited
	c.mu.Lock()
	c.nodes[i].proc = nil
	c.mu.Unlock()
}

// Pause stops node i's process with SIGSTOP: it answers nothing, and its
// connections, routes included, stay open, as a node that hangs (a long GC
// pause, a stalled disk, a frozen VM) looks to its peers and clients.
func (c *Cluster) Pause(i int) {
	c.t.Helper()
	p := c.process(i, "pause")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("natstest: pause node %s: %v", c.nodes[i].name, err)
	}
	c.mu.Lock()
	p.paused = true
	c.mu.Unlock()
}

// Resume continues node i's process, paused by Pause, with SIGCONT.
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	p := c.process(i, "resume")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("natstest: resume node %s: %v", c.nodes[i].name, err)
	}
	c.mu.Lock()
	p.paused = false
	c.mu.Unlock()
}

// stopProcess stops a node's process cleanly (SIGTERM, after SIGCONT if
// it is paused), killing it if it has not exited within 30 s.
func stopProcess(p *nodeProc) {
	if p.paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
