// Command bench measures Rath against raw JetStream in one run: one
// embedded server, the same payloads, and one markdown table with each Rath
// figure next to the raw JetStream figure and their ratio. It keeps the rows
// the targets cite (ADR 0038); narrower figures are `go test -bench`
// benchmarks in the packages they measure.
//
//	go run ./bench            # the default sections at full scale
//	go run ./bench --quick    # the same at 1/10 scale
//	go run ./bench --sections engine
//
// The default sections run in this order: agents (5a‴, 5a‴ raw, 5b: the
// selector, agent worker and tool runner in this process, then as 1, 2 and
// 4 OS processes of each), long (L1), append (1d), memory (4: the
// session-ledger binary as its own process, so that its resident memory can
// be read) and recall (R1, R3). The others run only when --sections names
// them: goapi (G1, G2), recheck (E2), eval (E1), engine (O3, O5, O6,
// O6r: `rath up` built from this tree as its own process) and gateway (A1,
// A2: the model gateway).
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
