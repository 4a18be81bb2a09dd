package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

// BackendBwrap is the name of the isolating backend: every command runs in a
// bubblewrap sandbox (ADR 0019).
const BackendBwrap = "bwrap"

// Isolation configures the isolating backend, on top of Config.
type Isolation struct {
	// Bwrap is the bubblewrap binary; empty means "bwrap" in the runner's
	// PATH.
	Bwrap string
	// Runsc is gVisor's runsc binary, for the gvisor backend (gvisor.go);
	// empty means "runsc" in the runner's PATH.
	Runsc string
	// RunscPlatform is gVisor's platform (runsc --platform): empty means
	// runsc's default, ptrace; kvm needs /dev/kvm.
	RunscPlatform string
	// System are host paths shown read-only at the same path: the
	// toolchain and the libraries it needs. A path that is a symbolic link
	// on the host (/bin on a merged-/usr system) is recreated as the same
	// link; missing paths are skipped.
	System []string
	// Processes is RLIMIT_NPROC: how many processes the sandbox user may
	// have at once, counted across every command of the tenant (see
	// UIDBase) or, when the runner is not root, of the runner's user.
	Processes int64
	// TmpSize bounds the sandbox's /tmp (which is also its HOME), in bytes.
	TmpSize int64
	// UIDBase and UIDCount are the host user IDs commands run as when the
	// runner is root: the commands of tenant T run as UIDBase + hash(T) %
	// UIDCount, so tenants do not share a process budget. A runner that is
	// not root runs commands as its own user.
	UIDBase, UIDCount int
}

// DefaultIsolation returns the defaults.
func DefaultIsolation() Isolation {
	return Isolation{
		System: []string{
			"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
			"/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/localtime",
		},
		Processes: 256,
		TmpSize:   256 << 20,
		UIDBase:   200000,
		UIDCount:  10000,
	}
}

// Validate reports every problem at once.
func (i Isolation) Validate() error {
	var errs []error
	if i.Processes <= 0 {
		errs = append(errs, fmt.Errorf("sandbox process limit must be positive, got %d", i.Processes))
	}
	if i.TmpSize <= 0 {
		errs = append(errs, fmt.Errorf("sandbox /tmp size must be positive, got %d", i.TmpSize))
	}
	if i.UIDBase <= 0 || i.UIDCount <= 0 || i.UIDBase+i.UIDCount > 1<<31 {
		errs = append(errs, fmt.Errorf("sandbox user IDs %d+%d are out of range", i.UIDBase, i.UIDCount))
	}
	for _, p := range i.System {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("sandbox system path %q is not absolute", p))
		}
	}
	return errors.Join(errs...)
}

// isolation is an isolating backend's state, beside its Local.
type isolation struct {
	cfg   Isolation
	bwrap string
	gv    *gvisor // the gvisor backend's runsc; nil for bwrap
	root  bool    // the runner is root: stage binds, drop to a tenant's user
	cache string  // per-tenant writable caches
	// env is the commands' environment with Go's caches moved inside the
	// sandbox; ro are the host directories it needs read-only.
	env []string
	ro  []string
	// hostCache is the runner's GOCACHE, which seeds a tenant's cache.
	hostCache string
	mu        sync.Mutex      // serialises making tenants' caches
	made      map[string]bool // tenants whose cache exists (no stat a run)
}

// Paths inside the sandbox.
const (
	insideTmp   = "/tmp"
	insideCache = "/cache"
	insideUID   = 1000
)

// NewIsolated returns the isolating backend. It keeps workspaces as Local
// does, in cfg.Root, and runs every command with bubblewrap. It fails,
// naming what is missing, if bwrap cannot be found; Probe tells whether it
// can actually start a sandbox on this machine.
func NewIsolated(cfg Config, iso Isolation) (*Local, error) {
	if err := errors.Join(cfg.Validate(), iso.Validate()); err != nil {
		return nil, err
	}
	bin := iso.Bwrap
	if bin == "" {
		bin = "bwrap"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: bubblewrap (%s) not found: install the bubblewrap package (scripts/install-sandbox.sh): %w", BackendBwrap, bin, err)
	}
	return newIsolating(cfg, iso, BackendBwrap, &isolation{bwrap: path})
}

// newIsolating returns an isolating backend named name, which runs commands
// as i says (bwrap or gvisor), keeping workspaces as Local does.
func newIsolating(cfg Config, iso Isolation, name string, i *isolation) (*Local, error) {
	l, err := NewLocal(cfg)
	if err != nil {
		return nil, err
	}
	i.cfg, i.root, i.cache, i.made = iso, os.Geteuid() == 0, filepath.Join(l.root, ".cache"), map[string]bool{}
	if err := os.MkdirAll(i.cache, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox cache: %w", err)
	}
	i.env, i.ro, i.hostCache = insideEnv(cfg.Env)
	l.iso = i
	l.name = name
	return l, nil
}

// insideEnv rewrites the commands' environment for the sandbox: GOCACHE
// becomes the tenant's cache (the runner's, hostCache, seeds it), GOPATH a
// directory in /tmp, and the module cache and GOROOT, when set, are shown
// read-only.
func insideEnv(env []string) (out, ro []string, hostCache string) {
	var gopath, modcache string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GOCACHE":
			hostCache = v
			continue
		case "GOPATH":
			gopath = v
			continue
		case "GOMODCACHE":
			modcache = v
		case "GOROOT":
			ro = append(ro, v)
		}
		out = append(out, kv)
	}
	if modcache == "" && gopath != "" {
		modcache = filepath.Join(strings.Split(gopath, ":")[0], "pkg", "mod")
		out = append(out, "GOMODCACHE="+modcache)
	}
	if modcache != "" {
		ro = append(ro, modcache)
	}
	out = append(out, "GOCACHE="+insideCache+"/go-build", "GOPATH="+insideTmp+"/go")
	return out, ro, hostCache
}

// uid is the host user a tenant's commands run as (when the runner is
// root).
func (i *isolation) uid(tenant string) int {
	h := fnv.New32a()
	h.Write([]byte(tenant))
	return i.cfg.UIDBase + int(h.Sum32()%uint32(i.cfg.UIDCount))
}

// bind is one directory shown inside the sandbox.
type bind struct {
	src, dst string
	ro       bool
}

// prepared is what one isolated run needs beyond a local run.
type prepared struct {
	args   []string     // bwrap and its arguments
	stage  []string     // host directories the helper stages, in order
	groups []string     // the cgroup.procs files the helper joins
	spec   spawn.Limits // the helper's limits
}

// helper is the spawn helper's argv: its limits, the directories it stages,
// then bwrap's command line and tail (the command).
func (p *prepared) helper(tail ...string) []string {
	p.spec.Cgroups = int64(len(p.groups))
	return slices.Concat([]string{spawn.Arg0, p.spec.Encode()}, p.stage, p.groups, p.args, tail)
}

// prepare makes the workspace and the tenant's cache writable by the
// sandbox user and builds the helper's limits and bwrap's command line.
func (i *isolation) prepare(lim Limits, dir, tenant string, dirRO bool, extra ...bind) (*prepared, error) {
	binds, err := i.mounts(dir, tenant, dirRO, extra...)
	if err != nil {
		return nil, err
	}
	p := &prepared{spec: newRlimits(lim)}
	p.spec.NProc = i.cfg.Processes
	if i.root {
		uid := i.uid(tenant)
		p.spec.UID, p.spec.GID = int64(uid), int64(uid)
	}

	a := []string{i.bwrap,
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--uid", strconv.Itoa(insideUID), "--gid", strconv.Itoa(insideUID), "--hostname", "sandbox",
	}
	for _, s := range i.cfg.System {
		fi, err := os.Lstat(s)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(s)
			if err != nil {
				continue
			}
			a = append(a, "--symlink", target, s)
		default:
			a = append(a, "--ro-bind", s, s)
		}
	}
	// bwrap's root and /dev are tmpfs of their own: both are made read-only
	// at the end, and /dev/shm is a bounded tmpfs, so that nothing but
	// /tmp (bounded) and the binds holds what a command writes.
	size := strconv.FormatInt(i.cfg.TmpSize, 10)
	a = append(a, "--proc", "/proc", "--dev", "/dev",
		"--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
		"--perms", "1777", "--size", size, "--tmpfs", insideTmp)
	for _, b := range binds {
		src := b.src
		if i.root {
			// A sandbox user cannot reach directories under, say, a 0700
			// /root: the helper mounts them where it can (stage).
			src = spawn.StagePath(len(p.stage))
			p.stage = append(p.stage, b.src)
		}
		op := "--bind"
		if b.ro {
			op = "--ro-bind"
		}
		a = append(a, op, src, b.dst)
	}
	p.spec.Binds = int64(len(p.stage))
	p.args = append(a, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", dir, "--clearenv")
	return p, nil
}

// mounts makes the workspace dir and the tenant's cache writable by the
// sandbox user and returns the directories a sandbox shows beyond the
// system paths: dir (read-only if dirRO, its .git read-only always), the
// tenant's cache, the toolchain's read-only directories and extra.
func (i *isolation) mounts(dir, tenant string, dirRO bool, extra ...bind) ([]bind, error) {
	cache, err := i.tenantCache(tenant)
	if err != nil {
		return nil, err
	}
	if i.root {
		if err := chownTree(dir, i.uid(tenant), false); err != nil {
			return nil, fmt.Errorf("hand %s to the sandbox user: %w", dir, err)
		}
	}
	binds := []bind{{src: dir, dst: dir, ro: dirRO}}
	if fi, err := os.Stat(filepath.Join(dir, ".git")); err == nil && fi.IsDir() && !dirRO {
		binds = append(binds, bind{src: filepath.Join(dir, ".git"), dst: filepath.Join(dir, ".git"), ro: true})
	}
	binds = append(binds, bind{src: cache, dst: insideCache})
	for _, d := range i.ro {
		if _, err := os.Stat(d); err == nil && !i.system(d) {
			binds = append(binds, bind{src: d, dst: d, ro: true})
		}
	}
	for _, b := range extra {
		if b.src != b.dst || !i.system(b.src) {
			binds = append(binds, b)
		}
	}
	return binds, nil
}

// system reports whether path is already shown as part of a system path.
func (i *isolation) system(path string) bool {
	for _, s := range i.cfg.System {
		if path == s || strings.HasPrefix(path, s+"/") {
			return true
		}
	}
	return false
}

// Contain rewrites cmd, a long-running process of a session's tenant (an
// MCP server), to run in a sandbox of this backend: cmd.Dir is shown
// read-only (a process that outlives a call could otherwise race the
// runner's own work on the workspace), /tmp is its writable directory, its
// executable is shown read-only, its environment is
// cmd.Env with HOME and TMPDIR inside the sandbox, and its limits are the
// backend's but for the wall-time limit, which the caller manages. Stop it by
// killing its process group: the sandbox dies with bwrap. For the local
// backend, Contain leaves cmd unchanged.
func (l *Local) Contain(cmd *exec.Cmd, tenant string) error {
	i := l.iso
	if i == nil {
		return nil
	}
	if cmd.Dir == "" || !filepath.IsAbs(cmd.Dir) || !filepath.IsAbs(cmd.Path) {
		return fmt.Errorf("contain %s: needs an absolute executable and working directory", cmd.Path)
	}
	if i.gv != nil {
		return l.containGVisor(cmd, events.TenantOrDefault(tenant))
	}
	// The directory is read-only: a process that lives across calls must not
	// be able to change the workspace while the runner, as root, works on it
	// (hands it to the sandbox user, writes for file tools, commits).
	p, err := i.prepare(l.cfg.Limits, cmd.Dir, events.TenantOrDefault(tenant), true, bind{src: cmd.Path, dst: cmd.Path, ro: true})
	if err != nil {
		return fmt.Errorf("contain %s: %w", cmd.Path, err)
	}
	env := []string{}
	for _, kv := range cmd.Env {
		k, _, _ := strings.Cut(kv, "=")
		if k != "HOME" && k != "TMPDIR" {
			env = append(env, kv)
		}
	}
	p.env(append(env, "HOME="+insideTmp, "TMPDIR="+insideTmp))
	// The seccomp filter goes to bwrap as the descriptor after any the
	// caller passes; fd 3, the helper's status pipe, is closed on exec
	// whatever it is. The runner's copy of the pipe is closed when the
	// garbage collector finalises it: cmd is the caller's to start.
	f, err := sandboxFilter()
	if err != nil {
		return fmt.Errorf("contain %s: %w", cmd.Path, err)
	}
	sc, err := f.file()
	if err != nil {
		return fmt.Errorf("contain %s: %w", cmd.Path, err)
	}
	if len(cmd.ExtraFiles) == 0 {
		cmd.ExtraFiles = []*os.File{nil}
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, sc)
	fd := 2 + len(cmd.ExtraFiles)
	p.spec.Keep = int64(fd)
	cmd.Args = p.helper(slices.Concat([]string{"--seccomp", strconv.Itoa(fd), "--", cmd.Path}, cmd.Args[1:])...)
	cmd.Path = l.helper
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + l.cfg.Path}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if i.root {
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNS
	}
	return nil
}

// env appends the command's environment to bwrap's arguments.
func (p *prepared) env(env []string) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		p.args = append(p.args, "--setenv", k, v)
	}
}

// tenantCache returns the tenant's writable cache directory (GOCACHE is
// its go-build), making it on first use. When the runner is root, a new
// go-build cache starts as hard links to the runner's own GOCACHE, so that a
// tenant's first `go test` does not rebuild the standard library (tens of
// seconds): the links stay owned by the runner's user and read-only to the
// sandbox user, who can add entries and unlink its links but not change the
// runner's files. A runner that is not root shares its user with the
// sandbox, so it starts the cache empty instead.
func (i *isolation) tenantCache(tenant string) (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	dir := filepath.Join(i.cache, tenant)
	if i.made[tenant] {
		return dir, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "go-build")); err == nil {
		i.made[tenant] = true
		return dir, nil
	}
	stage, err := os.MkdirTemp(i.cache, ".new-")
	if err != nil {
		return "", fmt.Errorf("tenant cache: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := os.Mkdir(filepath.Join(stage, "go-build"), 0o755); err != nil {
		return "", fmt.Errorf("tenant cache: %w", err)
	}
	if i.root && i.hostCache != "" && tenant != probeTenant {
		linkTree(i.hostCache, filepath.Join(stage, "go-build"))
	}
	if i.root {
		if err := chownTree(stage, i.uid(tenant), true); err != nil {
			return "", fmt.Errorf("tenant cache: %w", err)
		}
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		return "", fmt.Errorf("tenant cache: %w", err)
	}
	if err := os.Rename(stage, dir); err != nil {
		return "", fmt.Errorf("tenant cache: %w", err)
	}
	i.made[tenant] = true
	return dir, nil
}

// linkTree recreates src's directories under dst and hard-links its files,
// as far as it can: a cache seeded in part is still a cache.
func linkTree(src, dst string) {
	_ = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." {
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if os.Mkdir(target, 0o755) != nil {
				return filepath.SkipDir
			}
		case d.Type().IsRegular():
			if err := os.Link(path, target); errors.Is(err, syscall.EXDEV) {
				return filepath.SkipAll // another file system: no links at all
			}
		}
		return nil
	})
}

// chownTree gives dir and everything in it but .git to uid (only its
// directories if dirsOnly), skipping what it already owns: the runner's file
// tools and git checkouts create files as root, which the sandbox user could
// not then change. It works through an os.Root, so no link, even one swapped
// in during the walk, takes it outside dir.
func chownTree(dir string, uid int, dirsOnly bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" && path != "." {
			return filepath.SkipDir
		}
		if dirsOnly && !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == uid {
			return nil
		}
		return root.Lchown(path, uid, uid)
	})
}

// Probe starts one sandbox and runs true in it, to tell whether the backend
// works on this machine. The error names what failed (bwrap's own message:
// user namespaces disabled, a mount refused…).
// probeTenant is the tenant a Probe runs as: its cache starts empty. Seeding
// it from the runner's GOCACHE (hard links to every entry) made each runner
// start walk the whole build cache before it could take a call, seconds on a
// busy one, and a probe runs `true`.
const probeTenant = "rath-probe"

func (l *Local) Probe(ctx context.Context) error {
	if l.remote != nil {
		return l.remote.probe(ctx)
	}
	if l.iso == nil {
		return nil
	}
	dir, err := os.MkdirTemp(l.runs, "probe-")
	if err != nil {
		return fmt.Errorf("probe %s: %w", l.name, err)
	}
	defer removeAll(dir)
	w := &localWorkspace{l: l, id: "probe", dir: dir, tenant: probeTenant}
	if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
		return fmt.Errorf("probe %s: %w", l.name, err)
	}
	res, err := w.Run(ctx, Cmd{Args: []string{"true"}})
	if err != nil {
		return fmt.Errorf("probe %s: %w", l.name, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("probe %s: a sandbox running true exited %d: %s", l.name, res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return nil
}

// sandboxInit reads bwrap's --info-fd report, the host pid of the
// sandbox's init, and returns a pidfd for it, or -1 if bwrap ended before
// reporting. The init outlives bwrap's own exit for as long as the kernel
// takes to kill the rest of its pid namespace, so Run waits on it
// (waitSandbox). Between the report and pidfd_open the init runs the
// command, so its pid cannot have been reused.
func sandboxInit(r io.Reader) int {
	var v struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 4096)).Decode(&v); err != nil || v.ChildPid <= 0 {
		return -1
	}
	fd, err := unix.PidfdOpen(v.ChildPid, 0)
	if err != nil {
		return -1 // already gone
	}
	return fd
}

// waitSandbox waits until the sandbox's init has exited: the kernel kills
// every other process of the sandbox's pid namespace before it reports the
// init's exit, so once this returns no process of the run is left. bwrap
// exits as soon as its command does (or when the runner kills it, and its
// init with it: --die-with-parent); an init still alive after a while is
// killed directly.
func waitSandbox(info *os.File, inner <-chan int) {
	if info == nil {
		return
	}
	info.Close() // bwrap is gone: a report not read by now never will be
	fd := <-inner
	if fd < 0 {
		return
	}
	defer unix.Close(fd)
	for range 2 {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 10_000)
		if err == unix.EINTR {
			continue
		}
		if n > 0 || err != nil {
			return
		}
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// tenantsDir keeps, per session, the tenant whose caches and user its
// workspace uses.
func (l *Local) tenantFile(sessionID string) string {
	return filepath.Join(l.root, ".tenants", sessionID)
}

// HostUID is the host user a tenant's commands run as, and false when they
// run as the runner's own user: on the local backend, or on an isolating
// one whose runner is not root.
func (l *Local) HostUID(tenant string) (int, bool) {
	if l.iso == nil || !l.iso.root {
		return 0, false
	}
	return l.iso.uid(events.TenantOrDefault(tenant)), true
}
