package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
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
}

// serveTelemetry serves the suite's metrics and health on addr, reading the
// consumers' backlog on a connection of the ledger's role; it returns what
// stops it.
func serveTelemetry(rt *runtime.Runtime, addr string, log *slog.Logger) (bound string, stop func(), err error) {
	opts := append([]nats.Option{nats.Name("rath-up-telemetry"), nats.MaxReconnects(-1)}, client.KeepAlive()...)
	if rt.Identities != nil {
		cred, _, err := auth.Options(rt.Identities.Path(auth.RoleLedger))
		if err != nil {
			return "", nil, fmt.Errorf("metrics: %w", err)
		}
		opts = append(opts, cred...)
	}
	nc, err := nats.Connect(rt.URL, opts...)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: connect to %s: %w", rt.URL, err)
	}
	srv, err := telemetry.Serve(addr, nc, auth.AllDurables(), log)
	if err != nil {
		nc.Close()
		return "", nil, err
	}
	con, closeConsole, err := upConsole(rt, log)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		nc.Close()
		return "", nil, err
	}
	srv.Mount(con)
	return srv.Addr(), func() {
		closeConsole() // ends its live streams first: they would hold the shutdown
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		nc.Close()
	}, nil
}
