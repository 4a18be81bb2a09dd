package console

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// hosts is what a request's Host may name: the addresses the console
// serves. A page that a browser loaded from another name (DNS rebinding:
// attacker.example resolving to 127.0.0.1) is refused, whatever cookie it
// carries, because the browser would treat that name's pages as the
// console's own origin.
type hosts struct {
	// port is the listener's port; "" accepts any (a console not told its
	// address, which then answers to loopback only).
	port string
	// ip is the listener's address; loopback accepts every loopback
	// literal and localhost; any (a wildcard listener, 0.0.0.0 or ::)
	// accepts every IP literal and localhost: no name an attacker's DNS
	// controls is an IP literal.
	ip       netip.Addr
	loopback bool
	any      bool
	// names are the operator's names (WithHosts): name:port exactly, or a
	// name alone with any port (a proxy in front forwards its own).
	names map[string]bool
}

// loopbackOnly is the check of a console not told where it listens.
var loopbackOnly = hosts{loopback: true}

// newHosts is the check of a console listening on addr (host:port, as the
// listener bound it) that also answers to names.
func newHosts(addr string, names []string) (hosts, error) {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return hosts{}, fmt.Errorf("console: the address it listens on: %w", err)
	}
	hs := hosts{port: port, names: map[string]bool{}}
	switch ip, err := netip.ParseAddr(h); {
	case h == "" || err == nil && ip.IsUnspecified():
		hs.any = true
	case err == nil:
		hs.ip = ip.Unmap()
		hs.loopback = hs.ip.IsLoopback()
	case strings.EqualFold(h, "localhost"):
		hs.loopback = true
	default:
		hs.names[strings.ToLower(net.JoinHostPort(h, port))] = true
	}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" || strings.ContainsAny(n, "/ @") {
			return hosts{}, fmt.Errorf("console: %q is not a host name (NAME or NAME:PORT)", n)
		}
		hs.names[n] = true
	}
	return hs, nil
}

// allows says whether a request naming host (the Host header) reached the
// console by one of its addresses. tls says which port a Host without one
// means.
func (hs hosts) allows(host string, tls bool) bool {
	host = strings.ToLower(host)
	if host == "" {
		return false
	}
	if hs.names[host] {
		return true
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil { // no port: the scheme's
		name, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "80"
		if tls {
			port = "443"
		}
	}
	if hs.names[name] {
		return true
	}
	if hs.port != "" && port != hs.port {
		return false
	}
	if name == "localhost" {
		return hs.loopback || hs.any
	}
	ip, err := netip.ParseAddr(name)
	if err != nil || ip.Zone() != "" {
		return false
	}
	ip = ip.Unmap()
	switch {
	case hs.any:
		return true
	case hs.loopback:
		return ip.IsLoopback()
	}
	return ip == hs.ip
}

// checkHost refuses a request whose Host is not one of the console's
// addresses, saying which are.
func (s *Server) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if s.hosts.allows(r.Host, r.TLS != nil) {
		return true
	}
	s.log.Warn("console: refused a request for another host", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
	http.Error(w, fmt.Sprintf("console: refused: this console does not answer to the host %q; open it at its own address (%s), or have the operator name this host (--http-host)", r.Host, s.hostsText()), http.StatusMisdirectedRequest)
	return false
}

// hostsText says which hosts the console answers to.
func (s *Server) hostsText() string {
	hs := s.hosts
	port := hs.port
	if port == "" {
		port = "any port"
	}
	var what []string
	switch {
	case hs.any:
		what = append(what, "any IP address or localhost on port "+port)
	case hs.loopback:
		what = append(what, "localhost, 127.0.0.1 or [::1] on port "+port)
	case hs.ip.IsValid():
		what = append(what, net.JoinHostPort(hs.ip.String(), port))
	}
	what = append(what, slices.Sorted(maps.Keys(hs.names))...)
	return strings.Join(what, ", ")
}
