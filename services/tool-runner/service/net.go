package service

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// natsEndpoints are the addresses of the NATS servers nc knows, which no
// sandboxed command reaches (sandbox.Net.Reserved) unless the operator's
// allowlist names the address with its port. A name that does not resolve
// now is left out: the proxy refuses every non-public address anyway.
func natsEndpoints(ctx context.Context, nc *nats.Conn) []netip.AddrPort {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []netip.AddrPort
	for _, s := range nc.Servers() {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil || port <= 0 || port > 65535 {
			port = nats.DefaultPort
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
		if err != nil {
			continue
		}
		for _, a := range addrs {
			out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
		}
	}
	return out
}
