// Command go-agent is a Go program on the Session programming model: it
// serves a planner agent written in Go, starts a session whose workflow
// mixes that planner with a YAML-declared reviewer, forwards the session
// through the workflow and prints what each agent did.
//
// Start `rath up`, then, in the same directory:
//
//	go run ./examples/go-agent
//
// It connects with client.nk for the session and with agent-worker.nk
// (the identity served agents run with) for the planner; docs/security.md.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nats-io/nats.go"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.URL, "nats", nats.DefaultURL, "NATS server of the Rath runtime")
	flag.StringVar(&cfg.Creds, "creds", filepath.Join(".rath", "data", "creds"), "directory of the credentials files (client.nk, agent-worker.nk); empty: none")
	flag.StringVar(&cfg.Workflow, "workflow", filepath.Join("examples", "go-agent", "workflow.yaml"), "the workflow file")
	flag.StringVar(&cfg.ID, "id", "", "session ID (default: the ledger chooses one)")
	flag.StringVar(&cfg.Task, "task", "add a --verbose flag to the CLI", "what the session is for")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, cfg, os.Stdout, log); err != nil {
		log.Error("go-agent", "err", err)
		os.Exit(1)
	}
}
