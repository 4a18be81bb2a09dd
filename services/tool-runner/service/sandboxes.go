package service

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/internal/runner"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// BackendAuto, as Config.Backend, makes bwrap the default backend where it
// works and local, with a warning saying why, where it does not.
const BackendAuto = "auto"

// BwrapDir is the directory under Config.Sandbox.Root that holds the bwrap
// backend's workspaces: each backend has a root of its own.
const BwrapDir = ".bwrap"

// GVisorDir is the directory under Config.Sandbox.Root that holds the
// gvisor backend's workspaces.
const GVisorDir = ".gvisor"

// RemoteDir is the directory under Config.Sandbox.Root that holds the
// remote backend's workspaces (their git repositories; the files' copies
// are in the service's sandboxes).
const RemoteDir = ".remote"

// RemoteKeyEnv is the environment variable that holds the remote sandbox
// service's API key: a key is never a flag, which would show in ps.
const RemoteKeyEnv = "RATH_REMOTE_SANDBOX_KEY"

// SandboxStatus is what the tool runner finds about one sandbox backend on
// this machine.
type SandboxStatus struct {
	Name string `json:"name"`
	// Works tells whether the backend can place a session here; Why says
	// why not (for bwrap: not installed, or its own error starting a
	// sandbox).
	Works bool   `json:"works"`
	Why   string `json:"why,omitempty"`
	// Development is true for a backend that isolates nothing (local).
	Development bool `json:"development"`
	// Isolation is what a placement on it isolates (for the default
	// tenant's sessions), as rath.sandbox.placed records it.
	Isolation string `json:"isolation"`
	// Program is the program the backend runs commands with, where it was
	// found and its version; empty for a backend that needs none.
	Program string `json:"program,omitempty"`
	// Root is the directory of the backend's workspaces.
	Root string `json:"root"`
	// Helper is the spawn helper every command starts as: rath-sandbox-exec,
	// or /proc/self/exe (the runner's own binary, slower to start).
	Helper string `json:"helper,omitempty"`
	// Limits is how the backend sets a command's resource limits: "ptrace"
	// (the runner, on the command stopped after its execve) or "helper"
	// (the spawn helper, before it), with why not ptrace.
	Limits string `json:"limits,omitempty"`
	// CallLimits is how the backend holds a call's limits as a whole
	// (memory, processes and CPU time of all its processes together): in
	// a control group of the call's own, cgroup v2 or v1, or "none: " and
	// why, where each process has only its rlimits.
	CallLimits string `json:"call_limits,omitempty"`
	// Filter is the system-call filter the backend's commands run under;
	// empty for none.
	Filter string `json:"filter,omitempty"`
}

// Sandboxes is the tool runner's sandbox backends on this machine and the
// default one.
type Sandboxes struct {
	Backends []SandboxStatus `json:"backends"`
	// Asked is Config.Backend: BackendAuto or a backend's name.
	Asked string `json:"asked"`
	// Default is the backend of sessions whose workflow names none; empty
	// when Asked names a backend that does not work here.
	Default string `json:"default"`
	// Warning says why the default is a development backend, if it is.
	Warning string `json:"warning,omitempty"`
}

// Err says why the runner cannot start with these backends: the backend
// Asked names does not work here. Nil otherwise.
func (s Sandboxes) Err() error {
	if s.Default != "" {
		return nil
	}
	if s.Asked != BackendAuto {
		return fmt.Errorf("default sandbox backend %s does not work on this machine: %s", s.Asked, s.status(s.Asked).Why)
	}
	why := make([]string, len(s.Backends))
	for i, b := range s.Backends {
		why[i] = b.Name + ": " + b.Why
	}
	return fmt.Errorf("no sandbox backend works on this machine (%s)", strings.Join(why, "; "))
}

// CheckSandboxes sets up the sandbox backends of cfg as Run does (it makes
// their root directories) and starts a sandbox of each to tell which work
// on this machine, and why not. The error is cfg's own problems; a backend
// that does not work is in the answer (see Sandboxes.Err).
func CheckSandboxes(ctx context.Context, cfg Config) (Sandboxes, error) {
	if err := cfg.Validate(); err != nil {
		return Sandboxes{}, err
	}
	_, s := openBackends(ctx, cfg)
	return s, nil
}

// probeTimeout bounds the start of a probing sandbox.
const probeTimeout = 30 * time.Second

// openBackends sets up every backend cfg names and probes each: the ones
// that work are ready to place sessions, the others are kept with why.
func openBackends(ctx context.Context, cfg Config) (map[string]runner.Backend, Sandboxes) {
	// Each backend is set up and probed at once, on a goroutine of its
	// own: gvisor's probe starts a gVisor sandbox, about a second, which
	// every runner start would otherwise wait for after bwrap's.
	type probed struct {
		st        SandboxStatus
		b         *sandbox.Local
		isolation func(string) string
	}
	probe := func(name string, b *sandbox.Local, err error, isolation func(string) string, program func() string, root string) <-chan probed {
		out := make(chan probed, 1)
		go func() {
			st := SandboxStatus{Name: name, Development: events.Development(name), Isolation: isolation(events.DefaultTenant), Program: program(), Root: root}
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, probeTimeout)
				err = b.Probe(pctx)
				cancel()
				if name != events.BackendRemote { // its commands start elsewhere
					st.Helper, st.Limits = b.Helper(), b.LimitsBy()
					st.CallLimits, st.Filter = b.CallLimitsBy(), b.Filter()
				}
			}
			if err != nil {
				st.Why = err.Error()
			} else {
				st.Works = true
			}
			out <- probed{st: st, b: b, isolation: isolation}
		}()
		return out
	}
	iso := cfg.Isolation
	bwrapCfg := cfg.Sandbox
	bwrapCfg.Root = filepath.Join(cfg.Sandbox.Root, BwrapDir)
	b, err := sandbox.NewIsolated(bwrapCfg, iso)
	bwrap := probe(events.BackendBwrap, b, err, bwrapIsolation(cfg.Sandbox.Limits, iso, b), func() string { return bwrapProgram(ctx, iso) }, bwrapCfg.Root)
	gvCfg := cfg.Sandbox
	gvCfg.Root = filepath.Join(cfg.Sandbox.Root, GVisorDir)
	g, err := sandbox.NewGVisor(gvCfg, iso)
	gvisor := probe(events.BackendGVisor, g, err, gvisorIsolation(cfg.Sandbox.Limits, iso, g), func() string { return gvisorProgram(ctx, iso) }, gvCfg.Root)
	probes := []<-chan probed{bwrap, gvisor}
	if cfg.Remote.URL != "" {
		remoteCfg := cfg.Sandbox
		remoteCfg.Root = filepath.Join(cfg.Sandbox.Root, RemoteDir)
		r, err := sandbox.NewRemote(remoteCfg, cfg.Remote)
		isolation := func(string) string { return "" }
		if r != nil {
			isolation = func(string) string { return r.RemoteIsolation() }
		}
		probes = append(probes, probe(events.BackendRemote, r, err, isolation, func() string { return remoteProgram(cfg.Remote) }, remoteCfg.Root))
	}
	l, err := sandbox.NewLocal(cfg.Sandbox)
	probes = append(probes, probe(events.BackendLocal, l, err, func(string) string { return events.IsolationNone }, func() string { return "" }, cfg.Sandbox.Root))

	ready := map[string]runner.Backend{}
	s := Sandboxes{Asked: cfg.Backend}
	for _, c := range probes {
		p := <-c
		if p.st.Works {
			ready[p.st.Name] = runner.Backend{Local: p.b, Isolation: p.isolation}
		}
		s.Backends = append(s.Backends, p.st)
	}

	switch {
	case cfg.Backend != BackendAuto:
		if _, ok := ready[cfg.Backend]; ok {
			s.Default = cfg.Backend
		}
	case ready[events.BackendBwrap].Local != nil:
		s.Default = events.BackendBwrap
	case ready[events.BackendLocal].Local != nil:
		s.Default = events.BackendLocal
		s.Warning = fmt.Sprintf("sandbox backend bwrap does not work here (%s): sessions are placed on local, a development backend with no isolation: their commands run as the runner's user on this host", s.status(events.BackendBwrap).Why)
	}
	if s.Default == events.BackendLocal && cfg.Backend == events.BackendLocal {
		s.Warning = "the default sandbox backend is local, a development backend with no isolation: commands run as the runner's user on this host"
	}
	return ready, s
}

func (s Sandboxes) status(name string) SandboxStatus {
	for _, b := range s.Backends {
		if b.Name == name {
			return b
		}
	}
	return SandboxStatus{Name: name}
}

// bwrapProgram says where bubblewrap is and which version, or that it is
// not installed.
func bwrapProgram(ctx context.Context, iso sandbox.Isolation) string {
	bin := iso.Bwrap
	if bin == "" {
		bin = "bwrap"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "bubblewrap (" + bin + ") not installed"
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, path, "--version").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return path + " (" + v + ")"
	}
	return path
}

// gvisorProgram says where gVisor's runsc is and which version, or that it
// is not installed.
func gvisorProgram(ctx context.Context, iso sandbox.Isolation) string {
	bin := iso.Runsc
	if bin == "" {
		bin = "runsc"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "gVisor's runsc (" + bin + ") not installed"
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, path, "--version").Output()
	if v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n"); err == nil && v != "" {
		return path + " (" + v + ")"
	}
	return path
}

// gvisorIsolation describes a gvisor placement of a tenant's session
// (sandbox/gvisor.go); b, when the backend could be made, says which host
// user the tenant's commands run as.
func gvisorIsolation(lim sandbox.Limits, iso sandbox.Isolation, b *sandbox.Local) func(tenant string) string {
	return func(tenant string) string {
		user := "the tenant's host user"
		if b != nil {
			if uid, ok := b.HostUID(tenant); ok {
				user = fmt.Sprintf("host uid %d (tenant %s)", uid, tenant)
			}
		}
		platform := iso.RunscPlatform
		if platform == "" {
			platform = "ptrace"
		}
		parts := []string{
			"gvisor: gVisor's kernel in user space (runsc, platform " + platform + "): the command's system calls never reach the host's kernel; new pid, ipc, uts, mount and network namespaces, no capabilities, the host's files only through runsc's gofer (no network but the hosts a workflow allows an agent, through the runner's proxy)",
			"read-only system; writable: the workspace (its .git read-only) and a private /tmp",
			"uid inside = " + user,
			fmt.Sprintf("nproc %d, /tmp %s, %s", iso.Processes, size(iso.TmpSize), limits(lim)),
		}
		if b != nil {
			// The call's group holds gVisor's sandbox as a whole.
			glim := lim
			glim.CallProcesses = 0 // gVisor's nproc bounds the command's (sandbox/run.go)
			parts = append(parts, callLimits(glim, b.CallLimitsBy())+" (gVisor's kernel and gofer included)")
		}
		return strings.Join(parts, "; ")
	}
}

// remoteProgram names the remote sandbox service: its URL without path or
// query (never the key, which is not in it), and the image.
func remoteProgram(r sandbox.Remote) string {
	u, err := url.Parse(r.URL)
	if err != nil {
		return "remote sandbox service (unparsable URL)"
	}
	return fmt.Sprintf("%s://%s (OpenSandbox API, image %s)", u.Scheme, u.Host, r.Image)
}

// checkRemote is Config.Validate's check of Remote: the remote backend is
// configured only with a service URL, and the default only if configured.
func (c Config) checkRemote() error {
	if c.Remote.URL == "" {
		if c.Backend == events.BackendRemote {
			return errors.New("sandbox backend remote needs the service's URL (--remote-sandbox)")
		}
		return nil
	}
	return c.Remote.Validate()
}

// bwrapIsolation describes a bwrap placement of a tenant's session, from
// the configuration the backend runs commands with (sandbox/isolate.go);
// b, when the backend could be made, says which host user the tenant's
// commands run as.
func bwrapIsolation(lim sandbox.Limits, iso sandbox.Isolation, b *sandbox.Local) func(tenant string) string {
	return func(tenant string) string {
		user := "the runner's user on the host"
		if b != nil {
			if uid, ok := b.HostUID(tenant); ok {
				user = fmt.Sprintf("host uid %d (tenant %s)", uid, tenant)
			}
		}
		parts := []string{
			"bwrap: new user, mount, pid, ipc, uts and network namespaces (no network but the hosts a workflow allows an agent, through the runner's proxy), all capabilities dropped",
			"read-only system; writable: the workspace (its .git read-only) and a private /tmp",
			"uid 1000 inside, " + user,
			fmt.Sprintf("nproc %d, /tmp %s, %s", iso.Processes, size(iso.TmpSize), limits(lim)),
		}
		if b != nil {
			parts = append(parts, callLimits(lim, b.CallLimitsBy()), b.Filter())
		}
		return strings.Join(parts, "; ")
	}
}

// limits describes the limits every command runs under.
func limits(l sandbox.Limits) string {
	var out []string
	add := func(name string, v int64, s string) {
		if v > 0 {
			out = append(out, name+" "+s)
		}
	}
	out = append(out, "timeout "+l.Timeout.String())
	add("cpu", int64(l.CPU), l.CPU.String())
	add("address space", l.Memory, size(l.Memory))
	add("open files", l.OpenFiles, fmt.Sprint(l.OpenFiles))
	add("file size", l.FileSize, size(l.FileSize))
	return strings.Join(out, ", ")
}

// callLimits describes the limits of a call as a whole, held by by (the
// backend's CallLimitsBy).
func callLimits(l sandbox.Limits, by string) string {
	if why, ok := strings.CutPrefix(by, "none: "); ok {
		return "no per-call limits (" + why + ")"
	}
	var out []string
	if l.CallMemory > 0 {
		out = append(out, "memory "+size(l.CallMemory))
	}
	if l.CallProcesses > 0 {
		out = append(out, fmt.Sprintf("%d processes", l.CallProcesses))
	}
	if l.CallCPU > 0 {
		out = append(out, "CPU "+l.CallCPU.String())
	}
	if len(out) == 0 {
		return "no per-call limits (none configured)"
	}
	kind, _, _ := strings.Cut(by, " (")
	return "per call, all its processes together (" + kind + "): " + strings.Join(out, ", ")
}

// size prints a byte count in the largest binary unit that divides it.
func size(n int64) string {
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// checkBackend is Config.Validate's check of Backend.
func checkBackend(name string) error {
	if name == BackendAuto || slices.Contains(events.Backends(), name) {
		return nil
	}
	return fmt.Errorf("sandbox backend %q: want %s or one of %s", name, BackendAuto, strings.Join(events.Backends(), ", "))
}
