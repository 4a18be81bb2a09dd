package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

// Run implements Workspace. The command runs as the leader of a new process
// group in the workspace directory, with its limits set by the runner on the
// command stopped after its execve (trace.go) or by the spawn helper
// (rlimit.go).
// When the timeout expires or ctx is done, the whole group is killed; after
// the leader exits for any reason, what is left of the group (background
// jobs, daemons) is killed too, so a run leaves no process behind except one
// that moved itself to another group or session.
func (w *localWorkspace) Run(ctx context.Context, c Cmd) (Result, error) {
	if w.l.remote != nil {
		return w.runRemote(ctx, c)
	}
	return w.run(ctx, c, w.l.iso == nil && w.l.traces())
}

// checkRun refuses an empty command and a cancelled ctx, and returns the
// command's timeout: c's, else the default, at most the maximum.
func (w *localWorkspace) checkRun(ctx context.Context, c Cmd) (time.Duration, error) {
	if len(c.Args) == 0 || c.Args[0] == "" {
		return 0, errors.New("run: empty command")
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("run in %s: %w", w.id, err)
	}
	lim := w.l.cfg.Limits
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = lim.Timeout
	}
	return min(timeout, lim.MaxTimeout), nil
}

// run is Run, the command started traced (trace.go; the local backend only)
// or through the helper.
func (w *localWorkspace) run(ctx context.Context, c Cmd, trace bool) (Result, error) {
	timeout, err := w.checkRun(ctx, c)
	if err != nil {
		return Result{}, err
	}
	lim := w.l.cfg.Limits
	l := &launch{stdout: &capture{limit: lim.Output}, stderr: &capture{limit: lim.Output}}
	l.cmd = &exec.Cmd{
		Path:        w.l.helper,
		Stdin:       c.Stdin,
		Stdout:      l.stdout,
		Stderr:      l.stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		// Bounds the wait for output pipes held open by a process that left
		// the group, and so survived the group kill.
		WaitDelay: 2 * time.Second,
	}
	// The one cleanup of every exit, started or not.
	defer l.release()
	if l.cg, l.cgWhy, err = w.l.callGroup(); err != nil {
		return Result{}, fmt.Errorf("run in %s: %w", w.id, err)
	}
	if l.cg != nil {
		l.cgDesc = l.cg.describe()
	}
	switch {
	case w.l.iso != nil:
		err = w.isolated(l, c)
	case trace:
		err = w.traced(l, c)
	default:
		err = w.helped(l, c)
	}
	var missing *notStartedError
	switch {
	case errors.Is(err, errTraceRefused):
		// The trace refused at the start after the probe allowed it (the
		// runner itself traced since, by strace -f or a debugger): the
		// helper runs this command and the next ones, or says why it
		// cannot. Nothing of the command ran, stdin included.
		w.l.traceRefused.Store(true)
		return w.run(ctx, c, false)
	case errors.As(err, &missing):
		return notStarted(missing.err, timeout), nil
	case err != nil:
		return Result{}, fmt.Errorf("run in %s: %w", w.id, err)
	}
	return w.wait(ctx, l, timeout)
}

// A launch is one run's command, prepared and started in one of three
// modes (isolated, helped, traced), and what the run releases when it ends.
type launch struct {
	cmd            *exec.Cmd
	stdout, stderr *capture
	status         *os.File // the helper's status pipe (fd 3); nil when traced
	limits         string   // the trace's report of the limits set
	info           *os.File // bwrap's --info-fd (fd 4), read for the sandbox's init
	proxy          *netProxy
	oci            *ociBundle // the gvisor backend's OCI bundle
	tmp            string     // the local command's home and temporary directory
	files          []*os.File // every pipe end the run opened
	began          time.Time
	// cg is the call's control group, nil without one (cgWhy says why);
	// removed once the call has ended.
	cg     *callGroup
	cgDesc string // its part of Result.Limits
	cgWhy  string
	// filter describes the seccomp filter the command runs under, if any.
	filter string
}

// errTraceRefused is returned by traced when the kernel refused the trace
// at the start: the command did not start.
var errTraceRefused = errors.New("the trace was refused at the start")

// notStartedError is a command the traced start found it cannot start (not
// found, not executable): run reports it as the helper does (notStarted).
type notStartedError struct{ err error }

func (e *notStartedError) Error() string { return e.err.Error() }

// pipe opens a pipe whose write end the command inherits as its next
// descriptor after stderr, and returns its read end.
func (l *launch) pipe() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	l.files = append(l.files, r, w)
	l.cmd.ExtraFiles = append(l.cmd.ExtraFiles, w)
	return r, nil
}

// start starts the command through the helper, then closes the runner's
// copies of the write ends the command inherited: a read sees the end of
// a pipe once the command's side is gone.
func (l *launch) start() error {
	l.began = time.Now()
	err := l.cmd.Start()
	for _, f := range l.cmd.ExtraFiles {
		f.Close()
	}
	return err
}

// callGroup makes a call's control group, or says why there is none.
func (l *Local) callGroup() (*callGroup, string, error) {
	if l.cfg.NoCgroup {
		return nil, "no cgroup: turned off by the configuration", nil
	}
	h := cgroups()
	if h.version == 0 {
		return nil, "no cgroup: " + h.why, nil
	}
	lim := l.cfg.Limits
	if l.iso != nil && l.iso.gv != nil {
		// The group holds gVisor's sandbox as a whole, whose kernel runs
		// many host threads (and, on the ptrace platform, a stub process
		// per guest thread): the host's task count is not the command's.
		// gVisor's own process limit (nproc) bounds the command's.
		lim.CallProcesses = 0
	}
	g, err := h.newCallGroup(lim)
	return g, "", err
}

// release closes what the run opened and removes its directory and its
// control group (wait removes the group of a run that started).
func (l *launch) release() {
	if l.cg != nil {
		_ = l.cg.remove()
	}
	for _, f := range l.files {
		f.Close()
	}
	if l.proxy != nil {
		l.proxy.close()
	}
	if l.oci != nil {
		l.oci.sweep()
	}
	if l.tmp != "" {
		removeAll(l.tmp)
	}
}

// isolated starts the command in the sandbox: the helper sets its limits
// and stages its mounts, bwrap runs it (or runsc, on the gvisor backend:
// gvisor.go), through the network forwarder when it names hosts.
func (w *localWorkspace) isolated(l *launch, c Cmd) error {
	iso := w.l.iso
	var err error
	if iso.gv == nil { // runsc reports no limits: gvisor sets l.limits
		if l.status, err = l.pipe(); err != nil {
			return err
		}
	}
	argv, extra, env := c.Args, []bind(nil), []string{}
	if len(c.Hosts) > 0 {
		rules, err := ParseHosts(c.Hosts, w.l.cfg.Net.Allow)
		if err != nil {
			return err
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the network forwarder: %w", err)
		}
		uid := 0
		if iso.root {
			uid = iso.uid(w.tenant)
		}
		if l.proxy, err = startProxy(w.l.runs, rules, w.l.cfg.Net, uid); err != nil {
			return fmt.Errorf("the network proxy: %w", err)
		}
		extra = []bind{{src: l.proxy.dir, dst: insideNet}, {src: exe, dst: insideForwarder, ro: true}}
		argv = append([]string{insideForwarder, forwardFlag, insideNet + "/proxy.sock", "--"}, argv...)
		url := "http://127.0.0.1:" + strconv.Itoa(proxyPort)
		env = []string{"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url}
	}
	env = append(append([]string{"PATH=" + w.l.cfg.Path, "HOME=" + insideTmp, "TMPDIR=" + insideTmp, "LANG=C.UTF-8"}, iso.env...), env...)
	if iso.gv != nil {
		return w.gvisor(l, argv, extra, env)
	}
	p, err := iso.prepare(w.l.cfg.Limits, w.dir, w.tenant, false, extra...)
	if err != nil {
		return err
	}
	p.env(env)
	p.spec.Keep = 5 // bwrap's --info-fd and --seccomp
	if l.info, err = l.pipe(); err != nil {
		return err
	}
	f, err := sandboxFilter()
	if err != nil {
		return err
	}
	sc, err := f.file()
	if err != nil {
		return err
	}
	l.files = append(l.files, sc)
	l.cmd.ExtraFiles = append(l.cmd.ExtraFiles, sc)
	l.filter = f.summary
	if l.cg != nil {
		p.groups = l.cg.procs()
	}
	l.cmd.Args = p.helper(slices.Concat([]string{"--info-fd", "4", "--seccomp", "5", "--"}, argv)...)
	l.cmd.Dir = "/"
	l.cmd.Env = []string{"PATH=" + w.l.cfg.Path} // bwrap's own; the command's is set by --setenv
	if iso.root {
		l.cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	return l.start()
}

// helped starts a command of the local backend through the helper, which
// sets its limits.
func (w *localWorkspace) helped(l *launch, c Cmd) error {
	var err error
	if l.status, err = l.pipe(); err != nil {
		return err
	}
	if err := w.local(l); err != nil {
		return err
	}
	spec := newRlimits(w.l.cfg.Limits)
	var groups []string
	if l.cg != nil {
		groups = l.cg.procs()
		spec.Cgroups = int64(len(groups))
	}
	l.cmd.Args = slices.Concat([]string{spawn.Arg0, spec.Encode()}, groups, c.Args)
	return l.start()
}

// traced starts a command of the local backend itself, stopped after its
// execve for its limits (trace.go).
func (w *localWorkspace) traced(l *launch, c Cmd) error {
	if err := w.local(l); err != nil {
		return err
	}
	path, err := spawn.LookPath(c.Args[0], l.cmd.Env, w.dir)
	if err != nil {
		return &notStartedError{err}
	}
	l.cmd.Path, l.cmd.Args = path, c.Args
	l.began = time.Now()
	var join func(int) error
	if l.cg != nil {
		join = l.cg.join
	}
	l.limits, err = startTraced(l.cmd, newRlimits(w.l.cfg.Limits), join)
	var pathErr *fs.PathError
	if !errors.As(err, &pathErr) || pathErr.Op != "fork/exec" {
		return err
	}
	if errors.Is(pathErr.Err, syscall.EPERM) {
		return errTraceRefused
	}
	// What the helper reports as a shell does: exit 127.
	return &notStartedError{fmt.Errorf("exec %s: %w", c.Args[0], pathErr.Err)}
}

// local gives a command of the local backend the workspace as its
// directory and a home and temporary directory of its own.
func (w *localWorkspace) local(l *launch) error {
	tmp, err := os.MkdirTemp(w.l.runs, "run-")
	if err != nil {
		return err
	}
	l.tmp = tmp
	home, tmpdir := filepath.Join(tmp, "home"), filepath.Join(tmp, "tmp")
	for _, d := range []string{home, tmpdir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	l.cmd.Dir = w.dir
	l.cmd.Env = append([]string{
		"PATH=" + w.l.cfg.Path,
		"HOME=" + home,
		"TMPDIR=" + tmpdir,
		"LANG=C.UTF-8",
	}, w.l.cfg.Env...)
	return nil
}

// wait waits for the started command until its leader exits, its timeout
// expires or ctx is done, kills what is left of its group, reaps it and
// returns how it ended.
func (w *localWorkspace) wait(ctx context.Context, l *launch, timeout time.Duration) (Result, error) {
	pid := l.cmd.Process.Pid
	inner := make(chan int, 1)
	if l.info != nil {
		go func() { inner <- sandboxInit(l.info) }()
	}
	status := make(chan string, 1)
	if l.status == nil {
		status <- l.limits
	} else {
		go func() {
			b, _ := io.ReadAll(io.LimitReader(l.status, 4096))
			status <- string(b)
		}()
	}
	exited := make(chan error, 1)
	go func() { exited <- waitExited(pid) }()

	var res Result
	var ctxErr, waitErr error
	var cpuOver bool
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	check := l.cpuCheck()
	defer check.Stop()
wait:
	for {
		select {
		case waitErr = <-exited:
		case <-timer.C:
			res.TimedOut = true
			killGroup(pid)
			waitErr = <-exited
		case <-ctx.Done():
			ctxErr = ctx.Err()
			killGroup(pid)
			waitErr = <-exited
		case <-check.C:
			if !l.cpuOver(check) {
				continue
			}
			cpuOver = true
			l.cg.kill()
			killGroup(pid)
			waitErr = <-exited
		}
		break wait
	}
	// The leader has exited but is not reaped yet, so its pid, which is the
	// group's ID, cannot be reused: this kill reaches only this run's
	// stragglers.
	killGroup(pid)
	if l.cg != nil {
		// A process that left the group (setsid, a daemon) is still in
		// the call's control group.
		l.cg.kill()
	}
	waitSandbox(l.info, inner)
	err := l.cmd.Wait()
	res.Duration = time.Since(l.began)
	var used *groupUsage
	var removeErr error
	if l.cg != nil {
		u := l.cg.usage()
		used = &u
		removeErr = l.cg.remove()
		l.cg = nil
	}
	if l.proxy != nil {
		res.Network = l.proxy.close()
	}
	if waitErr != nil {
		return Result{}, fmt.Errorf("run in %s: wait: %w", w.id, waitErr)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return Result{}, fmt.Errorf("run in %s: %w", w.id, err)
	}
	w.ended(&res, l, <-status, timeout, used, cpuOver)
	if removeErr != nil {
		res.Limits += " (" + removeErr.Error() + ")"
	}
	if ctxErr != nil {
		return res, fmt.Errorf("run in %s: %w", w.id, ctxErr)
	}
	return res, nil
}

// ended fills in how the reaped command ended, its output, and the limits
// it ran under as the helper or the trace reported them (status).
func (w *localWorkspace) ended(res *Result, l *launch, status string, timeout time.Duration, used *groupUsage, cpuOver bool) {
	ws, _ := l.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.Killed = true
		res.ExitCode = 128 + int(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
		// bwrap exits 128+n when its command was killed by signal n (a
		// resource limit, the kernel's OOM killer).
		res.Killed = w.l.iso != nil && res.ExitCode > 128 && res.ExitCode <= 128+64
	}
	stdout, stderr := l.stdout, l.stderr
	res.Stdout, res.StdoutBytes = string(stdout.buf), stdout.total
	res.Stderr, res.StderrBytes = string(stderr.buf), stderr.total
	res.Truncated = stdout.total > int64(len(stdout.buf)) || stderr.total > int64(len(stderr.buf))
	res.Limits = "timeout=" + timeout.String()
	if status != "" {
		res.Limits += " " + status
	} else {
		res.Limits += " rlimits=unknown (the helper ended before applying them)"
	}
	if used != nil {
		res.Limits += " " + l.cgDesc
	} else if l.cgWhy != "" {
		res.Limits += " call-limits=none (" + l.cgWhy + ")"
	}
	if l.filter != "" {
		res.Limits += " " + l.filter
	}
	res.Stopped = stoppedBy(*res, timeout, w.l.cfg.Limits, used, cpuOver)
}

// notStarted is the result of a command that could not be started (not
// found, not executable), as the helper reports one: exit 127, and why on
// stderr.
func notStarted(err error, timeout time.Duration) Result {
	msg := "rath-sandbox: " + err.Error() + "\n"
	return Result{ExitCode: 127, Stderr: msg, StderrBytes: int64(len(msg)), Limits: "timeout=" + timeout.String() + " (not started)"}
}

// stoppedBy names the limit that ended a run, when the run's outcome says
// so for certain: the wall-time limit, the call's CPU-time limit (the
// runner killed the call's group), the process's CPU limit (SIGXCPU, sent
// at the soft limit a second before the hard one's SIGKILL), the
// file-size limit (SIGXFSZ), and, for a run that failed, the call's memory
// limit when the kernel killed one of its processes at it (the group's
// oom_kill count) and the call's process limit when it refused a fork (the
// group's pids.events). Without a group (used nil), the process and memory
// limits make the command's own fork or allocation fail (EAGAIN, ENOMEM),
// which it reports on stderr as it sees fit.
func stoppedBy(res Result, timeout time.Duration, lim Limits, used *groupUsage, cpuOver bool) string {
	code := res.ExitCode - 128
	failed := res.Killed || res.ExitCode != 0
	switch {
	case res.TimedOut:
		return "wall-time limit " + timeout.String()
	case cpuOver:
		return fmt.Sprintf("CPU-time limit %s of the call (its processes together used %s)", lim.CallCPU, used.cpu.Round(time.Millisecond))
	case failed && used != nil && used.oomKills > 0:
		return fmt.Sprintf("memory limit %d bytes of the call (the kernel killed %d of its processes at it)", lim.CallMemory, used.oomKills)
	case failed && used != nil && used.forksRefused > 0:
		return fmt.Sprintf("process limit %d of the call (%d forks refused)", lim.CallProcesses, used.forksRefused)
	case !res.Killed:
		return ""
	case code == int(syscall.SIGXCPU):
		return "CPU-time limit " + lim.CPU.String() + " of a process"
	case code == int(syscall.SIGXFSZ):
		return "file-size limit"
	}
	return "signal " + syscall.Signal(code).String()
}

// cpuCheck is the timer that checks the call's CPU time: first at once,
// then as cpuOver resets it. It never fires without a group or a limit.
func (l *launch) cpuCheck() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	if l.cg != nil && l.cg.lim.CallCPU > 0 {
		t.Reset(0)
	}
	return t
}

// cpuOver reports whether the call's processes have used its CPU time,
// and otherwise sets t to check again when they could have at the
// earliest (the time left spread over every CPU), or in a second: a call
// overruns its limit by at most a second of every CPU's time.
func (l *launch) cpuOver(t *time.Timer) bool {
	used, err := l.cg.cpu()
	left := l.cg.lim.CallCPU - used
	if err == nil && left <= 0 {
		return true
	}
	next := min(max(left/time.Duration(runtime.NumCPU()), 10*time.Millisecond), time.Second)
	t.Reset(next)
	return false
}

// capture keeps the first limit bytes written to it and counts the rest. It
// never fails a write, so the command is never blocked or broken by a full
// pipe: its output is drained to the end whatever its size.
type capture struct {
	limit int64
	buf   []byte
	total int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.limit - int64(len(c.buf)); room > 0 {
		c.buf = append(c.buf, p[:min(room, int64(len(p)))]...)
	}
	return len(p), nil
}

// killGroup sends SIGKILL to a process group. ESRCH (nothing left) is the
// expected outcome after the leader exited, and there is nothing to do about
// other errors but let the wait report what happened.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// pPID is P_PID of waitid(2).
const pPID = 1

// waitExited blocks until the child pid has exited, without reaping it
// (WNOWAIT), as the os package does internally: until cmd.Wait reaps it,
// the pid stays taken, which keeps killGroup safe from pid reuse.
func waitExited(pid int) error {
	var info [128]byte // siginfo_t, unused
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return errno
		}
	}
}

// removeAll removes a run's temporary directory, first making its
// directories writable: a command may have left read-only ones behind.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
