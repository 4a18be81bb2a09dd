package sandbox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// startModes are the two ways the local backend starts a command: traced
// (the runner sets the limits on the command stopped after its execve) and
// through the spawn helper. Tests of what a command sees run in both.
var startModes = []struct {
	name string
	opt  func(*sandbox.Config)
}{
	{"ptrace", func(*sandbox.Config) {}},
	{"helper", func(c *sandbox.Config) { c.NoTrace = true }},
}

// newLocalIn is newLocal started in mode m, failing when the mode is not
// what the backend uses.
func newLocalIn(t *testing.T, m string, opts ...func(*sandbox.Config)) *sandbox.Local {
	t.Helper()
	for _, sm := range startModes {
		if sm.name == m {
			opts = append(opts, sm.opt)
		}
	}
	l := newLocal(t, opts...)
	if got := l.LimitsBy(); !strings.HasPrefix(got, m) {
		t.Fatalf("the local backend sets limits by %q, want %s (ptrace needs Yama's ptrace_scope ≤ 1 and no seccomp profile refusing it)", got, m)
	}
	return l
}

func TestRunBasics(t *testing.T) {
	t.Parallel()
	for _, m := range startModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testRunBasics(t, place(t, newLocalIn(t, m.name), "s1", nil))
		})
	}
}

func testRunBasics(t *testing.T, ws sandbox.Workspace) {

	res := run(t, ws, sandbox.Cmd{Args: []string{"pwd"}})
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != ws.Dir() {
		t.Errorf("pwd: %+v, want the workspace %s", res, ws.Dir())
	}
	res = run(t, ws, sh("echo out; echo err >&2; exit 3"))
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || res.StdoutBytes != 4 || res.Killed || res.TimedOut || res.Truncated {
		t.Errorf("exit 3: %+v", res)
	}
	res = run(t, ws, sandbox.Cmd{Args: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
	if res.Stdout != "from stdin" {
		t.Errorf("cat: %+v", res)
	}
	// No shell unless asked for: the argument is one argv entry, not a script.
	res = run(t, ws, sandbox.Cmd{Args: []string{"echo", "$HOME; rm -rf x"}})
	if res.Stdout != "$HOME; rm -rf x\n" {
		t.Errorf("echo: %+v", res)
	}
	res = run(t, ws, sandbox.Cmd{Args: []string{"no-such-command-rath"}})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "no-such-command-rath") {
		t.Errorf("missing command: %+v, want exit 127 naming it", res)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir(), "not-executable"), []byte("echo ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = run(t, ws, sandbox.Cmd{Args: []string{"./not-executable"}})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "not-executable") || !strings.Contains(res.Stderr, "permission denied") || res.Stdout != "" {
		t.Errorf("a file that is not executable: %+v, want exit 127 naming it", res)
	}
	// A relative PATH entry is the workspace's directory, in both modes.
	if err := os.WriteFile(filepath.Join(ws.Dir(), "here"), []byte("#!/bin/sh\necho here\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res = run(t, ws, sh("PATH=.:$PATH exec here"))
	if res.Stdout != "here\n" {
		t.Errorf("a command in the workspace: %+v", res)
	}
	if _, err := ws.Run(context.Background(), sandbox.Cmd{}); err == nil {
		t.Error("empty command: no error")
	}
}

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t), "s1", nil)
	c := sh("sleep 100 & echo $!; sleep 100")
	// Long enough for the shell to print the pid under a loaded -race run
	// (200 ms was not).
	c.Timeout = 2 * time.Second
	res := run(t, ws, c)
	if !res.TimedOut || !res.Killed || res.ExitCode != 128+int(syscall.SIGKILL) || res.Stopped != "wall-time limit 2s" {
		t.Fatalf("got %+v, want timed out and killed", res)
	}
	waitGone(t, res.Stdout)
}

func TestRunKillsLeftovers(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t), "s1", nil)
	// The background job keeps stdout open: without the group kill after the
	// leader exits, Run would wait for it.
	res := run(t, ws, sh("sleep 100 & echo $!"))
	if res.ExitCode != 0 || res.TimedOut || res.Killed {
		t.Fatalf("got %+v, want a clean exit", res)
	}
	waitGone(t, res.Stdout)
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t), "s1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := ws.Run(ctx, sandbox.Cmd{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// Stdin is read only once the command has started: reading it cancels.
	c := sandbox.Cmd{Args: []string{"sleep", "100"}, Stdin: cancelReader(cancel)}
	res, err := ws.Run(ctx, c)
	if !errors.Is(err, context.Canceled) || !res.Killed || res.TimedOut {
		t.Fatalf("got %+v, %v; want killed and context.Canceled", res, err)
	}
	if _, err := ws.Run(ctx, sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("run with a cancelled context: %v", err)
	}
}

type cancelReader context.CancelFunc

func (c cancelReader) Read([]byte) (int, error) {
	c()
	return 0, io.EOF
}

// waitGone waits, without polling, until the process whose pid is printed in
// out has exited (a zombie counts: it runs nothing).
func waitGone(t *testing.T, out string) {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("no pid in %q", out)
	}
	const sysPidfdOpen = 434 // the same on every Linux architecture
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return
	}
	if errno != 0 {
		t.Fatalf("pidfd_open %d: %v", pid, errno)
	}
	defer syscall.Close(int(fd))
	// A pidfd becomes readable when its process exits.
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (fd % 64)
	tv := syscall.Timeval{Sec: 10}
	for {
		n, err := syscall.Select(int(fd)+1, &set, nil, nil, &tv)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("process %d still running", pid)
		}
		return
	}
}

func TestRunMemoryLimit(t *testing.T) {
	t.Parallel()
	// dd allocates its whole block up front, so it fails at once under a
	// lower address-space limit and succeeds quickly without one.
	dd := sandbox.Cmd{Args: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"}}

	limited := place(t, newLocal(t, func(c *sandbox.Config) { c.Limits.Memory = 64 << 20 }), "s1", nil)
	res := run(t, limited, dd)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "memory exhausted") {
		t.Errorf("under 64 MiB: %+v, want dd to fail for memory", res)
	}
	if !strings.Contains(res.Limits, "as=67108864B") {
		t.Errorf("limits %q do not mention the address-space limit", res.Limits)
	}

	unlimited := place(t, newLocal(t, func(c *sandbox.Config) { c.Limits.Memory = 0 }), "s1", nil)
	if res := run(t, unlimited, dd); res.ExitCode != 0 {
		t.Errorf("unlimited: %+v, want success", res)
	}
}

func TestRunRlimitsInChild(t *testing.T) {
	t.Parallel()
	for _, m := range startModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testRlimitsInChild(t, m.name)
		})
	}
}

func testRlimitsInChild(t *testing.T, mode string) {
	ws := place(t, newLocalIn(t, mode, func(c *sandbox.Config) {
		c.Limits.CPU = 7 * time.Second
		c.Limits.Memory = 512 << 20
		c.Limits.OpenFiles = 64
		c.Limits.FileSize = 1 << 20
	}), "s1", nil)
	// dash reports -v in KiB and -f in 512-byte blocks.
	res := run(t, ws, sh("ulimit -t; ulimit -v; ulimit -n; ulimit -f"))
	if got, want := strings.Fields(res.Stdout), []string{"7", "524288", "64", "2048"}; !slices.Equal(got, want) {
		t.Errorf("child limits %q, want %q (result %+v)", got, want, res)
	}
	if want := "timeout=20s cpu=7s nofile=64 fsize=1048576B as=536870912B "; !strings.HasPrefix(res.Limits, want) {
		t.Errorf("limits reported %q, want %q", res.Limits, want)
	}

	// Writing past RLIMIT_FSIZE kills with SIGXFSZ and leaves the file at
	// the limit.
	res = run(t, ws, sandbox.Cmd{Args: []string{"dd", "if=/dev/zero", "of=big", "bs=1M", "count=2"}})
	if !res.Killed || res.ExitCode != 128+int(syscall.SIGXFSZ) || res.Stopped != "file-size limit" {
		t.Errorf("dd past the file size limit: %+v, want killed by SIGXFSZ", res)
	}
	if fi, err := os.Stat(filepath.Join(ws.Dir(), "big")); err != nil || fi.Size() != 1<<20 {
		t.Errorf("big: %v, %v; want 1 MiB", fi, err)
	}
}

func TestRunCPULimit(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t, func(c *sandbox.Config) { c.Limits.CPU = time.Second }), "s1", nil)
	res := run(t, ws, sh("while :; do :; done"))
	if !res.Killed || res.TimedOut || res.Stopped != "CPU-time limit 1s of a process" {
		t.Errorf("busy loop: %+v, want killed by the CPU limit", res)
	}
}

// TestRunHugeOutput is not parallel: it measures the process's allocations.
func TestRunHugeOutput(t *testing.T) {
	ws := place(t, newLocal(t, func(c *sandbox.Config) { c.Limits.Output = 1 << 20 }), "s1", nil)
	const total = 50_000_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := run(t, ws, sh("yes | head -c 50000000; echo done >&2"))
	runtime.ReadMemStats(&after)
	if res.ExitCode != 0 || !res.Truncated || res.StdoutBytes != total || len(res.Stdout) != 1<<20 {
		t.Fatalf("got exit %d, truncated %v, %d bytes, %d kept", res.ExitCode, res.Truncated, res.StdoutBytes, len(res.Stdout))
	}
	if res.Stderr != "done\n" || res.StderrBytes != 5 {
		t.Errorf("stderr %q (%d bytes)", res.Stderr, res.StderrBytes)
	}
	if !strings.HasPrefix(res.Stdout, "y\ny\n") {
		t.Errorf("stdout starts %q", res.Stdout[:10])
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("allocated %d bytes for %d bytes of output: output is buffered", alloc, total)
	}
}

// TestRunEnvironment is not parallel: it sets an environment variable.
func TestRunEnvironment(t *testing.T) {
	t.Setenv("RATH_TEST_SECRET", "hunter2")
	ws := place(t, newLocal(t, func(c *sandbox.Config) {
		c.Env = []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}
	}), "s1", nil)
	res := run(t, ws, sandbox.Cmd{Args: []string{"env"}})
	if strings.Contains(res.Stdout, "hunter2") || strings.Contains(res.Stdout, "RATH_TEST_SECRET") {
		t.Fatalf("the secret reached the child:\n%s", res.Stdout)
	}
	env := map[string]string{}
	for line := range strings.Lines(res.Stdout) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	var keys []string
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"GOFLAGS", "GOPROXY", "HOME", "LANG", "PATH", "TMPDIR"}; !slices.Equal(keys, want) {
		t.Errorf("child environment has %q, want %q", keys, want)
	}
	if env["LANG"] != "C.UTF-8" || env["GOFLAGS"] != "-mod=mod" {
		t.Errorf("LANG=%q GOFLAGS=%q", env["LANG"], env["GOFLAGS"])
	}
	for _, k := range []string{"HOME", "TMPDIR"} {
		if strings.HasPrefix(env[k], ws.Dir()) {
			t.Errorf("%s=%s is inside the workspace, where it would be committed", k, env[k])
		}
	}
	// The per-run directories are usable, and gone after the run.
	res = run(t, ws, sh(`touch "$HOME/h" "$TMPDIR/t" && echo "$HOME"`))
	if res.ExitCode != 0 {
		t.Fatalf("writing HOME and TMPDIR: %+v", res)
	}
	if _, err := os.Stat(strings.TrimSpace(res.Stdout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("HOME of a finished run still exists: %v", err)
	}
}

// The helper as a binary of its own (services/tool-runner/rath-sandbox-exec,
// Config.Helper) runs commands as the runner's own binary does: the same
// limits reach the command. The configured helper is what every command
// starts as (a helper that is `true` runs nothing), and a helper that is
// not an executable file is refused when the backend is made.
func TestHelperBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := proctest.BuildCommand(dir, "github.com/openrath/rath/services/tool-runner/rath-sandbox-exec"); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, sandbox.HelperName)
	l := newLocal(t, func(c *sandbox.Config) {
		c.Helper = helper
		c.NoTrace = true
		c.Limits.CPU = 7 * time.Second
		c.Limits.OpenFiles = 64
	})
	if l.Helper() != helper {
		t.Fatalf("helper %q, want %q", l.Helper(), helper)
	}
	res := run(t, place(t, l, "s1", nil), sh("ulimit -t; ulimit -n; echo ran"))
	if got, want := strings.Fields(res.Stdout), []string{"7", "64", "ran"}; !slices.Equal(got, want) || res.ExitCode != 0 {
		t.Errorf("through the helper binary: %q, want %q (result %+v)", got, want, res)
	}

	truth, err := exec.LookPath("true")
	if err != nil {
		t.Fatal("the test needs true(1) on PATH")
	}
	fake := newLocal(t, func(c *sandbox.Config) { c.Helper, c.NoTrace = truth, true })
	if res, err := place(t, fake, "s2", nil).Run(context.Background(), sh("echo ran")); err == nil && strings.Contains(res.Stdout, "ran") {
		t.Errorf("a command ran past a helper that runs nothing: %+v", res)
	}

	cfg := sandbox.DefaultConfig()
	cfg.Root, cfg.Helper = t.TempDir(), dir
	if _, err := sandbox.NewLocal(cfg); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("a directory as the helper: %v", err)
	}
}

// A traced start passes on no descriptor the runner's process inherited
// without close-on-exec (a socket a supervisor passed), as the helper
// closes them in its own process.
func TestTracedStartClosesInherited(t *testing.T) {
	// Not parallel: the descriptor is this process's.
	fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	ws := place(t, newLocalIn(t, "ptrace"), "s1", nil)
	res := run(t, ws, sh("ls /proc/$$/fd"))
	if got := strings.Fields(res.Stdout); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("the command's descriptors %q, want 0 1 2 (the runner's %d must not reach it)", got, fd)
	}
}
