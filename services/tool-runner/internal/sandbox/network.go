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
// subdomains) and a port.
type HostRule struct {
	Host string
	Port int
}

// ParseHosts reads allowed destinations: "host" (ports 443 and 80),
// "host:port", "*.domain" and "*.domain:port". Hosts are names or IP
// literals; nothing else is accepted.
func ParseHosts(entries []string) ([]HostRule, error) {
	var rules []HostRule
	for _, e := range entries {
		host, port, err := net.SplitHostPort(e)
		ports := []int{443, 80}
		if err != nil {
			host = e
		} else {
			n, err := strconv.Atoi(port)
			if err != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("allowed host %q: bad port", e)
			}
			ports = []int{n}
		}
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		name := strings.TrimPrefix(host, "*.")
		if name == "" || strings.ContainsAny(name, "/@*?#[] ") || strings.HasPrefix(name, "-") {
			return nil, fmt.Errorf("allowed host %q is not a host name", e)
		}
		for _, p := range ports {
			rules = append(rules, HostRule{Host: host, Port: p})
		}
	}
	return rules, nil
}

func allowed(rules []HostRule, host string, port int) bool {
	_, ok := allowedBy(rules, host, port)
	return ok
}

// allowedBy returns the rule that allows host:port.
func allowedBy(rules []HostRule, host string, port int) (HostRule, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
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
func startProxy(parent string, rules []HostRule, uid int) (*netProxy, error) {
	dir, err := os.MkdirTemp(parent, "net-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "proxy.sock"))
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
	p := &netProxy{rules: rules, ln: ln, dir: dir, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
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
	// The runner resolves the name, and dials the address it checked: a
	// name allowed by the workflow must not lead to the host's loopback, a
	// private network or a cloud's metadata service, unless the rule names
	// that address itself.
	addr, err := p.resolve(host, rule)
	if err != nil {
		p.record(fmt.Sprintf("%s %s:%d refused: %v", verb, host, port, err))
		refuse(c, err.Error())
		return
	}
	up, err := net.DialTimeout("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)), 10*time.Second)
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

// resolve returns the address to dial for host: itself if it is an IP
// literal the rule names, else the first address the name resolves to,
// which must be a public one.
func (p *netProxy) resolve(host string, rule HostRule) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if rule.Host == a.String() {
			return a, nil // the workflow named this address
		}
		return netip.Addr{}, fmt.Errorf("%s: an address is reached only when the workflow names it", host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
			a.IsUnspecified() || a.IsMulticast() || !a.IsGlobalUnicast() {
			return netip.Addr{}, fmt.Errorf("%s resolves to %s, which is not a public address", host, a)
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: no address", host)
	}
	return addrs[0].Unmap(), nil
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
