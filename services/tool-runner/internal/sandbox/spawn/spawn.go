// Package spawn is the first process of every sandboxed command: a re-exec
// of the runner's own binary that applies the run's resource limits, stages
// the directories an isolated run shows, becomes the sandbox user, and
// executes the command (ADR 0009, ADR 0019):
//
//	/proc/self/exe  argv[0]=rath-sandbox-exec  argv[1]=<limits>  argv[2:]=[dirs…] [cgroups…] command
//
// It runs from this package's init, before the binary's other packages are
// initialised: it imports nothing but runtime, syscall and unsafe, so Go
// initialises it right after syscall, about 6 ms into the `rath` binary,
// rather than the 48 ms that binary's packages take to initialise (a spawn
// of `rath` as the helper went from 66 to 23 ms). It never returns: it executes the command, or exits 127 with
// the reason on stderr, as a shell does for a command it cannot start.
//
// Why not the alternatives: syscall.SysProcAttr has no rlimit field;
// prlimit(2) on the child after Start races the command; setrlimit in the
// runner would limit the runner; `sh -c 'ulimit …'` or prlimit(1) depend on
// what the shell or util-linux support and report failures as text.
package spawn

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Constants package syscall does not name, the same on every Linux
// architecture Go supports but MIPS (spawn_test.go checks them against
// golang.org/x/sys/unix, which this package must not import: it is
// initialised too late).
const (
	oPath       = 0x200000 // O_PATH
	rlimitNProc = 6        // RLIMIT_NPROC
)

// Arg0 marks a process as the spawn helper.
const Arg0 = "rath-sandbox-exec"

// StatusFD is the helper's status pipe: it writes the limits it applied
// there and closes it on execve, so the runner sees EOF once the command
// has started.
const StatusFD = 3

// Limits are one run's setrlimit values (zero leaves a limit as
// inherited) and, for the isolating backend, what to do before executing
// bwrap.
type Limits struct {
	CPU    int64 // RLIMIT_CPU, seconds
	AS     int64 // RLIMIT_AS, bytes
	NoFile int64 // RLIMIT_NOFILE
	FSize  int64 // RLIMIT_FSIZE, bytes
	NProc  int64 // RLIMIT_NPROC, processes of the (new) real user

	// Binds is the number of directories (or files), given before the
	// command, that the helper bind-mounts at StagePath(i) in the mount
	// namespace the runner started it in; UID and GID, when positive, are
	// the user it becomes.
	Binds    int64
	UID, GID int64
	// Cgroups is the number of cgroup.procs files, given after the
	// directories, that the helper writes itself into first, before it
	// drops its privileges or starts anything: the call's control group
	// (one file a hierarchy), which every process of the command is then
	// born into.
	Cgroups int64
	// Keep is the highest file descriptor the command inherits (3 by
	// default: the status pipe, closed on exec); every one above it that
	// the runner's process held is closed on exec, so nothing it was
	// started with (a socket a supervisor passed) reaches a command.
	Keep int64
}

// Encode is the helper's argv[1].
func (l Limits) Encode() string {
	var parts []string
	for i, v := range []int64{l.CPU, l.AS, l.NoFile, l.FSize, l.NProc, l.Binds, l.UID, l.GID, l.Keep, l.Cgroups} {
		parts = append(parts, names[i]+"="+itoa(v))
	}
	return join(parts, ",")
}

var names = []string{"cpu", "as", "nofile", "fsize", "nproc", "binds", "uid", "gid", "keep", "cgroups"}

// Decode reads Encode's form.
func Decode(s string) (Limits, error) {
	var l Limits
	fields := []*int64{&l.CPU, &l.AS, &l.NoFile, &l.FSize, &l.NProc, &l.Binds, &l.UID, &l.GID, &l.Keep, &l.Cgroups}
	for _, kv := range split(s, ',') {
		k, v, _ := cut(kv, '=')
		n, ok := atoi(v)
		if !ok {
			return l, errorString("bad limit " + quote(kv))
		}
		i := index(names, k)
		if i < 0 {
			return l, errorString("unknown limit " + quote(k))
		}
		*fields[i] = n
	}
	return l, nil
}

func index(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

type errorString string

func (e errorString) Error() string { return string(e) }

// StageRoot is where the helper, as root in a mount namespace of its own,
// mounts a tmpfs and binds the directories it was given, so that an
// unprivileged bwrap can reach them whatever their host path.
const StageRoot = "/tmp"

// StagePath is where the i-th staged directory is mounted.
func StagePath(i int) string { return StageRoot + "/rath-stage-" + itoa(i) }

func init() {
	argv, err := cmdline()
	if err != nil || len(argv) < 3 || argv[0] != Arg0 {
		return
	}
	run(argv[1], argv[2:])
}

// cmdline reads this process's argv from /proc: package os, which holds
// it, is initialised too late to be imported here.
func cmdline() ([]string, error) {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		b = append(b, buf[:n]...)
	}
	if len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return split(string(b), 0), nil
}

func fail(msg string) {
	syscall.Write(2, []byte("rath-sandbox: "+msg+"\n"))
	syscall.Exit(127)
}

// run applies the limits to this process and replaces it with the
// command. It never returns.
func run(spec string, argv []string) {
	// The status pipe must not reach the command.
	syscall.CloseOnExec(StatusFD)
	r, err := Decode(spec)
	if err != nil {
		fail(err.Error())
	}
	closeOnExecAbove(max(r.Keep, StatusFD))
	if r.Binds+r.Cgroups >= int64(len(argv)) {
		fail(itoa(r.Binds) + " directories to stage, " + itoa(r.Cgroups) + " cgroups and no command")
	}
	dirs, groups, argv := argv[:r.Binds], argv[r.Binds:r.Binds+r.Cgroups], argv[r.Binds+r.Cgroups:]
	// The call's control group first: nothing this process starts, nor
	// the command it becomes, is ever outside it.
	for _, g := range groups {
		if err := joinCgroup(g); err != nil {
			fail(err.Error())
		}
	}
	env := syscall.Environ()
	// Resolve and encode everything before the limits are set: with a low
	// address-space limit, this process may not be able to grow its heap.
	path, err := LookPath(argv[0], env, "")
	if err != nil {
		fail(err.Error())
	}

	report := Apply(0, r)
	if err := stage(r, dirs); err != nil {
		fail(err.Error())
	}

	// The address-space limit comes last, right before execve, with raw
	// system calls only: once it is set, this Go process cannot map memory
	// for a new thread (the race detector's runtime in tests is well above
	// any small limit), and a blocking syscall could make the runtime start
	// one. Everything it reports is decided before it is applied.
	asLim, asReport := AddressSpace(0, r.AS)
	report = append(report, asReport)
	msg := []byte(join(report, " "))
	argv0, err := syscall.BytePtrFromString(path)
	if err != nil {
		fail(err.Error())
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		fail(err.Error())
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		fail(err.Error())
	}
	// One thread from here: the limit and the execve happen on it.
	runtime.LockOSThread()
	if asLim != nil {
		if e := prlimit(0, syscall.RLIMIT_AS, asLim, nil); e != 0 {
			fail("set the address-space limit: " + e.Error())
		}
	}
	if len(msg) > 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, StatusFD, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	fail("exec " + argv[0] + ": " + e.Error())
}

// Apply sets the limits of r but the address space's on process pid (0:
// this process) and reports each as "name=value", with why when it was not
// applied or was lowered. A limit is only ever lowered: the hard limit is
// the value (the CPU's a second above it, so the command gets SIGXCPU,
// which it may catch to report, before SIGKILL), or the hard limit already
// in place when that is lower.
func Apply(pid int, r Limits) []string {
	var report []string
	set := func(name string, resource int, v int64, unit string, slack int64) {
		if v == 0 {
			report = append(report, name+"=unlimited")
			return
		}
		want := itoa(v) + unit
		var cur syscall.Rlimit
		if e := prlimit(pid, resource, nil, &cur); e != 0 {
			report = append(report, name+"="+want+" (not applied: "+e.Error()+")")
			return
		}
		lim := syscall.Rlimit{Cur: uint64(v), Max: uint64(v + slack)}
		lim.Max = min(lim.Max, cur.Max)
		lim.Cur = min(lim.Cur, lim.Max)
		if e := prlimit(pid, resource, &lim, nil); e != 0 {
			report = append(report, name+"="+want+" (not applied: "+e.Error()+")")
			return
		}
		if lim.Cur < uint64(v) {
			report = append(report, name+"="+want+" (lowered to the hard limit "+utoa(lim.Cur)+")")
			return
		}
		report = append(report, name+"="+want)
	}
	set("cpu", syscall.RLIMIT_CPU, r.CPU, "s", 1)
	set("nofile", syscall.RLIMIT_NOFILE, r.NoFile, "", 0)
	set("fsize", syscall.RLIMIT_FSIZE, r.FSize, "B", 0)
	if r.NProc > 0 {
		set("nproc", rlimitNProc, r.NProc, "", 0)
	}
	return report
}

// AddressSpace decides the address-space limit as bytes for process pid
// (0: this process): the limit to set, nil for none, and its report. It
// sets nothing: the helper must set it last (see run).
func AddressSpace(pid int, as int64) (*syscall.Rlimit, string) {
	if as == 0 {
		return nil, "as=unlimited"
	}
	want := itoa(as) + "B"
	var cur syscall.Rlimit
	if e := prlimit(pid, syscall.RLIMIT_AS, nil, &cur); e != 0 {
		return nil, "as=" + want + " (not applied: " + e.Error() + ")"
	}
	lim := syscall.Rlimit{Cur: uint64(as), Max: min(uint64(as), cur.Max)}
	lim.Cur = min(lim.Cur, lim.Max)
	if lim.Cur < uint64(as) {
		return &lim, "as=" + want + " (lowered to the hard limit " + utoa(lim.Cur) + ")"
	}
	return &lim, "as=" + want
}

// Prlimit sets one limit of process pid (0: this process) with prlimit(2).
func Prlimit(pid, resource int, lim *syscall.Rlimit) error {
	if e := prlimit(pid, resource, lim, nil); e != 0 {
		return e
	}
	return nil
}

// prlimit is prlimit64(2) as a raw system call: it neither blocks nor
// allocates, so the helper may call it after the address-space limit.
func prlimit(pid, resource int, set, old *syscall.Rlimit) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(resource), uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(old)), 0, 0)
	return e
}

// closeOnExecAbove marks every file descriptor above keep close-on-exec.
func closeOnExecAbove(keep int64) {
	const sysCloseRange, closeRangeCloexec = 436, 1 << 2 // the same on every Linux architecture
	if _, _, e := syscall.RawSyscall(sysCloseRange, uintptr(keep+1), ^uintptr(0), closeRangeCloexec); e == 0 {
		return
	}
	// Before Linux 5.11: the ones this process has open.
	fd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer syscall.Close(fd)
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err != nil || n <= 0 {
			return
		}
		_, _, names := syscall.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			if v, ok := atoi(name); ok && v > keep && v != int64(fd) {
				syscall.CloseOnExec(int(v))
			}
		}
	}
}

// LookPath finds a command as a shell in directory cwd would (empty: this
// process's): a name with a slash as it is, a bare name in env's PATH. A
// path it returns may be relative to cwd.
func LookPath(name string, env []string, cwd string) (string, error) {
	for i := range len(name) {
		if name[i] == '/' {
			return name, nil
		}
	}
	path := ""
	for _, kv := range env {
		if k, v, _ := cut(kv, '='); k == "PATH" {
			path = v
		}
	}
	for _, dir := range split(path, ':') {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		at := p
		if cwd != "" && p[0] != '/' {
			at = cwd + "/" + p
		}
		var st syscall.Stat_t
		if syscall.Stat(at, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && syscall.Access(at, 1) == nil {
			return p, nil
		}
	}
	return "", errorString("exec: " + quote(name) + ": executable file not found in $PATH")
}

// joinCgroup writes this process into a cgroup.procs file.
func joinCgroup(procs string) error {
	fd, err := syscall.Open(procs, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return errorString("join cgroup: open " + procs + ": " + err.Error())
	}
	defer syscall.Close(fd)
	if _, err := syscall.Write(fd, []byte("0")); err != nil {
		return errorString("join cgroup: write " + procs + ": " + err.Error())
	}
	return nil
}

// stage mounts the directories dirs at StagePath(i) and becomes the sandbox
// user. The runner started the helper in a mount namespace of its own, so
// none of this is seen outside the run. The directories are opened before
// the tmpfs hides StageRoot, which may hold some of them.
func stage(r Limits, dirs []string) error {
	if len(dirs) > 0 {
		fds := make([]int, len(dirs))
		for n, d := range dirs {
			fd, err := syscall.Open(d, oPath|syscall.O_CLOEXEC, 0)
			if err != nil {
				return errorString("stage: open " + d + ": " + err.Error())
			}
			fds[n] = fd
		}
		if err := syscall.Mount("tmpfs", StageRoot, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=64k"); err != nil {
			return errorString("stage: mount a tmpfs on " + StageRoot + ": " + err.Error())
		}
		for n, fd := range fds {
			p := StagePath(n)
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil {
				return errorString("stage: " + dirs[n] + ": " + err.Error())
			}
			var err error
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				err = syscall.Mkdir(p, 0o755)
			} else { // a file is mounted on a file
				var f int
				if f, err = syscall.Open(p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644); err == nil {
					syscall.Close(f)
				}
			}
			if err != nil {
				return errorString("stage: " + p + ": " + err.Error())
			}
			if err := syscall.Mount("/proc/self/fd/"+itoa(fd), p, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
				return errorString("stage: bind " + dirs[n] + " on " + p + ": " + err.Error())
			}
			syscall.Close(fd)
		}
	}
	if r.UID > 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return errorString("stage: drop groups: " + err.Error())
		}
		if err := syscall.Setresgid(int(r.GID), int(r.GID), int(r.GID)); err != nil {
			return errorString("stage: become group " + itoa(r.GID) + ": " + err.Error())
		}
		if err := syscall.Setresuid(int(r.UID), int(r.UID), int(r.UID)); err != nil {
			return errorString("stage: become user " + itoa(r.UID) + ": " + err.Error())
		}
	}
	return nil
}

// The helpers below stand in for packages strings and strconv, whose
// imports (unicode, math) Go would initialise first, after many of the
// binary's other packages: the helper starts sooner without them.

func split(s string, sep byte) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == sep {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func cut(s string, sep byte) (before, after string, found bool) {
	for i := range len(s) {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func join(parts []string, sep string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += sep
		}
		out += p
	}
	return out
}

func utoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

func itoa[T int | int64](v T) string {
	if v < 0 {
		return "-" + utoa(uint64(-v))
	}
	return utoa(uint64(v))
}

// atoi reads a non-negative decimal that fits in an int64.
func atoi(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func quote(s string) string { return `"` + s + `"` }
