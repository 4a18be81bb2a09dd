package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resource limits are set in the child, before it executes the command, by a
// re-exec of the runner's own binary:
//
//	/proc/self/exe  argv[0]=rath-sandbox-exec  argv[1]=<limits>  argv[2:]=command
//
// The helper (execHelper, run from this package's init) calls setrlimit on
// itself and then execve's the command, which keeps the process, its pid and
// its process group, and inherits the limits. Alternatives and why not:
//   - syscall.SysProcAttr has no rlimit field.
//   - prlimit(2) on the child after Start races with the command, which may
//     allocate, open or write before the limits land.
//   - setrlimit in the runner around fork would limit the runner itself:
//     limits are per process, not per thread.
//   - wrapping in `sh -c 'ulimit ...; exec "$@"'` or prlimit(1) depends on
//     what the shell or util-linux support, and reports failures as text.
//
// The helper needs no other binary, reports which limits it applied on a
// close-on-exec status pipe (fd 3), and reports a command it cannot start on
// stderr with exit status 127, as a shell would. Every binary that imports
// this package can act as the helper, including test binaries.
const helperArg0 = "rath-sandbox-exec"

func init() {
	if len(os.Args) > 2 && os.Args[0] == helperArg0 {
		execHelper(os.Args[1], os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == forwardFlag {
		forwardMain(os.Args[2:])
	}
}

// rlimits are the setrlimit values of one run; zero leaves a limit as
// inherited. The isolating backend (isolate.go) adds what the helper does
// before it executes bwrap: stage binds and drop to an unprivileged user.
type rlimits struct {
	cpu    int64 // RLIMIT_CPU, seconds
	as     int64 // RLIMIT_AS, bytes
	nofile int64 // RLIMIT_NOFILE
	fsize  int64 // RLIMIT_FSIZE, bytes
	nproc  int64 // RLIMIT_NPROC, processes of the (new) real user

	// binds is the number of directories, given before the command, that
	// the helper bind-mounts at stagePath(i) in a mount namespace of its
	// own; uid and gid, when positive, are the user it becomes.
	binds    int64
	uid, gid int64
}

func newRlimits(l Limits) rlimits {
	r := rlimits{as: l.Memory, nofile: l.OpenFiles, fsize: l.FileSize}
	if l.CPU > 0 {
		r.cpu = int64((l.CPU + time.Second - 1) / time.Second)
	}
	return r
}

func (r rlimits) encode() string {
	return fmt.Sprintf("cpu=%d,as=%d,nofile=%d,fsize=%d,nproc=%d,binds=%d,uid=%d,gid=%d",
		r.cpu, r.as, r.nofile, r.fsize, r.nproc, r.binds, r.uid, r.gid)
}

func decodeRlimits(s string) (rlimits, error) {
	var r rlimits
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, fmt.Errorf("bad limit %q", kv)
		}
		switch k {
		case "cpu":
			r.cpu = n
		case "as":
			r.as = n
		case "nofile":
			r.nofile = n
		case "fsize":
			r.fsize = n
		case "nproc":
			r.nproc = n
		case "binds":
			r.binds = n
		case "uid":
			r.uid = n
		case "gid":
			r.gid = n
		default:
			return r, fmt.Errorf("unknown limit %q", k)
		}
	}
	return r, nil
}

// execHelper applies the limits to this process and replaces it with the
// command. It never returns.
func execHelper(spec string, argv []string) {
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "rath-sandbox: %v\n", err)
		os.Exit(127)
	}
	// The status pipe must not reach the command, and must close on execve
	// so that the runner sees EOF once the command has started.
	syscall.CloseOnExec(3)

	r, err := decodeRlimits(spec)
	if err != nil {
		fail(err)
	}
	// The directories the isolating backend stages come first.
	if r.binds >= int64(len(argv)) {
		fail(fmt.Errorf("%d directories to stage and no command", r.binds))
	}
	dirs, argv := argv[:r.binds], argv[r.binds:]
	// Resolve and encode everything before the limits are set: with a low
	// address-space limit, this process may not be able to grow its heap.
	path := argv[0]
	if !strings.Contains(path, "/") {
		path, err = exec.LookPath(path)
		if err != nil {
			fail(err)
		}
	}
	env := os.Environ()

	var report []string
	set := func(name string, resource int, v int64, unit string, slack int64) {
		if v == 0 {
			report = append(report, name+"=unlimited")
			return
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(resource, &cur); err != nil {
			report = append(report, fmt.Sprintf("%s=%d%s (not applied: %v)", name, v, unit, err))
			return
		}
		// Lowering is always allowed; raising the hard limit is not, and a
		// hard limit already below v is the stricter limit anyway.
		lim := syscall.Rlimit{Cur: uint64(v), Max: uint64(v + slack)}
		lim.Max = min(lim.Max, cur.Max)
		lim.Cur = min(lim.Cur, lim.Max)
		if err := syscall.Setrlimit(resource, &lim); err != nil {
			report = append(report, fmt.Sprintf("%s=%d%s (not applied: %v)", name, v, unit, err))
			return
		}
		if lim.Cur < uint64(v) {
			report = append(report, fmt.Sprintf("%s=%d%s (lowered to the hard limit %d)", name, v, unit, lim.Cur))
			return
		}
		report = append(report, fmt.Sprintf("%s=%d%s", name, v, unit))
	}
	// The CPU hard limit is a second above the soft one, so the command gets
	// SIGXCPU (which it may catch to report) before SIGKILL.
	set("cpu", syscall.RLIMIT_CPU, r.cpu, "s", 1)
	set("nofile", syscall.RLIMIT_NOFILE, r.nofile, "", 0)
	set("fsize", syscall.RLIMIT_FSIZE, r.fsize, "B", 0)
	if r.nproc > 0 {
		set("nproc", unix.RLIMIT_NPROC, r.nproc, "", 0)
	}
	if err := stage(r, dirs); err != nil {
		fail(err)
	}

	// The address-space limit comes last, right before execve, with raw
	// system calls only: once it is set, this Go process cannot map memory
	// for a new thread (the race detector's runtime in tests is well above
	// any small limit), and a blocking syscall could make the runtime start
	// one. Everything it reports is decided before it is applied.
	var asLim *syscall.Rlimit
	if r.as == 0 {
		report = append(report, "as=unlimited")
	} else {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_AS, &cur); err != nil {
			report = append(report, fmt.Sprintf("as=%dB (not applied: %v)", r.as, err))
		} else {
			lim := syscall.Rlimit{Cur: uint64(r.as), Max: min(uint64(r.as), cur.Max)}
			lim.Cur = min(lim.Cur, lim.Max)
			asLim = &lim
			if lim.Cur < uint64(r.as) {
				report = append(report, fmt.Sprintf("as=%dB (lowered to the hard limit %d)", r.as, lim.Cur))
			} else {
				report = append(report, fmt.Sprintf("as=%dB", r.as))
			}
		}
	}
	msg := []byte(strings.Join(report, " "))
	argv0, argvp, envp, err := execArgs(path, argv, env)
	if err != nil {
		fail(err)
	}
	runtime.LockOSThread()
	if asLim != nil {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, syscall.RLIMIT_AS, uintptr(unsafe.Pointer(asLim)), 0, 0, 0); e != 0 {
			fail(fmt.Errorf("set the address-space limit: %w", e))
		}
	}
	if len(msg) > 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	fail(fmt.Errorf("exec %s: %w", argv[0], e))
}

// execArgs converts a command line to what execve takes, allocating before
// the address-space limit is set.
func execArgs(path string, argv, env []string) (*byte, []*byte, []*byte, error) {
	argv0, err := syscall.BytePtrFromString(path)
	if err != nil {
		return nil, nil, nil, err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return nil, nil, nil, err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return nil, nil, nil, err
	}
	return argv0, argvp, envp, nil
}
