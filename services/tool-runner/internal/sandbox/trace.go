package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

// The local backend sets a command's limits without the spawn helper when
// the kernel lets it trace its own children (docs/benchmarks.md, issue 11
// L4): the command is started with PTRACE_TRACEME, so it stops at its first
// instruction after execve, before any of its code runs; the runner sets
// its limits with prlimit(2) and detaches. A helper start is a Go program's
// start, ~10 ms of CPU on a machine whose page faults are slow; a stop and
// a detach are a few system calls. Where ptrace is refused (Yama's
// ptrace_scope 3, or 2 without CAP_SYS_PTRACE; a seccomp profile), the
// helper sets them, as the isolating backend's always does (it also stages
// mounts and changes user, which must happen before execve).
//
// What the helper did besides limits needs nothing per command here:
// descriptors the runner inherited are marked close-on-exec once
// (closeInherited), and the command's path is resolved as the helper
// resolves it (spawn.LookPath).

// traces reports whether commands of the local backend start traced,
// probing once: a traced start of `true` from the commands' PATH.
func (l *Local) traces() bool {
	l.traceOnce.Do(func() {
		if l.cfg.NoTrace {
			l.traceErr = errors.New("off (NoTrace)")
			return
		}
		l.traceErr = closeInherited()
		if l.traceErr == nil {
			l.traceErr = l.probeTrace()
		}
	})
	return l.traceErr == nil && !l.traceRefused.Load()
}

// LimitsBy says how the backend sets a command's limits: "ptrace" (the
// runner, on the stopped command) or "helper" (the spawn helper), with why
// the local backend cannot use ptrace.
func (l *Local) LimitsBy() string {
	switch {
	case l.iso != nil:
		return "helper"
	case l.traces():
		return "ptrace"
	case l.traceErr == nil:
		return "helper (ptrace: refused since the probe)"
	}
	return "helper (ptrace: " + l.traceErr.Error() + ")"
}

func (l *Local) probeTrace() error {
	env := []string{"PATH=" + l.cfg.Path}
	path, err := spawn.LookPath("true", env, "")
	if err != nil {
		return fmt.Errorf("no probe command: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: []string{"true"}, Env: env, Dir: "/",
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if _, err := startTraced(cmd, spawn.Limits{}, nil); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("traced true: %w", err)
	}
	return nil
}

// startTraced starts cmd stopped after its execve, sets the limits r on it,
// moves it into the call's control group with join (when not nil: it has
// started nothing yet) and lets it run. It returns the limits' report, as the helper writes it
// on its status pipe. On an error the command is not running: it was never
// started, or it was killed and waited for.
func startTraced(cmd *exec.Cmd, r spawn.Limits, join func(pid int) error) (string, error) {
	cmd.SysProcAttr.Ptrace = true
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return "", err
	}
	pid := cmd.Process.Pid
	abandon := func(err error) (string, error) {
		killGroup(pid)
		_ = cmd.Wait()
		return "", err
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return abandon(fmt.Errorf("wait for %s to start: %w", cmd.Args[0], err))
		}
		break
	}
	if !ws.Stopped() {
		// Killed before its stop: reaped above, so Wait cannot tell.
		_ = cmd.Wait()
		return "", fmt.Errorf("%s ended before its limits were set (%s)", cmd.Args[0], describe(ws))
	}
	if join != nil {
		if err := join(pid); err != nil {
			return abandon(err)
		}
	}
	report := spawn.Apply(pid, r)
	as, asReport := spawn.AddressSpace(pid, r.AS)
	if as != nil {
		if err := spawn.Prlimit(pid, syscall.RLIMIT_AS, as); err != nil {
			return abandon(fmt.Errorf("set the address-space limit of %s: %w", cmd.Args[0], err))
		}
	}
	report = append(report, asReport)
	// The stop is the exec's SIGTRAP: nothing signals the command's new
	// process group before it is let go (and a stop before its execve would
	// hold Start, which waits for the execve with vfork semantics). A stop
	// for any other signal passes that signal on when it is let go.
	sig := 0
	if s := ws.StopSignal(); s != syscall.SIGTRAP {
		sig = int(s)
	}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PTRACE, syscall.PTRACE_DETACH, uintptr(pid), 0, uintptr(sig), 0, 0); e != 0 {
		return abandon(fmt.Errorf("let %s run: %w", cmd.Args[0], e))
	}
	return strings.Join(report, " "), nil
}

// describe says how a process that was not stopped ended.
func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// closeInherited marks every descriptor above stderr close-on-exec in the
// runner's process, once: Go opens its own so, and one the runner was
// started with (a socket a supervisor passed) must not reach a command.
// The helper does the same in each command's process.
// It needs close_range(2) with CLOSE_RANGE_CLOEXEC (Linux 5.11).
func closeInherited() error {
	const sysCloseRange, closeRangeCloexec = 436, 1 << 2
	if _, _, e := syscall.RawSyscall(sysCloseRange, 3, ^uintptr(0), closeRangeCloexec); e != 0 {
		return fmt.Errorf("close_range: %w", e)
	}
	return nil
}
