package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openrath/rath/internal/egress"
)

// A sandbox has no network but its own loopback. A command allowed named
// hosts (Cmd.Hosts) reaches them, and nothing else, through an HTTP proxy of
// the runner's:
//
//	command ─HTTP(S)_PROXY→ 127.0.0.1:3128 (inside) ─ forwarder ─unix socket─ proxy (runner) ─TCP→ host
//
// The forwarder is the runner's own binary, shown read-only inside and run
// as the sandbox's first process (forwardFlag); it listens on the sandbox's
// loopback and carries each connection to the proxy's unix socket, which is
// the only way out. The proxy allows CONNECT to host:port and plain HTTP
// requests to host:port when the pair is allowed, refuses anything else with
// 403, and keeps a log of both for the call's evidence. Names are resolved
// by the runner, never inside.

// proxyPort is where the forwarder listens inside the sandbox.
const proxyPort = 3128

// Paths inside the sandbox.
const (
	insideNet       = "/run/rath-net"
	insideForwarder = "/run/rath-net-forwarder"
)

// forwardFlag, as the first argument of the runner's binary, makes it the
// forwarder (see init in rlimit.go).
const forwardFlag = "--rath-sandbox-net"

// HostRule is one allowed destination: a host name (or "*.domain" for its
// subdomains) or an IP address in its canonical form, and a port.
type HostRule struct {
	Host string
	Port int
}

// Net is what the operator lets sandboxes reach beyond public destinations
// (Config.AllowNet, Config.Reserved).
type Net struct {
	// Allow names the addresses, ranges and names that are not public but
	// that a command may still reach when its rules name them
	// (--sandbox-allow-net).
	Allow egress.Allowlist
	// Reserved are the runtime's own endpoints (its NATS servers): never
	// reached, whatever they are, unless Allow names the address with the
	// port.
	Reserved []netip.AddrPort
}

// ParseHosts reads allowed destinations: "host" (ports 443 and 80),
// "host:port", "*.domain", "*.domain:port", and IP addresses ("[::1]:80").
// An entry naming a destination that is not public (a loopback, private,
// link-local or metadata address, in any spelling, or localhost and the
// like) is refused, naming the entry and why, unless allow names it
// (egress.Entry.Check); the proxy checks the address it dials again.
func ParseHosts(entries []string, allow egress.Allowlist) ([]HostRule, error) {
	var rules []HostRule
	for _, text := range entries {
		e, err := egress.Check(text, allow)
		if err != nil {
			return nil, fmt.Errorf("allowed host %w", err)
		}
		for _, p := range e.Ports {
			rules = append(rules, HostRule{Host: e.Host, Port: p})
		}
	}
	return rules, nil
}

func allowed(rules []HostRule, host string, port int) bool {
	_, ok := allowedBy(rules, host, port)
	return ok
}

// allowedBy returns the rule that allows host:port. An address is compared
// in its canonical form.
func allowedBy(rules []HostRule, host string, port int) (HostRule, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, _, ok, err := egress.Literal(host); ok && err == nil {
		host = a.String()
	}
	for _, r := range rules {
		if r.Port != port {
			continue
		}
		if d, ok := strings.CutPrefix(r.Host, "*."); ok {
			if strings.HasSuffix(host, "."+d) {
				return r, true
			}
		} else if host == r.Host {
			return r, true
		}
	}
	return HostRule{}, false
}

// netProxy is one call's proxy.
type netProxy struct {
	rules []HostRule
	net   Net
	ln    net.Listener
	dir   string
	wg    sync.WaitGroup

	mu    sync.Mutex
	log   []string
	conns map[net.Conn]struct{}

	closeOnce sync.Once
}

// startProxy listens on a unix socket in a new directory under parent,
// which the sandbox user may enter (uid, when positive, owns it).
func startProxy(parent string, rules []HostRule, nets Net, uid int) (*netProxy, error) {
	dir, err := os.MkdirTemp(parent, "net-")
	if err != nil {
		return nil, err
	}
	ln, err := listenUnix(filepath.Join(dir, "proxy.sock"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := errors.Join(os.Chmod(dir, 0o755), os.Chmod(filepath.Join(dir, "proxy.sock"), 0o777)); err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	if uid > 0 {
		_ = os.Chown(dir, uid, uid)
	}
	p := &netProxy{rules: rules, net: nets, ln: ln, dir: dir, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = 107

// listenUnix listens on a unix socket at path. A path too long for a socket
// address (a deep workspace root) is bound through /proc/self/fd of its
// directory, which is short; the listener then leaves the socket file to
// the removal of its directory, since the name it bound means nothing once
// the descriptor is closed.
func listenUnix(path string) (net.Listener, error) {
	if len(path) <= maxSocketPath {
		return net.Listen("unix", path)
	}
	d, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|syscall.O_DIRECTORY|unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ln, err := net.Listen("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/"+filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

func (p *netProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c, true)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.track(c, false)
			defer c.Close()
			p.handle(c)
		}()
	}
}

func (p *netProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *netProxy) record(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.log) < 100 {
		p.log = append(p.log, s)
	} else if len(p.log) == 100 {
		p.log = append(p.log, "…")
	}
}

// handle serves one connection: one CONNECT, or one plain HTTP request.
func (p *netProxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	target := req.Host
	if req.Method != http.MethodConnect {
		target = req.URL.Host
	}
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		host, portStr = target, "80"
		if req.Method == http.MethodConnect {
			portStr = "443"
		}
	}
	port, _ := strconv.Atoi(portStr)
	verb := req.Method
	if req.Method != http.MethodConnect && req.URL.Host == "" {
		p.record(verb + " " + req.URL.String() + " refused: not a proxy request")
		refuse(c, "this is the sandbox's proxy: ask for http://host/... or CONNECT host:port")
		return
	}
	rule, ok := allowedBy(p.rules, host, port)
	if !ok {
		p.record(fmt.Sprintf("%s %s:%d refused", verb, host, port))
		refuse(c, fmt.Sprintf("%s:%d is not among the hosts this call may reach", host, port))
		return
	}
	// The runner resolves the name, and dials the address it checked,
	// never the name again: a rule must not lead to the host's loopback, a
	// private network, a cloud's metadata service or the runtime's own
	// endpoints, unless the operator allows that address.
	addr, err := p.resolve(host, port, rule)
	if err != nil {
		p.record(fmt.Sprintf("%s %s:%d refused: %v", verb, host, port, err))
		refuse(c, err.Error())
		return
	}
	up, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, uint16(port)).String(), 10*time.Second)
	if err != nil {
		p.record(fmt.Sprintf("%s %s:%d allowed, failed: %v", verb, host, port, err))
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%v\n", err)
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	p.record(fmt.Sprintf("%s %s:%d allowed", verb, host, port))
	if req.Method != http.MethodConnect {
		// One request a connection: what follows it on the client's side
		// (a pipelined request for another host) is never sent.
		req.RequestURI = ""
		req.Header.Set("Connection", "close")
		req.Header.Del("Proxy-Connection")
		if err := req.Write(up); err != nil {
			return
		}
		closeWrite(up)
		_, _ = io.Copy(c, up)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

// resolve returns the address to dial for host:port: host itself if it is
// an address, else the first address the name resolves to. Every address
// the name resolves to must pass check, so that one answer among several
// cannot lead inside.
func (p *netProxy) resolve(host string, port int, rule HostRule) (netip.Addr, error) {
	if a, _, ok, err := egress.Literal(host); ok && err == nil {
		if rule.Host != a.String() {
			return netip.Addr{}, fmt.Errorf("%s: an address is reached only when the workflow names it", host)
		}
		return a.Unmap(), p.check(a, port, "")
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if why := egress.SpecialName(name); why != "" && !p.net.Allow.Name(name, port) {
		return netip.Addr{}, fmt.Errorf("%s is %s, which the operator does not allow (%s)", host, why, egress.AllowFlag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: no address", host)
	}
	for _, a := range addrs {
		if err := p.check(a.Unmap(), port, name); err != nil {
			return netip.Addr{}, fmt.Errorf("%s resolves to %w", host, err)
		}
	}
	return addrs[0].Unmap(), nil
}

// check refuses to dial a:port when it is not a public address, is one of
// the runner's host's own addresses, or is one of the runtime's endpoints,
// unless the operator's allowlist names it (or name, the host name it was
// resolved from).
func (p *netProxy) check(a netip.Addr, port int, name string) error {
	a = a.WithZone("")
	named := p.net.Allow.Addr(a, port) || name != "" && p.net.Allow.Name(name, port)
	ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
	for _, r := range p.net.Reserved {
		if netip.AddrPortFrom(r.Addr().Unmap(), r.Port()) == ap && !p.net.Allow.AddrPort(a, port) {
			return fmt.Errorf("%s, one of the runtime's own endpoints", ap)
		}
	}
	if named {
		return nil
	}
	if why := egress.Classify(a); why != "" {
		return fmt.Errorf("%s, %s, which the operator does not allow (%s)", a, why, egress.AllowFlag)
	}
	if ownAddress(a) {
		return fmt.Errorf("%s, an address of the runner's host, which the operator does not allow (%s)", a, egress.AllowFlag)
	}
	return nil
}

// ownAddress tells whether a is an address of one of this host's
// interfaces.
func ownAddress(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // unknown: not reached
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a.Unmap() {
				return true
			}
		}
	}
	return false
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func refuse(c net.Conn, why string) {
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(why)+1, why)
}

// close stops the proxy and every connection it carries, and returns its
// log. It may be called more than once.
func (p *netProxy) close() []string {
	p.closeOnce.Do(func() {
		p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
		os.RemoveAll(p.dir)
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// forwardMain is the forwarder, run inside the sandbox as
//
//	forwarder --rath-sandbox-net <socket> -- command...
//
// It listens on the sandbox's loopback, runs the command, carries
// connections to the proxy's socket until the command exits, and exits as
// the command did.
func forwardMain(args []string) {
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "rath-sandbox-net: %v\n", err)
		os.Exit(127)
	}
	if len(args) < 3 || args[1] != "--" {
		fail(errors.New("usage: --rath-sandbox-net SOCKET -- COMMAND..."))
	}
	sock, argv := args[0], args[2:]
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(proxyPort))
	if err != nil {
		fail(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(exitErr.ExitCode())
	default:
		fmt.Fprintf(os.Stderr, "rath-sandbox-net: %v\n", err)
		os.Exit(127)
	}
}

// WithHosts returns ws whose commands may reach hosts (Cmd.Hosts), for the
// tools of a call whose agent the workflow allows them.
func WithHosts(ws Workspace, hosts []string) Workspace {
	if len(hosts) == 0 {
		return ws
	}
	return hostsWorkspace{ws, hosts}
}

type hostsWorkspace struct {
	Workspace
	hosts []string
}

func (w hostsWorkspace) Run(ctx context.Context, c Cmd) (Result, error) {
	c.Hosts = append(slices.Clone(c.Hosts), w.hosts...)
	return w.Workspace.Run(ctx, c)
}
