package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Allowlist is what the operator allows sandboxes beyond public
// destinations (AllowFlag): addresses, address ranges and host names, each
// on every port or on one. The zero value allows nothing more.
type Allowlist struct {
	entries []allowed
}

type allowed struct {
	text   string
	prefix netip.Prefix // an address is a prefix of its full length
	name   string       // or a host name
	port   int          // 0: every port
}

// ParseAllowlist reads the operator's entries: "127.0.0.1", "10.0.0.0/8",
// "fd00::/8", "[::1]:8080", "10.0.0.0/8:5432", "[fd00::/8]:5432",
// "db.internal", "db.internal:5432". Commas inside an entry separate more
// entries (the flag's form). Empty entries are skipped.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var l Allowlist
	for _, list := range entries {
		for _, text := range strings.Split(list, ",") {
			text = strings.TrimSpace(text)
			if text == "" {
				continue
			}
			a, err := parseAllowed(text)
			if err != nil {
				return Allowlist{}, fmt.Errorf("%s %q: %w", AllowFlag, text, err)
			}
			l.entries = append(l.entries, a)
		}
	}
	return l, nil
}

func parseAllowed(text string) (allowed, error) {
	a := allowed{text: text}
	host := text
	if p, err := netip.ParsePrefix(text); err == nil {
		a.prefix = p.Masked()
		return a, nil
	}
	if h, port, err := net.SplitHostPort(text); err == nil {
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 65535 {
			return allowed{}, fmt.Errorf("bad port")
		}
		host, a.port = h, n
	} else if h, ok := strings.CutPrefix(text, "["); ok && strings.HasSuffix(h, "]") {
		host = strings.TrimSuffix(h, "]")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if p, err := netip.ParsePrefix(host); err == nil {
		a.prefix = p.Masked()
		return a, nil
	}
	e, err := ParseEntry(host)
	switch {
	case err != nil:
		return allowed{}, err
	case e.Wildcard():
		return allowed{}, fmt.Errorf("a wildcard is not allowed here: name the host, or its addresses")
	case e.Addr.IsValid():
		a.prefix = netip.PrefixFrom(e.Addr, e.Addr.BitLen())
	default:
		a.name = e.Host
	}
	return a, nil
}

// Addr tells whether the allowlist names address a on port. An IPv4-mapped
// address is the IPv4 one it maps.
func (l Allowlist) Addr(a netip.Addr, port int) bool {
	a = a.WithZone("")
	for _, e := range l.entries {
		if e.port != 0 && e.port != port || !e.prefix.IsValid() {
			continue
		}
		if e.prefix.Contains(a) || a.Is4In6() && e.prefix.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// AddrPort tells whether the allowlist names address a with port itself
// ("127.0.0.1:4222", "10.0.0.0/8:4222"), not only as one of every port.
func (l Allowlist) AddrPort(a netip.Addr, port int) bool {
	a = a.WithZone("")
	for _, e := range l.entries {
		if e.port == port && e.prefix.IsValid() && (e.prefix.Contains(a) || a.Is4In6() && e.prefix.Contains(a.Unmap())) {
			return true
		}
	}
	return false
}

// Name tells whether the allowlist names the host name (lower case, no
// trailing dot) on port.
func (l Allowlist) Name(name string, port int) bool {
	for _, e := range l.entries {
		if e.name != "" && e.name == name && (e.port == 0 || e.port == port) {
			return true
		}
	}
	return false
}

// Empty tells whether the allowlist allows nothing beyond public
// destinations.
func (l Allowlist) Empty() bool { return len(l.entries) == 0 }

// String is the entries as the flag takes them.
func (l Allowlist) String() string {
	s := make([]string, len(l.entries))
	for i, e := range l.entries {
		s[i] = e.text
	}
	return strings.Join(s, ",")
}

// Set adds the entries of a flag's value (comma-separated); with String and
// Type, *Allowlist is a flag.Value and a pflag.Value.
func (l *Allowlist) Set(s string) error {
	more, err := ParseAllowlist([]string{s})
	if err != nil {
		return err
	}
	l.entries = append(l.entries, more.entries...)
	return nil
}

// Type names the flag's value in help.
func (l *Allowlist) Type() string { return "addresses" }
