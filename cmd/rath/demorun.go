package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/events"
)

// What rath demo and its examples (research, support) share: their flags,
// the run's data directory, the runtime with its log, and how a finished
// run ends.

// demoFlags defines the flags every demo command has; out is the
// dossier's default directory and example says what --example holds.
func demoFlags(cmd *cobra.Command, o *demoOptions, out, example string) {
	f := cmd.Flags()
	f.StringVar(&o.example, "example", "", example)
	f.StringVar(&o.data, "data", "", "JetStream storage and workspaces (default: a fresh temporary directory)")
	f.BoolVar(&o.keepData, "keep-data", false, "keep the temporary data directory")
	f.StringVar(&o.out, "out", out, "directory the dossier is written to")
	f.BoolVar(&o.serve, "serve", false, "keep the runtime up after the run, to explore it in the web console and with rath commands, until interrupted")
	f.DurationVar(&o.wait, "wait", 3*time.Minute, "give up if the run has not finished after this long")
}

// newDemoRun makes the run's data directory: --data, or a temporary one
// (named after prefix) that closing the run removes unless --keep-data.
func newDemoRun(o demoOptions, prefix string) (*demoRun, error) {
	run := &demoRun{data: o.data, out: o.out}
	if run.data != "" {
		if err := os.MkdirAll(run.data, 0o755); err != nil {
			return run, fmt.Errorf("demo data directory: %w", err)
		}
		return run, nil
	}
	var err error
	if run.data, err = os.MkdirTemp("", prefix+"-"); err != nil {
		return nil, fmt.Errorf("demo data directory: %w", err)
	}
	run.temporary = !o.keepData
	run.cleanup = append(run.cleanup, func() {
		if run.temporary {
			os.RemoveAll(run.data)
		}
	})
	return run, nil
}

// startDemoRuntime starts the run's runtime (named name, the command's
// name in what it prints), its services logging to rath.log in the data
// directory, and says where things are.
func (a *app) startDemoRuntime(ctx context.Context, run *demoRun, o demoOptions, name string) error {
	logFile, err := os.Create(filepath.Join(run.data, "rath.log"))
	if err != nil {
		return fmt.Errorf("demo log: %w", err)
	}
	run.cleanup = append(run.cleanup, func() { logFile.Close() })
	run.log = slog.New(slog.NewTextHandler(logFile, nil))
	if run.rt, err = startRuntime(ctx, o.config(run.data), runtimeName(name), run.log); err != nil {
		return err
	}
	run.rt.StartLoop()
	run.cleanup = append(run.cleanup, stopLogged(run.rt, run.log))
	if run.temporary {
		fmt.Fprintf(a.Stdout, "%s: runtime up (NATS %s; data and services' log in %s, removed at the end unless the run fails or --keep-data)\n", name, run.rt.URL, run.data)
	} else {
		fmt.Fprintf(a.Stdout, "%s: runtime up (NATS %s, data %s, services' log %s)\n", name, run.rt.URL, run.data, logFile.Name())
	}
	printSandboxes(a.Stdout, name, run.rt.Sandboxes)
	return nil
}

// runtimeName is the NATS connection name of a demo's runtime: "rath demo
// research" runs as rath-demo-research.
func runtimeName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c == ' ' {
			b[i] = '-'
		}
	}
	return string(b)
}

// finishDemo ends a demo command whose run returned err: a failed run keeps
// its data to explain it; a finished one stays up with --serve until ctx
// ends.
func (a *app) finishDemo(ctx context.Context, name string, o demoOptions, run *demoRun, err error) error {
	if run != nil {
		defer run.close()
	}
	if err != nil {
		if run != nil && run.temporary {
			// A failed run keeps what explains it.
			run.temporary = false
			fmt.Fprintf(a.Stderr, "%s: the run's data and services' log are kept in %s\n", name, run.data)
		}
		return err
	}
	if !o.serve {
		fmt.Fprintf(a.Stdout, "%s: to look around the run (the web console, rath log, graph, audit), run it again with --serve\n", name)
		return nil
	}
	a.serveDemo(ctx, run)
	return nil
}

// followDemo prints the run's events as they arrive (each also goes to
// also, with the progress, when given), until the returned stop is called.
func (a *app) followDemo(run *demoRun, also func(*demoProgress, *nats.Msg)) (*demoProgress, func(), error) {
	progress := newDemoProgress(a.Stdout)
	sub, err := run.rt.Conn.Subscribe(events.TenantLiveWildcard(events.DefaultTenant), func(m *nats.Msg) {
		progress.onMsg(m)
		if also != nil {
			also(progress, m)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("demo: follow events: %w", err)
	}
	stop := func() { _ = sub.Unsubscribe() }
	if err := run.rt.Conn.Flush(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("demo: follow events: %w", err)
	}
	return progress, stop, nil
}
