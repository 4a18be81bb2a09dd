package sandbox

import (
	"os"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

// Resource limits are set in the child, before it executes the command, by
// a re-exec of the runner's own binary as the spawn helper (package spawn,
// which says why). Every binary that imports this package can act as the
// helper, including test binaries.

func init() {
	// The network forwarder (network.go) runs inside a sandbox; it needs
	// package net, so it starts here rather than in package spawn.
	if len(os.Args) > 1 && os.Args[1] == forwardFlag {
		forwardMain(os.Args[2:])
	}
}

// newRlimits is the helper's limits for l.
func newRlimits(l Limits) spawn.Limits {
	r := spawn.Limits{AS: l.Memory, NoFile: l.OpenFiles, FSize: l.FileSize}
	if l.CPU > 0 {
		r.CPU = int64((l.CPU + time.Second - 1) / time.Second)
	}
	return r
}
