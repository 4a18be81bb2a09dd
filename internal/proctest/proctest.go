// Package proctest supports tests that run the repository's commands as real
// OS processes: building them, and collecting what they print.
package proctest

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sync"
)

// RaceEnabled reports whether the running binary was built with the race
// detector; children are then built with it too, so a data race in a child
// shows up on its stderr.
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// Build runs one `go build` of the packages into dir (-race when the caller
// runs with it) and returns its combined output on failure.
func Build(dir string, pkgs ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if RaceEnabled() {
		args = append(args, "-race")
	}
	args = append(args, pkgs...)
	out, err := exec.Command(goTool(), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// BuildCommand runs one `go build` of a dependency's command into dir,
// never with -race: its races are not the code under test's, and the race
// detector would slow it several times over (the nats-server of
// natstest.StartClusterProcesses).
func BuildCommand(dir string, pkg string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator), pkg}
	out, err := exec.Command(goTool(), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// goTool is the go command that runs the tests (GOROOT/bin is on PATH under
// `go test`).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// LogBuffer collects a child's output; safe for the copying goroutine and
// the test to use at once.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
