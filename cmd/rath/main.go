// Command rath runs and inspects a Rath runtime: `rath up` starts NATS with
// JetStream and Rath's five services in one process; the other commands start,
// append to, read, fork, merge and verify sessions through the ledger.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, env{
		Args:    os.Args[1:],
		Self:    selfCommand(os.Args[0]),
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		NATSURL: os.Getenv("RATH_NATS_URL"),
		Creds:   os.Getenv("RATH_CREDS"),
	})
	stop()
	os.Exit(code)
}

// selfCommand is the command that runs this rath again from the same
// working directory, for the commands rath prints for its user to paste:
// `go run ./cmd/rath` when go run built it (its binary is in a go-build
// directory that is gone once it exits), otherwise the name it was run by
// (rath when the shell found it on PATH, ./rath when it was not).
func selfCommand(arg0 string) string {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/rath"
	}
	return arg0
}
