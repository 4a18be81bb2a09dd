// Package egress decides which network destinations a sandboxed command may
// be allowed: the entries of a workflow's or an agent's network list, and the
// addresses the tool runner's proxy dials for them.
//
// A workflow may name public destinations only. Loopback, link-local,
// private, shared (CGNAT), multicast, unspecified, reserved and cloud
// metadata addresses, in any spelling (decimal, hex, octal and short IPv4
// forms, IPv4-mapped, NAT64 and 6to4 IPv6, brackets, zones, a trailing dot),
// and the names that lead to them (localhost, *.localhost, *.internal,
// *.local, metadata), are refused unless the operator's Allowlist names
// them. The check runs where a workflow is checked and again in the tool
// runner, on the rules it is given and on the address it dials.
package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Literal reports whether host (no port, no brackets) is an address rather
// than a name, and which: an IPv4 or IPv6 literal, or a host a URL parser or
// inet_aton would read as IPv4 ("2130706433", "0x7f.1", "127.1",
// "0177.0.0.1"). canonical is false for such other spellings. A host whose
// last label is numeric but is no address ("1.2.3.4.5", "example.123") is
// an error: a resolver could read it either way.
func Literal(host string) (addr netip.Addr, canonical, ok bool, err error) {
	host = strings.TrimSuffix(host, ".")
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false, false, fmt.Errorf("%q is not an IPv6 address", host)
		}
		return a, a.String() == host, true, nil
	}
	labels := strings.Split(host, ".")
	if !numeric(labels[len(labels)-1]) {
		return netip.Addr{}, false, false, nil
	}
	a, ok := parseIPv4(labels)
	if !ok {
		return netip.Addr{}, false, false, fmt.Errorf("%q is neither a host name nor an IPv4 address", host)
	}
	return a, a.String() == host, true, nil
}

// numeric tells whether a label reads as a number: decimal digits, or 0x
// and hex digits (the WHATWG URL standard's "ends in a number").
func numeric(label string) bool {
	if label == "" {
		return false
	}
	digits := "0123456789"
	if h, ok := strings.CutPrefix(strings.ToLower(label), "0x"); ok {
		label, digits = h, "0123456789abcdef"
		if label == "" {
			return true
		}
	}
	return strings.Trim(label, digits) == ""
}

// parseIPv4 reads one to four numbers as inet_aton does: each decimal, 0x
// hex or 0-led octal; the last fills the bytes the others leave.
func parseIPv4(labels []string) (netip.Addr, bool) {
	if len(labels) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, l := range labels {
		base := 10
		switch ll := strings.ToLower(l); {
		case strings.HasPrefix(ll, "0x"):
			l, base = ll[2:], 16
			if l == "" {
				l = "0"
			}
		case len(l) > 1 && l[0] == '0':
			l, base = l[1:], 8
		}
		n, err := strconv.ParseUint(l, base, 32)
		if err != nil || l == "" {
			return netip.Addr{}, false
		}
		if i < len(labels)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// special are the IPv4 and IPv6 ranges that are not the public internet,
// most specific first.
var special = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("169.254.170.2/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (this-host) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a reserved (6to4 relay) address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a reserved (benchmarking) address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved (or broadcast) address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "a reserved (IPv4-compatible) address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a reserved (discard) address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo tunnel address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2001::/23"), "a reserved (IETF protocol) address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify returns why a is not a public address ("a loopback address",
// "mapping 127.0.0.1, a loopback address"), or "" if it is.
// IPv6 addresses that carry an IPv4 one (mapped, NAT64, 6to4) are what they
// carry.
func Classify(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4In6() {
		if why := Classify(a.Unmap()); why != "" {
			return fmt.Sprintf("mapping %s, %s", a.Unmap(), why)
		}
		return ""
	}
	if a.Is6() && (nat64.Contains(a) || sixToFour.Contains(a)) {
		b := a.As16()
		v4, how := netip.AddrFrom4([4]byte(b[12:16])), "NAT64"
		if sixToFour.Contains(a) {
			v4, how = netip.AddrFrom4([4]byte(b[2:6])), "6to4"
		}
		if why := Classify(v4); why != "" {
			return fmt.Sprintf("%s of %s, %s", how, v4, why)
		}
		return ""
	}
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.what
		}
	}
	if !a.IsGlobalUnicast() {
		return "not a unicast address"
	}
	return ""
}

// specialNames are names (and the domains under them) that lead to this
// host, its network or a cloud's metadata service whatever DNS says.
var specialNames = []struct {
	name   string
	domain bool // the name and every name under it
	what   string
}{
	{"localhost", true, "this host's loopback"},
	{"localhost.localdomain", false, "this host's loopback"},
	{"ip6-localhost", false, "this host's loopback"},
	{"ip6-loopback", false, "this host's loopback"},
	{"localdomain", true, "a name of the local network"},
	{"local", true, "a link-local (mDNS) name"},
	{"home.arpa", true, "a name of the local network"},
	{"internal", true, "a private-use name (such as a cloud's metadata.google.internal)"},
	{"metadata", false, "a cloud metadata service's name"},
	{"instance-data", false, "a cloud metadata service's name"},
}

// SpecialName returns why the host name (lower case, no trailing dot) is not
// a public one, or "".
func SpecialName(name string) string {
	for _, s := range specialNames {
		if name == s.name || s.domain && strings.HasSuffix(name, "."+s.name) {
			return s.what
		}
	}
	return ""
}
