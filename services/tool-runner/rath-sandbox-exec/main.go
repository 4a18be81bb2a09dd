// Command rath-sandbox-exec is the tool runner's spawn helper as a binary of
// its own: the first process of every sandboxed command, which applies the
// run's limits, stages what an isolated run shows and executes the command
// (package spawn, ADR 0009, ADR 0019). The runner starts it from beside its
// own executable (sandbox.Config.Helper); without it the runner re-executes
// itself as the helper, which works the same but costs every command the
// start of a large binary.
//
// It imports nothing but the helper, so it starts sooner than a large
// binary: ~10 ms of CPU on the machine of docs/benchmarks.md, against
// 20–30 for the runner's own.
// Run any other way than as the runner runs it, it says what it is and
// exits 2.
package main

import (
	"syscall"

	// Its init runs the helper and never returns when argv[0] is
	// spawn.Arg0.
	_ "github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

func main() {
	syscall.Write(2, []byte("rath-sandbox-exec: the tool runner's sandbox helper; it runs only as the runner starts it (argv[0] rath-sandbox-exec, limits, command)\n"))
	syscall.Exit(2)
}
