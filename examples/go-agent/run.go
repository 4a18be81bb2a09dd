package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// config is the program's configuration, read once from its flags.
type config struct {
	URL      string
	Creds    string // directory of client.nk and agent-worker.nk; "": none
	Workflow string
	ID       string
	Task     string
}

// run serves the planner and the hand-over router, runs one session through
// the workflow and prints its turns; it returns once the session closed (or
// ctx ended), with both servers stopped.
func run(ctx context.Context, cfg config, out io.Writer, log *slog.Logger) error {
	user, err := connect(cfg, "client.nk", "go-agent")
	if err != nil {
		return err
	}
	defer user.Drain()
	agents, err := connect(cfg, "agent-worker.nk", "go-agent-planner")
	if err != nil {
		return err
	}
	defer agents.Drain()
	c, err := client.New(user)
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	serving, stopServing := context.WithCancel(gctx)
	g.Go(func() error {
		return agentserver.Serve(serving, agents, "planner", planner{}, agentserver.WithLogger(log))
	})
	g.Go(func() error {
		return agentserver.ServeRouter(serving, agents, "handover", handover{}, agentserver.WithLogger(log))
	})
	g.Go(func() error {
		defer stopServing()
		return drive(gctx, c, cfg, out)
	})
	return g.Wait()
}

// drive is the Session programming model: start, forward, inspect.
func drive(ctx context.Context, c *client.Client, cfg config, out io.Writer) error {
	// The workflow file and the scripts it names are stored as one bundle,
	// which the session runs.
	wf, err := workflowfile.Store(ctx, c, cfg.Workflow)
	if err != nil {
		return err
	}
	s, err := rath.Start(ctx, c, rath.StartOptions{ID: cfg.ID, Workflow: wf, Task: cfg.Task})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "started %s\n", s)
	// The selector routes it: planner, planner again once its file is
	// written, then (asking the router) the reviewer, then the close.
	if s, err = s.Forward(ctx, rath.Workflow{}); err != nil {
		return err
	}
	st, err := s.State(ctx)
	if err != nil {
		return err
	}
	for _, ch := range st.Chunks {
		if ch.Agent != "" && ch.Role == "assistant" {
			fmt.Fprintf(out, "%-8s %s\n", ch.Agent+":", ch.Content)
		}
	}
	calls, err := s.ToolCalls(ctx)
	if err != nil {
		return err
	}
	for _, call := range calls {
		fmt.Fprintf(out, "tool     %s by %s: %s\n", call.Tool, call.Agent, call.Status)
	}
	fmt.Fprintf(out, "closed   %s at %d: %s (%s)\n", s.ID(), s.Head(), st.Outcome, st.CloseReason)
	fmt.Fprintf(out, "evidence rath export %s --out dossier\n", s.ID())
	return nil
}

// connect opens a connection with the credentials file name in the
// credentials directory (none if cfg.Creds is empty).
func connect(cfg config, file, name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1)}
	if cfg.Creds != "" {
		auth, _, err := client.Credentials(filepath.Join(cfg.Creds, file))
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s as %s: %w", cfg.URL, file, err)
	}
	return nc, nil
}
