// Command rath runs and inspects a Rath runtime: `rath up` starts NATS with
// JetStream and the session ledger in one process; the other commands start,
// append to, read, fork, merge and verify sessions through the ledger.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, env{
		Args:    os.Args[1:],
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		NATSURL: os.Getenv("RATH_NATS_URL"),
		Creds:   os.Getenv("RATH_CREDS"),
	})
	stop()
	os.Exit(code)
}
