package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox/spawn"
)

// BackendGVisor is the name of the gVisor backend (ADR 0040): every command
// runs in a gVisor sandbox of its own, started by runsc, whose kernel is
// gVisor's Sentry, a kernel in user space: the command's system calls reach
// the Sentry, not the host's kernel, and the Sentry reaches the host's
// files only through runsc's gofer, which serves the sandbox's mounts and
// nothing else.
//
// The rest is the bwrap backend's (isolate.go): workspaces kept as Local
// keeps them, the same read-only system paths (Isolation.System), the
// workspace the only writable path but for a bounded /tmp and the tenant's
// cache, its .git read-only, the tenant's host user, the same limits (set
// by the Sentry from the container's rlimits), no network but the sandbox's
// own loopback, and the allowed hosts through the same proxy (network.go),
// whose unix socket the sandbox may open (runsc --host-uds=open).
const BackendGVisor = "gvisor"

// gvisor is the gvisor backend's runsc.
type gvisor struct {
	runsc    string // runsc's path
	platform string // runsc --platform; empty for its default
}

// NewGVisor returns the gVisor backend. It keeps workspaces as Local does,
// in cfg.Root, and runs every command with runsc (gVisor). It fails, naming
// what is missing, if runsc cannot be found or the runner is not root
// (runsc run, which serves the sandbox's mounts from the host, needs root:
// its rootless mode is for tests of gVisor itself); Probe tells whether it
// can actually start a sandbox on this machine.
func NewGVisor(cfg Config, iso Isolation) (*Local, error) {
	if err := errors.Join(cfg.Validate(), iso.Validate()); err != nil {
		return nil, err
	}
	bin := iso.Runsc
	if bin == "" {
		bin = "runsc"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: gVisor's runsc (%s) not found: install the runsc package (scripts/install-sandbox.sh): %w", BackendGVisor, bin, err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("sandbox %s: runsc runs sandboxes for a runner that is root; this one runs as uid %d", BackendGVisor, os.Geteuid())
	}
	l, err := newIsolating(cfg, iso, BackendGVisor, &isolation{gv: &gvisor{runsc: path, platform: iso.RunscPlatform}})
	if err != nil {
		return nil, err
	}
	// The bundles of processes contained by an earlier run of the runner,
	// which ended with it.
	removeAll(filepath.Join(l.runs, mcpBundles))
	return l, nil
}

// ociSpec is the part of an OCI runtime configuration (config.json) that
// runsc reads from the runner.
type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	} `json:"root"`
	Hostname string     `json:"hostname"`
	Mounts   []ociMount `json:"mounts"`
	Linux    struct {
		Namespaces []struct {
			Type string `json:"type"`
		} `json:"namespaces"`
	} `json:"linux"`
}

type ociProcess struct {
	User struct {
		UID int `json:"uid"`
		GID int `json:"gid"`
	} `json:"user"`
	Args            []string    `json:"args"`
	Env             []string    `json:"env"`
	Cwd             string      `json:"cwd"`
	Rlimits         []ociRlimit `json:"rlimits,omitempty"`
	Capabilities    struct{}    `json:"capabilities"` // none at all
	NoNewPrivileges bool        `json:"noNewPrivileges"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

// ociBundle is one run's OCI bundle: a directory holding config.json, the
// sandbox's root (an empty directory but for the system paths' symbolic
// links, shown read-only) and runsc's state (--root).
type ociBundle struct {
	dir, id string
}

func (b ociBundle) state() string { return filepath.Join(b.dir, "state") }

// spec is the OCI configuration of a command: binds are the directories
// mounts returned, uid the host user it runs as (the Sentry's files are
// created as it by the gofer), and its rlimits are lim's and the
// isolation's process limit, which the Sentry enforces itself. It returns
// the limits as the helper would report them.
func (i *isolation) spec(lim Limits, binds []bind, uid int, args, env []string, cwd string) (ociSpec, string) {
	var s ociSpec
	s.OCIVersion = "1.0.0"
	s.Hostname = "sandbox"
	s.Root.Path, s.Root.Readonly = "rootfs", true
	for _, ns := range []string{"pid", "ipc", "uts", "mount", "network"} {
		s.Linux.Namespaces = append(s.Linux.Namespaces, struct {
			Type string `json:"type"`
		}{ns})
	}
	p := &s.Process
	p.User.UID, p.User.GID = uid, uid
	p.Args, p.Env, p.Cwd, p.NoNewPrivileges = args, env, cwd, true
	r := newRlimits(lim)
	var report []string
	add := func(name, typ string, v int64, unit string, slack int64) {
		if v <= 0 {
			report = append(report, name+"=unlimited")
			return
		}
		p.Rlimits = append(p.Rlimits, ociRlimit{Type: typ, Soft: uint64(v), Hard: uint64(v + slack)})
		report = append(report, name+"="+strconv.FormatInt(v, 10)+unit)
	}
	// The Sentry does not enforce RLIMIT_CPU (runsc 0.0~20221219 lets a
	// busy loop run past it): the CPU limit is the spawn helper's, on runsc
	// and so on every process of the sandbox (gvisor).
	if r.CPU > 0 {
		report = append(report, "cpu="+strconv.FormatInt(r.CPU, 10)+"s (on runsc's processes)")
	} else {
		report = append(report, "cpu=unlimited")
	}
	add("nofile", "RLIMIT_NOFILE", r.NoFile, "", 0)
	add("fsize", "RLIMIT_FSIZE", r.FSize, "B", 0)
	add("nproc", "RLIMIT_NPROC", i.cfg.Processes, "", 0)
	add("as", "RLIMIT_AS", r.AS, "B", 0)

	size := strconv.FormatInt(i.cfg.TmpSize, 10)
	s.Mounts = []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"size=" + size, "mode=1777"}},
		{Destination: insideTmp, Type: "tmpfs", Source: "tmpfs", Options: []string{"size=" + size, "mode=1777"}},
	}
	for _, sys := range i.cfg.System {
		if fi, err := os.Lstat(sys); err == nil && fi.IsDir() || err == nil && fi.Mode().IsRegular() {
			s.Mounts = append(s.Mounts, ociMount{Destination: sys, Type: "bind", Source: sys, Options: []string{"rbind", "ro"}})
		}
	}
	for _, b := range binds {
		mode := "rw"
		if b.ro {
			mode = "ro"
		}
		s.Mounts = append(s.Mounts, ociMount{Destination: b.dst, Type: "bind", Source: b.src, Options: []string{"rbind", mode}})
	}
	return s, "rlimits set by gVisor's kernel: " + strings.Join(report, " ")
}

// makeBundle writes a run's bundle under parent. The sandbox's root is a
// directory of its own, read-only inside: runsc makes the mount points in
// it, and the system paths that are symbolic links on the host (/bin on a
// merged-/usr system) are the same links in it.
func (i *isolation) makeBundle(parent string, spec ociSpec) (ociBundle, error) {
	dir, err := os.MkdirTemp(parent, "gvisor-")
	if err != nil {
		return ociBundle{}, err
	}
	b := ociBundle{dir: dir, id: "rath-" + filepath.Base(dir)}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{rootfs, b.state()} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return b, err
		}
	}
	for _, sys := range i.cfg.System {
		fi, err := os.Lstat(sys)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(sys)
		if err != nil {
			continue
		}
		link := filepath.Join(rootfs, sys)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return b, err
		}
		if err := os.Symlink(target, link); err != nil {
			return b, err
		}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return b, err
	}
	return b, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}

// args is runsc's command line for a bundle: no network but the sandbox's
// loopback, no cgroups (the limits are rlimits, as on bwrap, and a runner
// killed mid-run would leave runsc's cgroups behind), and host unix sockets
// opened only when the command has the proxy's.
func (g *gvisor) args(b ociBundle, proxy bool) []string {
	a := []string{g.runsc, "--root", b.state(), "--network=none", "--ignore-cgroups"}
	if g.platform != "" {
		a = append(a, "--platform="+g.platform)
	}
	if proxy {
		a = append(a, "--host-uds=open")
	}
	return append(a, "run", "--bundle", b.dir, b.id)
}

// gvisor starts a command in a gVisor sandbox: the spawn helper sets its CPU
// limit and runsc runs it, in the run's process group, which the run kills on its timeout; runsc's
// sandbox process, in a session of its own, dies with runsc (runsc sets
// its parent-death signal), and release makes sure it has (sweep).
func (w *localWorkspace) gvisor(l *launch, argv []string, extra []bind, env []string) error {
	i := w.l.iso
	binds, err := i.mounts(w.dir, w.tenant, false, extra...)
	if err != nil {
		return err
	}
	spec, limits := i.spec(w.l.cfg.Limits, binds, i.uid(w.tenant), argv, env, w.dir)
	b, err := i.makeBundle(w.l.runs, spec)
	if b.dir != "" {
		l.oci = &b // release sweeps it, made in full or not
	}
	if err != nil {
		return fmt.Errorf("gVisor bundle: %w", err)
	}
	l.limits = limits
	// The helper sets the CPU limit alone, on runsc, whose gofer, sandbox
	// and the sandbox's stub processes (which run the command's code on
	// the ptrace platform) inherit it: SIGXCPU at the soft limit ends the
	// command as it does on bwrap. The other limits are the Sentry's
	// (spec): on runsc they would bound gVisor's kernel, not the command.
	cpu := spawn.Limits{CPU: newRlimits(w.l.cfg.Limits).CPU}
	// The helper joins the call's control group before it starts runsc:
	// the group's limits then hold for gVisor's sandbox as a whole (its
	// kernel, gofer and the command's processes together).
	var groups []string
	if l.cg != nil {
		groups = l.cg.procs()
		cpu.Cgroups = int64(len(groups))
	}
	l.cmd.Args = slices.Concat([]string{spawn.Arg0, cpu.Encode()}, groups, i.gv.args(b, l.proxy != nil))
	l.cmd.Dir = b.dir
	l.cmd.Env = []string{"PATH=" + w.l.cfg.Path}
	return l.start()
}

// sweep ends what is left of a run's gVisor sandbox and removes its bundle.
// runsc run removes its sandbox when its command exits; when the run killed
// runsc instead (a timeout, a cancelled call), the sandbox process dies by
// its parent-death signal, on its own time: sweep kills it through a pidfd
// and waits for it, so that no sandbox outlives its run.
func (b *ociBundle) sweep() {
	defer removeAll(b.dir)
	data, err := os.ReadFile(filepath.Join(b.state(), b.id+"_sandbox:"+b.id+".state"))
	if err != nil {
		return // runsc removed its state: the sandbox is gone
	}
	var st struct {
		Sandbox struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(data, &st) != nil || st.Sandbox.Pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(st.Sandbox.Pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	// The pid may have been reused since the sandbox exited: kill only a
	// process that is this run's sandbox, as its command line says, read
	// while the pidfd's process is still alive.
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Sandbox.Pid) + "/cmdline")
	if !bytes.Contains(cmdline, []byte("runsc-sandbox")) || !bytes.Contains(cmdline, []byte(b.dir)) || exited(fd, 0) {
		return
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	exited(fd, 10*time.Second)
}

// exited waits up to d for the process of a pidfd to exit.
func exited(fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		// Never negative: poll(2) waits forever on a negative timeout.
		n, err := unix.Poll(fds, int(max(0, time.Until(deadline).Milliseconds())))
		if err == unix.EINTR {
			continue
		}
		return n > 0 || err != nil
	}
}

// containGVisor is Contain on the gvisor backend: the process runs in a
// gVisor sandbox of its own, cmd.Dir read-only, as Contain says. Its bundle
// stays in the backend's run directory while it may run (nothing tells the
// backend when a contained process ends), named so that NewGVisor removes
// it at the next start (mcpBundle).
func (l *Local) containGVisor(cmd *exec.Cmd, tenant string) error {
	i := l.iso
	binds, err := i.mounts(cmd.Dir, tenant, true, bind{src: cmd.Path, dst: cmd.Path, ro: true})
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
	env = append(env, "HOME="+insideTmp, "TMPDIR="+insideTmp)
	lim := l.cfg.Limits
	spec, _ := i.spec(lim, binds, i.uid(tenant), append([]string{cmd.Path}, cmd.Args[1:]...), env, cmd.Dir)
	runs := filepath.Join(l.runs, mcpBundles)
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return fmt.Errorf("contain %s: %w", cmd.Path, err)
	}
	b, err := i.makeBundle(runs, spec)
	if err != nil {
		removeAll(b.dir)
		return fmt.Errorf("contain %s: gVisor bundle: %w", cmd.Path, err)
	}
	cpu := spawn.Limits{CPU: newRlimits(lim).CPU}
	cmd.Args = append([]string{spawn.Arg0, cpu.Encode()}, i.gv.args(b, false)...)
	cmd.Path = l.helper
	cmd.Dir = b.dir
	cmd.Env = []string{"PATH=" + l.cfg.Path}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	return nil
}

// mcpBundles is the directory, under the backend's run directory, of the
// bundles of contained processes.
const mcpBundles = "gvisor-contained"
