package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// consoleCmd serves the web console against any deployment, as the
// identity of --creds.
func (a *app) consoleCmd() *cobra.Command {
	addr := "127.0.0.1:8080"
	login := false
	var hosts []string
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: sessions, live timelines, lineage, approvals",
		Long: `console serves Rath's web console on --http, against the NATS of --nats, as
the identity of --creds: the sessions that identity may read, their live
timelines, events and state at any sequence, the lineage graph, verification,
the dossier, and the pending approvals it may decide. With --login each person
signs in with their own user credentials instead (the .nk file rath creds add
wrote for them, or a NATS user .creds of an operator-mode server) and the console reads and acts as them: a tenant's user
sees the tenant's sessions, and an approval records who gave it. It answers
only requests for its own address (on loopback also localhost, 127.0.0.1 and
[::1]) and the names --http-host adds, such as a proxy's in front. rath up
serves the same console on its own --http address, to whoever signed in.`,
		Example: `  rath console                       # against rath up in this directory
  rath console --nats nats://ops:4222 --creds ops.nk --http 127.0.0.1:8080
  rath console --nats nats://ops:4222 --login --http 0.0.0.0:8080 --http-host console.example.com   # behind TLS`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageError{fmt.Errorf("console: cannot listen on %s: %w", addr, err)}
			}
			defer ln.Close()
			var srv *console.Server
			var as string
			only := console.WithHosts(ln.Addr().String(), hosts...)
			if login {
				s, err := console.New(nil, slog.Default(), only, console.WithLogin(console.Login{URL: a.url, Options: []nats.Option{nats.Timeout(a.timeout)}}))
				if err != nil {
					return usageError{err}
				}
				srv, as = s, "each person signed in"
			} else {
				c, err := a.client()
				if err != nil {
					return err
				}
				s, err := console.New(c, slog.Default(), only)
				if err != nil {
					return usageError{err}
				}
				srv, as = s, c.Principal().String()
			}
			fmt.Fprintf(a.Stdout, "rath: console at http://%s/ (as %s)\n", ln.Addr(), as)
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
			hs.RegisterOnShutdown(srv.Close)
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case err := <-errc:
				return fmt.Errorf("console: %w", err)
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("console: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "http", addr, "host:port to serve the console on")
	cmd.Flags().BoolVar(&login, "login", false, "have each person sign in with their own user credentials (.nk, or a NATS .creds) and act as them, instead of as --creds")
	hostFlag(cmd, &hosts)
	return cmd
}

// upConsole is rath up's console on its address bound (hosts: the names it
// also answers to), on a connection of the client role (the identity rath
// up gives its users): whoever opens a one-time link it issues reads and
// acts as that identity, and, with credentials, each tenant user may sign
// in as themselves (ADR 0032). It returns the console and what closes its
// connection.
func upConsole(rt *runtime.Runtime, bound string, hosts []string, log *slog.Logger) (*console.Server, func(), error) {
	opts := append([]nats.Option{nats.Name("rath-up-console"), nats.MaxReconnects(-1)}, client.KeepAlive()...)
	as := client.As(events.DefaultClient) // a server without authentication
	signIn := []console.Option{console.WithHosts(bound, hosts...), console.WithLinks(console.Links{})}
	if rt.Identities != nil {
		cred, id, err := auth.Options(rt.Identities.Path(auth.RoleClient))
		if err != nil {
			return nil, nil, fmt.Errorf("console: %w", err)
		}
		opts = append(opts, cred...)
		as = client.As(id.Principal)
		signIn = append(signIn, console.WithLogin(console.Login{URL: rt.URL}))
	}
	nc, err := nats.Connect(rt.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("console: connect to %s: %w", rt.URL, err)
	}
	c, err := client.New(nc, as, client.WithSource("rath/console"))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	srv, err := console.New(c, log, signIn...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return srv, func() { srv.Close(); nc.Close() }, nil
}

// hostFlag defines --http-host, the names a console answers to besides its
// address (rath up, rath console).
func hostFlag(cmd *cobra.Command, hosts *[]string) {
	cmd.Flags().StringArrayVar(hosts, "http-host", nil, "a host name (NAME, or NAME:PORT) the console also answers to, such as a proxy's in front; requests naming any other host are refused (repeatable)")
}
