package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestRefused: every spelling of a destination that is not public is
// refused without an allowlist, and its refusal names the entry and why.
func TestRefused(t *testing.T) {
	for _, c := range []struct {
		entry string
		why   string // in the error
	}{
		{"127.0.0.1", "loopback"},
		{"127.0.0.1:19464", "loopback"},
		{"127.0.0.1.:14222", "loopback"},
		{"127.8.9.10", "loopback"},
		{"2130706433", "spells 127.0.0.1, a loopback"},
		{"2130706433:4222", "spells 127.0.0.1, a loopback"},
		{"0x7f000001", "spells 127.0.0.1"},
		{"0x7f.1", "spells 127.0.0.1"},
		{"0X7F.0.0.1", "spells 127.0.0.1"},
		{"127.1", "spells 127.0.0.1"},
		{"127.0.1", "spells 127.0.0.1"},
		{"0177.0.0.1", "spells 127.0.0.1"},
		{"017700000001", "spells 127.0.0.1"},
		{"127.000.000.001", "spells 127.0.0.1"},
		{"0", "spells 0.0.0.0, an unspecified"},
		{"0.0.0.0", "unspecified"},
		{"0.0.0.0:4222", "unspecified"},
		{"::", "unspecified"},
		{"[::]:80", "unspecified"},
		{"::1", "loopback"},
		{"[::1]", "loopback"},
		{"[::1]:80", "loopback"},
		{"0:0::1", "spells ::1"},
		{"[0:0:0:0:0:0:0:1]:80", "spells ::1"},
		{"::ffff:127.0.0.1", "mapping 127.0.0.1, a loopback"},
		{"[::ffff:127.0.0.1]:19464", "mapping 127.0.0.1"},
		{"::ffff:7f00:1", "spells ::ffff:127.0.0.1"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"64:ff9b::7f00:1", "NAT64 of 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"2002:7f00:1::", "6to4 of 127.0.0.1"},
		{"2002:a00:1::1", "6to4 of 10.0.0.1"},
		{"2001::1", "Teredo"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.169.254:80", "cloud metadata"},
		{"0xa9.0xfe.0xa9.0xfe", "spells 169.254.169.254, a cloud metadata"},
		{"2852039166", "spells 169.254.169.254"},
		{"169.254.170.2", "cloud metadata"},
		{"100.100.100.200", "cloud metadata"},
		{"fd00:ec2::254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"10.0.0.1", "private"},
		{"10.1", "spells 10.0.0.1, a private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1:8080", "private"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.254", "CGNAT"},
		{"192.0.0.1", "reserved"},
		{"192.0.2.1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"fd00::1", "unique local"},
		{"fc00::1", "unique local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "zone"},
		{"[fe80::1%eth0]:80", "zone"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"localhost", "loopback"},
		{"LOCALHOST.", "loopback"},
		{"localhost:19464", "loopback"},
		{"console.localhost", "loopback"},
		{"a.b.localhost:4222", "loopback"},
		{"*.localhost", "loopback"},
		{"localhost.localdomain", "loopback"},
		{"ip6-localhost", "loopback"},
		{"metadata.google.internal", "metadata"},
		{"metadata.google.internal.:80", "metadata"},
		{"*.google.internal", "metadata"},
		{"*.internal", "private-use"},
		{"host.docker.internal", "private-use"},
		{"metadata", "metadata"},
		{"printer.local", "mDNS"},
	} {
		_, err := Check(c.entry, Allowlist{})
		if err == nil {
			t.Errorf("%q accepted", c.entry)
			continue
		}
		if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), c.entry) {
			t.Errorf("%q: %v (want it named, and %q)", c.entry, err, c.why)
		}
	}
}

// TestNotHosts: entries that are neither a host nor an address.
func TestNotHosts(t *testing.T) {
	for _, bad := range []string{"", "a/b", "user@host", "host:0", "host:99999", "host:x", "host:+80", "host:080",
		"*", "*.", "-x", ".x", "a..b", "1.2.3.4.5", "example.123", "256.1.1.1", "1.2.3.256", "1.16777216",
		"0x", "*.0.0.1", "*.127.0.0.1", "::g", "[::1", "a b", "a\\b", "a%b"} {
		if _, err := Check(bad, Allowlist{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPublic: public names and addresses pass, in canonical form.
func TestPublic(t *testing.T) {
	for entry, host := range map[string]string{
		"proxy.golang.org":   "proxy.golang.org",
		"Example.COM.:8443":  "example.com",
		"*.github.com":       "*.github.com",
		"8.8.8.8":            "8.8.8.8",
		"1.1.1.1:53":         "1.1.1.1",
		"[2606:4700::1111]":  "2606:4700::1111",
		"2606:4700::1111":    "2606:4700::1111",
		"::ffff:8.8.8.8":     "::ffff:8.8.8.8",
		"64:ff9b::808:808":   "64:ff9b::808:808",
		"2002:808:808::1":    "2002:808:808::1",
		"172.32.0.1":         "172.32.0.1",
		"100.128.0.1":        "100.128.0.1",
		"localhost.example":  "localhost.example",
		"notlocalhost":       "notlocalhost",
		"xn--nxasmq6b.com":   "xn--nxasmq6b.com",
		"123.example.com:80": "123.example.com",
	} {
		e, err := Check(entry, Allowlist{})
		if err != nil {
			t.Errorf("%q refused: %v", entry, err)
			continue
		}
		if e.Host != host {
			t.Errorf("%q: host %q, want %q", entry, e.Host, host)
		}
	}
}

// TestAllowlist: what the operator names passes, on the ports it names.
func TestAllowlist(t *testing.T) {
	allow, err := ParseAllowlist([]string{"127.0.0.1:8080, 10.0.0.0/8", "[fd00::/8]:5432", "localhost:3000", "169.254.169.254"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entry string
		ok    bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.1:8081", false},
		{"127.0.0.1", false},             // 443 and 80
		{"::ffff:127.0.0.1:8080", false}, // an address, no port
		{"[::ffff:127.0.0.1]:8080", true},
		{"[::1]:8080", false},
		{"10.1.2.3:5432", true},
		{"10.1.2.3", true},
		{"11.0.0.1", true}, // public
		{"172.16.0.1:80", false},
		{"[fd12::1]:5432", true},
		{"[fd12::1]:5433", false},
		{"localhost:3000", true},
		{"localhost:3001", false},
		{"x.localhost:3000", false},
		{"169.254.169.254", true},
		{"2130706433:8080", false}, // spelt otherwise: never
	} {
		_, err := Check(c.entry, allow)
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want allowed %v", c.entry, err, c.ok)
		}
		if err != nil && !c.ok && strings.Contains(err.Error(), "names") && !errors.Is(err, ErrNotPublic) {
			t.Errorf("%q: %v does not wrap ErrNotPublic", c.entry, err)
		}
	}
	for _, bad := range []string{"*.example.com", "0x7f.1", "10.0.0.0/33", "127.0.0.1:0", "a/b"} {
		if _, err := ParseAllowlist([]string{bad}); err == nil {
			t.Errorf("allowlist %q accepted", bad)
		}
	}
	var flag Allowlist
	if err := flag.Set("127.0.0.1:8080,10.0.0.0/8"); err != nil || !flag.Addr(netip.MustParseAddr("10.9.9.9"), 1) || flag.String() != "127.0.0.1:8080,10.0.0.0/8" {
		t.Errorf("flag: %v %q", err, flag.String())
	}
}

func TestAllowlistAddrPort(t *testing.T) {
	allow, err := ParseAllowlist([]string{"127.0.0.0/8,10.0.0.0/8:4222"})
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]bool{"127.0.0.1": false, "10.1.1.1": true, "::ffff:10.1.1.1": true, "11.1.1.1": false} {
		if got := allow.AddrPort(netip.MustParseAddr(a), 4222); got != want {
			t.Errorf("%s:4222 named with its port: %v, want %v", a, got, want)
		}
	}
}
