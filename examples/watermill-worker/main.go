// Command watermill-worker is a Rath worker written with Watermill's router:
// it takes the pending work assigned to it in every session of its tenant
// and records it done, through the ledger, with Watermill's retry,
// poison-queue and correlation middleware. Work it cannot do is recorded in
// the session as rath.handler.failed. Start `rath up`, then, in the same
// directory:
//
//	go run ./examples/watermill-worker -nats nats://127.0.0.1:4222 -creds .rath/data/creds/client.nk
//
// See README.md.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server of the Rath runtime")
	creds := flag.String("creds", ".rath/data/creds/client.nk", "credentials file of a tenant's user")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := connectAndRun(ctx, *url, *creds, log); err != nil {
		log.Error("watermill-worker", "err", err)
		os.Exit(1)
	}
}

func connectAndRun(ctx context.Context, url, creds string, log *slog.Logger) error {
	opts, me, err := client.Credentials(creds)
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("watermill-worker"), nats.MaxReconnects(-1))
	nc, err := nats.Connect(url, append(opts, client.KeepAlive()...)...)
	if err != nil {
		return err
	}
	defer nc.Drain()
	c, err := client.New(nc, client.As(me), client.WithSource("rath/watermill-worker"))
	if err != nil {
		return err
	}
	log.Info("taking work", "nats", url, "as", me, "assignee", Assignee)
	return Run(ctx, c, log)
}
