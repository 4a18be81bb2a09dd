package sandbox_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// callBackends are the backends and start modes whose calls run in a
// control group of their own: the tests of the call's limits run in each.
var callBackends = []struct {
	name string
	make func(t *testing.T, lim func(*sandbox.Limits)) *sandbox.Local
}{
	{"bwrap", func(t *testing.T, lim func(*sandbox.Limits)) *sandbox.Local {
		return newIsolated(t, func(c *sandbox.Config, _ *sandbox.Isolation) { lim(&c.Limits) })
	}},
	{"ptrace", func(t *testing.T, lim func(*sandbox.Limits)) *sandbox.Local {
		return newLocalIn(t, "ptrace", func(c *sandbox.Config) { lim(&c.Limits) })
	}},
	{"helper", func(t *testing.T, lim func(*sandbox.Limits)) *sandbox.Local {
		return newLocalIn(t, "helper", func(c *sandbox.Config) { lim(&c.Limits) })
	}},
}

// needCgroups fails a test on a host whose runner gets no control groups:
// the tests run as root (.ci/run) on cgroup v1 or a delegated v2.
func needCgroups(t *testing.T, l *sandbox.Local) {
	t.Helper()
	if by := l.CallLimitsBy(); !strings.HasPrefix(by, "cgroup") {
		t.Fatalf("no control group for a call here (%s): run the tests as root on cgroup v1 or with a delegated cgroup v2", by)
	}
}

var groupRe = regexp.MustCompile(`cgroup v\d (rath-calls/[0-9]+-[0-9]+)\)`)

// callGroupGone fails unless the call's control group, named in its
// limits, is gone from every hierarchy.
func callGroupGone(t *testing.T, l *sandbox.Local, res sandbox.Result) {
	t.Helper()
	m := groupRe.FindStringSubmatch(res.Limits)
	if m == nil {
		t.Fatalf("limits %q name no control group", res.Limits)
	}
	for _, dir := range sandbox.CallGroupParents() {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(m[1]))); !os.IsNotExist(err) {
			t.Errorf("the call's group %s is left in %s (%v)", m[1], dir, err)
		}
	}
}

func TestCallMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, b := range callBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			l := b.make(t, func(lim *sandbox.Limits) {
				lim.Memory = 0 // no address-space limit: the group's must hold
				lim.CallMemory = 32 << 20
			})
			needCgroups(t, l)
			ws := place(t, l, "s1", nil)
			// The shell keeps 100 MB in a variable: far past the limit.
			res := run(t, ws, sh(`x=$(head -c 100000000 /dev/zero | tr '\0' a); echo ${#x}`))
			if res.ExitCode == 0 || !strings.HasPrefix(res.Stopped, "memory limit 33554432 bytes of the call (the kernel killed ") {
				t.Errorf("100 MB under a 32 MiB limit: %+v, want stopped by the call's memory limit", res)
			}
			callGroupGone(t, l, res)
		})
	}
}

func TestCallProcessLimit(t *testing.T) {
	t.Parallel()
	for _, b := range callBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			l := b.make(t, func(lim *sandbox.Limits) { lim.CallProcesses = 20 })
			needCgroups(t, l)
			ws := place(t, l, "s1", nil)
			// A fork bomb that leaves its processes running, some of them
			// in sessions of their own, out of the command's group.
			res := run(t, ws, sh(`i=0; while [ $i -lt 200 ]; do setsid sleep 300 & sleep 300 & i=$((i+1)); done; wait`))
			if res.ExitCode == 0 || !strings.HasPrefix(res.Stopped, "process limit 20 of the call (") {
				t.Errorf("200 forks under a limit of 20: %+v, want stopped by the call's process limit", res)
			}
			callGroupGone(t, l, res)
		})
	}
}

func TestCallCPULimit(t *testing.T) {
	t.Parallel()
	for _, b := range callBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			l := b.make(t, func(lim *sandbox.Limits) {
				lim.CPU = 20 * time.Second // each process stays under its own limit
				lim.CallCPU = time.Second
			})
			needCgroups(t, l)
			ws := place(t, l, "s1", nil)
			res := run(t, ws, sh(`for i in 1 2 3 4; do (while :; do :; done) & done; wait`))
			if !res.Killed || res.TimedOut || !strings.HasPrefix(res.Stopped, "CPU-time limit 1s of the call (its processes together used ") {
				t.Errorf("four busy loops under a call CPU limit of 1s: %+v, want stopped by it", res)
			}
			callGroupGone(t, l, res)
		})
	}
}

// TestCallLeavesNoProcess: a process that left the command's process
// group and session is still in the call's control group, and is killed
// with it. (Before control groups it survived the call.)
func TestCallLeavesNoProcess(t *testing.T) {
	t.Parallel()
	for _, m := range startModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			l := newLocalIn(t, m.name)
			needCgroups(t, l)
			ws := place(t, l, "s1", nil)
			res := run(t, ws, sh(`setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $!`))
			if res.ExitCode != 0 {
				t.Fatalf("%+v", res)
			}
			pid := strings.TrimSpace(res.Stdout)
			// The orphan is reaped by the host's init: a zombie is gone
			// too.
			if b, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil && !bytes.Contains(b, []byte(") Z ")) && bytes.Contains(b, []byte("(sleep)")) {
				t.Errorf("sleep %s survived the call: %s", pid, b)
			}
			callGroupGone(t, l, res)
		})
	}
}

var (
	probeOnce sync.Once
	probeBin  string
	probeErr  error
)

// syscallsProbe builds testdata/syscalls once per test binary.
func syscallsProbe(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rath-syscalls-")
		if err != nil {
			probeErr = err
			return
		}
		probeBin = filepath.Join(dir, "syscalls")
		out, err := exec.Command("go", "build", "-o", probeBin, "./testdata/syscalls").CombinedOutput()
		if err != nil {
			probeErr = err
			probeBin = string(out)
		}
	})
	if probeErr != nil {
		t.Fatalf("build testdata/syscalls (needs go): %v: %s", probeErr, probeBin)
	}
	return probeBin
}

// TestIsolatedSeccomp: what the filter denies fails with EPERM inside the
// sandbox, and the limits say the filter is there.
func TestIsolatedSeccomp(t *testing.T) {
	t.Parallel()
	bin := syscallsProbe(t)
	l := newIsolated(t)
	ws := place(t, l, "s1", nil)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, ws.Dir(), map[string]string{"syscalls": string(b)})
	if err := os.Chmod(filepath.Join(ws.Dir(), "syscalls"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := run(t, ws, sandbox.Cmd{Args: []string{"./syscalls", "unshare", "mount", "keyctl", "add_key", "bpf", "io_uring_setup", "personality", "ptrace"}})
	want := "unshare EPERM\nmount EPERM\nkeyctl EPERM\nadd_key EPERM\nbpf EPERM\nio_uring_setup EPERM\npersonality EPERM\nptrace EPERM\n"
	if res.ExitCode != 0 || res.Stdout != want {
		t.Errorf("denied calls:\n%s\nwant:\n%s(result %+v)", res.Stdout, want, res)
	}
	if !regexp.MustCompile(`seccomp=\d+-calls-denied`).MatchString(res.Limits) {
		t.Errorf("limits %q do not name the seccomp filter", res.Limits)
	}
	// util-linux's unshare, as a user would try it.
	res = run(t, ws, sandbox.Cmd{Args: []string{"unshare", "-r", "true"}})
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Operation not permitted") {
		t.Errorf("unshare -r: %+v, want refused", res)
	}
	// What the filter allows still works: the shell, pipes, a fork.
	res = run(t, ws, sh(`echo a | tr a b`))
	if res.ExitCode != 0 || res.Stdout != "b\n" {
		t.Errorf("a pipeline under the filter: %+v", res)
	}
}

// TestIsolatedCannotLeaveCallGroup: a command that tries to move itself to
// its group's parent finds no cgroup file system to write to: bwrap shows
// no /sys, and the filter refuses the mount that would show one.
func TestIsolatedCannotLeaveCallGroup(t *testing.T) {
	t.Parallel()
	bin := syscallsProbe(t)
	l := newIsolated(t)
	needCgroups(t, l)
	ws := place(t, l, "s1", nil)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, ws.Dir(), map[string]string{"syscalls": string(b)})
	if err := os.Chmod(filepath.Join(ws.Dir(), "syscalls"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := run(t, ws, sandbox.Cmd{Args: []string{"./syscalls", "cgroup", "mount"}})
	if res.ExitCode != 0 || res.Stdout != "cgroup ENOENT\nmount EPERM\n" {
		t.Errorf("leaving the call's group: %+v", res)
	}
	res = run(t, ws, sh(`echo 0 > /sys/fs/cgroup/memory/cgroup.procs || echo refused; ls /sys 2>&1 | head -1`))
	if !strings.HasPrefix(res.Stdout, "refused\n") {
		t.Errorf("the shell's way out: %+v", res)
	}
	callGroupGone(t, l, res)
}

// TestCallGroupOff: with cgroups turned off, the limits say that only the
// per-process limits hold.
func TestCallGroupOff(t *testing.T) {
	t.Parallel()
	l := newLocal(t, func(c *sandbox.Config) { c.NoCgroup = true })
	if by := l.CallLimitsBy(); !strings.HasPrefix(by, "none: ") {
		t.Errorf("CallLimitsBy = %q", by)
	}
	res := run(t, place(t, l, "s1", nil), sh("true"))
	if !strings.Contains(res.Limits, "call-limits=none (no cgroup: turned off by the configuration)") {
		t.Errorf("limits %q", res.Limits)
	}
}

func TestConfigRejectsNegativeCallLimits(t *testing.T) {
	for _, set := range []func(*sandbox.Limits){
		func(l *sandbox.Limits) { l.CallMemory = -1 },
		func(l *sandbox.Limits) { l.CallProcesses = -1 },
		func(l *sandbox.Limits) { l.CallCPU = -time.Second },
	} {
		cfg := sandbox.DefaultConfig()
		cfg.Root = t.TempDir()
		set(&cfg.Limits)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v accepted", cfg.Limits)
		}
	}
}

// On gvisor the call's group holds gVisor's sandbox as a whole: the CPU
// its processes burn (on the ptrace platform, in stub processes on the
// host) counts toward the call's limit.
func TestGVisorCallCPULimit(t *testing.T) {
	t.Parallel()
	l := newIsolating(t, sandbox.BackendGVisor, func(c *sandbox.Config, _ *sandbox.Isolation) {
		c.Limits.CPU = 20 * time.Second
		c.Limits.CallCPU = time.Second
		c.Limits.Timeout = 2 * time.Minute
	})
	needCgroups(t, l)
	ws := place(t, l, "s1", nil)
	res := run(t, ws, sh(`for i in 1 2; do (while :; do :; done) & done; wait`))
	if !res.Killed || res.TimedOut || !strings.HasPrefix(res.Stopped, "CPU-time limit 1s of the call (its processes together used ") {
		t.Errorf("busy loops on gvisor under a call CPU limit of 1s: %+v, want stopped by it", res)
	}
	callGroupGone(t, l, res)
}
