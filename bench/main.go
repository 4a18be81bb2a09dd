// Command bench measures the Rath session ledger against raw JetStream in one
// run: one embedded server, the same payloads, and one markdown table with
// each Rath figure next to the raw JetStream figure and their ratio.
//
//	go run ./bench            # full scale (several minutes on 2 cores)
//	go run ./bench --quick    # everything at 1/10 scale, about a minute
//	go run ./bench --sync-always --scale 0.1
//
// Sections 1-3 run the ledger in this process (service.Run on an in-process
// connection, as `rath up` does); section 4 runs the session-ledger binary,
// built into a temporary directory, as its own process so that its resident
// memory can be read. Section 5 (agents) runs the selector, agent worker and
// tool runner on top: in this process for per-hop latencies, then as 1, 2
// and 4 OS processes of each for completed sessions per second.
// docs/benchmarks.md has the results and what they mean.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
