package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/pkg/client"
)

// defaultHTTP is where rath up serves its metrics and health unless --http
// says otherwise (the port OpenTelemetry's Prometheus exporter uses).
const defaultHTTP = "127.0.0.1:9464"

// httpEndpoint is rath up's --http: required when the user named it (a
// taken port then stops rath up), not when it is the default.
type httpEndpoint struct {
	addr     string
	required bool
	// hosts are the names the console answers to besides its address
	// (--http-host).
	hosts []string
}

// web is what rath up serves on --http: metrics and health, open to
// whoever reaches them, and the console, to whoever signed in.
type web struct {
	// addr is the address as bound.
	addr    string
	console *console.Server
	stop    func()
}

// serveWeb serves the suite's metrics and health on ep's address, reading
// the consumers' backlog on a connection of the ledger's role, and the
// console; it returns what stops them.
func serveWeb(rt *runtime.Runtime, ep httpEndpoint, log *slog.Logger) (*web, error) {
	opts := append([]nats.Option{nats.Name("rath-up-telemetry"), nats.MaxReconnects(-1)}, client.KeepAlive()...)
	if rt.Identities != nil {
		cred, _, err := auth.Options(rt.Identities.Path(auth.RoleLedger))
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		opts = append(opts, cred...)
	}
	nc, err := nats.Connect(rt.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("metrics: connect to %s: %w", rt.URL, err)
	}
	srv, err := telemetry.Serve(ep.addr, nc, auth.AllDurables(), log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	con, closeConsole, err := upConsole(rt, srv.Addr(), ep.hosts, log)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		nc.Close()
		return nil, err
	}
	srv.Mount(con)
	return &web{addr: srv.Addr(), console: con, stop: func() {
		closeConsole() // ends its live streams first: they would hold the shutdown
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		nc.Close()
	}}, nil
}

// url is the console's address for a browser on this machine: a wildcard
// listener's as loopback.
func (w *web) url() string {
	host, port, err := net.SplitHostPort(w.addr)
	if err != nil {
		return "http://" + w.addr
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.Is6() {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// printLink prints a new one-time sign-in link to the console, leading to
// next.
func (w *web) printLink(out io.Writer, prefix, next string) {
	path, expires, err := w.console.Link(next)
	if err != nil {
		fmt.Fprintf(out, "%s: no console sign-in link: %v\n", prefix, err)
		return
	}
	fmt.Fprintf(out, "%s: console sign-in link (signs one browser in, once, until %s): %s%s\n",
		prefix, expires.Format("15:04:05"), w.url(), path)
}
