package sandbox

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/egress"
)

func TestAllowedHosts(t *testing.T) {
	allow := mustAllow(t, "127.0.0.1:8080")
	rules, err := ParseHosts([]string{"proxy.golang.org", "*.github.com", "127.0.0.1:8080", "Example.COM.:8443", "[2606:4700::1111]:853"}, allow)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"proxy.golang.org", 443, true},
		{"proxy.golang.org", 80, true},
		{"proxy.golang.org", 22, false},
		{"PROXY.golang.org.", 443, true},
		{"proxy.golang.org.evil.com", 443, false},
		{"evilproxy.golang.org", 443, false},
		{"api.github.com", 443, true},
		{"a.b.github.com", 443, true},
		{"github.com", 443, false},
		{"evilgithub.com", 443, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 443, false},
		{"example.com", 8443, true},
		{"example.com", 443, false},
		{"2606:4700::1111", 853, true},
		{"2606:4700:0::1111", 853, true}, // the same address
	} {
		if got := allowed(rules, c.host, c.port); got != c.want {
			t.Errorf("%s:%d allowed = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	for _, bad := range []string{"", "a/b", "user@host", "host:0", "host:99999", "host:x", "*", "*.", "-x"} {
		if _, err := ParseHosts([]string{bad}, allow); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestParseHostsRefusesWhatIsNotPublic: the runner checks the rules it is
// given against its operator's allowlist, whoever wrote the workflow (a
// client need not have checked it), naming the entry and why.
func TestParseHostsRefusesWhatIsNotPublic(t *testing.T) {
	for _, h := range []string{"127.0.0.1:19464", "127.0.0.1:14222", "2130706433:4222", "0x7f.1", "127.1", "0177.0.0.1",
		"::ffff:127.0.0.1", "[::1]:80", "127.0.0.1.", "0.0.0.0", "::", "169.254.169.254", "fd00::1", "fe80::1%eth0",
		"64:ff9b::7f00:1", "2002:7f00:1::", "100.64.0.1", "10.0.0.1", "192.168.1.1", "224.0.0.1",
		"localhost", "console.localhost", "*.localhost", "localhost.localdomain", "metadata.google.internal"} {
		_, err := ParseHosts([]string{"example.com", h}, egress.Allowlist{})
		if err == nil || !strings.Contains(err.Error(), h) {
			t.Errorf("%q: %v, want refused naming it", h, err)
		}
	}
	if _, err := ParseHosts([]string{"127.0.0.1:19464"}, mustAllow(t, "127.0.0.1:19464")); err != nil {
		t.Errorf("allowed by the operator: %v", err)
	}
}

// TestProxyRefusesLoopbackAtConnect: a rule naming 127.0.0.1:<port> of a
// real listener (as a bus client could write it, skipping every check) is
// refused when a command asks the proxy for it, and the call's network log
// says so; with the operator's allowlist naming it, it is reached.
func TestProxyRefusesLoopbackAtConnect(t *testing.T) {
	port := echoServer(t)
	rules := []HostRule{{Host: "127.0.0.1", Port: port}, {Host: "localhost", Port: port}, {Host: "*.localhost", Port: port}, {Host: "::ffff:127.0.0.1", Port: port}}
	p := proxy(t, rules, Net{})
	for _, target := range []string{"127.0.0.1", "[::ffff:127.0.0.1]", "localhost", "console.localhost"} {
		status, _ := connect(t, p, target+":"+strconv.Itoa(port))
		if status != http.StatusForbidden {
			t.Errorf("CONNECT %s:%d: %d, want 403", target, port, status)
		}
	}
	log := strings.Join(p.close(), "\n")
	for _, want := range []string{"CONNECT 127.0.0.1:" + strconv.Itoa(port) + " refused: 127.0.0.1, a loopback address", "CONNECT localhost:", "CONNECT console.localhost:"} {
		if !strings.Contains(log, want) {
			t.Errorf("network log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "allowed") {
		t.Errorf("network log:\n%s", log)
	}

	rules, err := ParseHosts([]string{"127.0.0.1:" + strconv.Itoa(port)}, mustAllow(t, "127.0.0.1:"+strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	p = proxy(t, rules, Net{Allow: mustAllow(t, "127.0.0.1:"+strconv.Itoa(port))})
	status, reply := connect(t, p, "127.0.0.1:"+strconv.Itoa(port))
	if status != http.StatusOK || reply != "ping\n" {
		t.Errorf("allowed by the operator: %d %q", status, reply)
	}
	if log := p.close(); len(log) != 1 || !strings.HasSuffix(log[0], " allowed") {
		t.Errorf("network log %q", log)
	}
}

// TestProxyRefusesNamesThatLeadHere: a name that resolves to an address of
// this host (its own host name: a loopback, private or own address) is
// refused after resolution; the operator's allowlist naming the name admits
// it.
func TestProxyRefusesNamesThatLeadHere(t *testing.T) {
	port := echoServer(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.LookupHost(host); err != nil {
		t.Skipf("this host's name %s does not resolve: %v", host, err)
	}
	p := proxy(t, []HostRule{{Host: strings.ToLower(host), Port: port}}, Net{})
	if status, _ := connect(t, p, host+":"+strconv.Itoa(port)); status != http.StatusForbidden {
		t.Errorf("CONNECT %s:%d: %d, want 403", host, port, status)
	}
	if log := strings.Join(p.close(), "\n"); !strings.Contains(log, "refused: "+host+" resolves to ") {
		t.Errorf("network log:\n%s", log)
	}
}

// TestProxyCheck: the addresses the proxy dials, checked one by one.
func TestProxyCheck(t *testing.T) {
	p := &netProxy{net: Net{
		Allow:    mustAllow(t, "10.0.0.0/8", "127.0.0.0/8", "127.0.0.2:4222"),
		Reserved: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:4222"), netip.MustParseAddrPort("127.0.0.2:4222"), netip.MustParseAddrPort("8.8.8.8:4222")},
	}}
	for _, c := range []struct {
		addr string
		port int
		ok   bool
	}{
		{"8.8.8.8", 443, true},
		{"8.8.8.8", 4222, false}, // the runtime's
		{"10.1.2.3", 5432, true},
		{"172.16.0.1", 80, false},
		{"169.254.169.254", 80, false},
		{"::1", 80, false},
		{"::ffff:127.0.0.1", 80, true}, // 127.0.0.0/8 allowed
		{"127.0.0.1", 4222, false},     // but not the runtime's NATS port
		{"127.0.0.2", 4222, true},      // named with its port
		{"64:ff9b::7f00:1", 80, false},
		{"fe80::1%eth0", 80, false},
		{"0.0.0.0", 80, false},
	} {
		if err := p.check(netip.MustParseAddr(c.addr), c.port, ""); (err == nil) != c.ok {
			t.Errorf("%s:%d: %v, want allowed %v", c.addr, c.port, err, c.ok)
		}
	}
	ifaces, _ := net.InterfaceAddrs()
	for _, ia := range ifaces {
		if n, ok := ia.(*net.IPNet); ok {
			a, _ := netip.AddrFromSlice(n.IP)
			if err := (&netProxy{}).check(a.Unmap(), 80, ""); err == nil {
				t.Errorf("this host's own address %s allowed", a)
			}
		}
	}
}

// A proxy under a directory whose path is too long for a socket address
// still listens, and a client reaches it by the socket's full path.
func TestProxyListensUnderADeepDirectory(t *testing.T) {
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := startProxy(deep, nil, Net{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	sock := filepath.Join(p.dir, "proxy.sock")
	if len(sock) <= maxSocketPath {
		t.Fatalf("socket path %d bytes long: not deep enough", len(sock))
	}
	// A client dials it the same way: through its directory's descriptor.
	d, err := os.Open(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/proxy.sock")
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	c.Close()
}

func mustAllow(t *testing.T, entries ...string) egress.Allowlist {
	t.Helper()
	l, err := egress.ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// echoServer listens on the host's loopback, as rath up's console and NATS
// do, and echoes each connection; it returns the port.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func proxy(t *testing.T, rules []HostRule, nets Net) *netProxy {
	t.Helper()
	p, err := startProxy(t.TempDir(), rules, nets, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.close() })
	return p
}

// connect asks the proxy to CONNECT to target, as a command's client does
// through the forwarder, and on 200 sends "ping\n" and returns the reply.
func connect(t *testing.T, p *netProxy, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(p.dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := http.NewRequest(http.MethodConnect, "http://"+target, nil)
	req.Host = target
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, ""
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("through the proxy to %s: %v", target, err)
	}
	return resp.StatusCode, line
}
