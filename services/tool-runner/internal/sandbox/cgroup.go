package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A call's limits as a whole (Limits.CallMemory, CallProcesses, CallCPU)
// hold for every process the command starts, together, through a control
// group of its own (ADR 0043): the command's first process (the spawn
// helper, or the traced command while it is stopped after its execve)
// joins the group before it can start another, so no process of the call
// is ever outside it. The runner reads the group's counters to name the
// limit that stopped a call, kills what is left in it when the call ends,
// and removes it.
//
// cgroup v2 is used where the runner's own cgroup has the memory and pids
// controllers and the runner may write to it (a delegated subtree: systemd's
// Delegate=yes); cgroup v1 where the runner is root and the memory, pids and
// cpuacct hierarchies are mounted. Elsewhere a call has only its processes'
// rlimits, and Result.Limits and `rath doctor` say so.

// cgroupHost is what this host offers for call groups, found once per
// process: the hierarchy's version, the parent directories of the calls'
// groups, and why there are none.
type cgroupHost struct {
	version int // 2 or 1; 0: none
	// parents hold the calls' groups: one for v2; for v1, one per
	// hierarchy, in the order memory, pids, cpuacct.
	parents []string
	why     string
}

var (
	hostOnce  sync.Once
	hostCg    cgroupHost
	callSeq   atomic.Uint64
	v1Needed  = []string{"memory", "pids", "cpuacct"}
	v2Needed  = []string{"memory", "pids"}
	groupName = "rath-calls"
)

// cgroups returns what this host offers, finding it on first use.
func cgroups() cgroupHost {
	hostOnce.Do(func() { hostCg = findCgroups("/proc/self/mountinfo", "/proc/self/cgroup") })
	return hostCg
}

// CallLimitsBy says how the backend holds a call's limits as a whole: in
// a control group of the call's own (cgroup v2 or v1, and where), or why
// not, in which case each process has its rlimits only.
func (l *Local) CallLimitsBy() string {
	if l.cfg.NoCgroup {
		return "none: cgroups turned off by the configuration; each process has its rlimits only"
	}
	return cgroups().describe()
}

// describe says how call groups are made here, or why they are not.
func (h cgroupHost) describe() string {
	switch h.version {
	case 2:
		return "cgroup v2 (" + h.parents[0] + ")"
	case 1:
		return "cgroup v1 (" + strings.Join(h.parents, ", ") + ")"
	}
	return "none: " + h.why + "; each process has its rlimits only"
}

// cgroupMount is one cgroup file system of the mount table.
type cgroupMount struct {
	point  string
	v2     bool
	opts   []string // a v1 hierarchy's controllers
	prefix string   // the mount's root within its hierarchy
}

// findCgroups reads the mount table and this process's cgroups and sets up
// the parent of the calls' groups.
func findCgroups(mountinfo, self string) cgroupHost {
	mounts, err := readCgroupMounts(mountinfo)
	if err != nil {
		return cgroupHost{why: err.Error()}
	}
	own, err := readOwnCgroups(self)
	if err != nil {
		return cgroupHost{why: err.Error()}
	}
	var whyV2 string
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		p, ok := own[""]
		if !ok {
			break
		}
		h, err := setupV2(filepath.Join(m.point, strings.TrimPrefix(p, m.prefix)))
		if err == nil {
			return h
		}
		whyV2 = err.Error()
		break
	}
	if whyV2 == "" {
		whyV2 = "no cgroup v2 hierarchy"
	}
	h, err := setupV1(mounts, own)
	if err != nil {
		return cgroupHost{why: whyV2 + "; " + err.Error()}
	}
	return h
}

// setupV2 makes the calls' parent in the runner's own cgroup dir, as a
// delegated subtree is used: the runner moves itself into a leaf of its
// own (a cgroup that enables controllers for its children may hold no
// process), enables memory and pids for the children, and makes groupName
// beside its leaf.
func setupV2(dir string) (cgroupHost, error) {
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return cgroupHost{}, fmt.Errorf("cgroup v2: %w", err)
	}
	have := strings.Fields(string(ctrl))
	for _, c := range v2Needed {
		if !contains(have, c) {
			return cgroupHost{}, fmt.Errorf("cgroup v2 %s has no %s controller (it has: %s): not delegated to the runner", dir, c, strings.Join(have, " "))
		}
	}
	enable := "+memory +pids"
	if contains(have, "cpu") {
		enable += " +cpu"
	}
	calls := filepath.Join(dir, groupName)
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return cgroupHost{}, fmt.Errorf("cgroup v2: %w", err)
	}
	if !contains(strings.Fields(string(sub)), "memory") || !contains(strings.Fields(string(sub)), "pids") {
		leaf := filepath.Join(dir, "rath-runner")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return cgroupHost{}, fmt.Errorf("cgroup v2: not delegated to the runner: %w", err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return cgroupHost{}, fmt.Errorf("cgroup v2: move the runner to %s: %w", leaf, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
			return cgroupHost{}, fmt.Errorf("cgroup v2: enable controllers in %s (another process in it?): %w", dir, err)
		}
	}
	if err := os.Mkdir(calls, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return cgroupHost{}, fmt.Errorf("cgroup v2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(calls, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return cgroupHost{}, fmt.Errorf("cgroup v2: enable controllers in %s: %w", calls, err)
	}
	removeStale(calls)
	return cgroupHost{version: 2, parents: []string{calls}}, nil
}

// setupV1 makes the calls' parent in the runner's own cgroup of each of the
// memory, pids and cpuacct hierarchies. Only root may.
func setupV1(mounts []cgroupMount, own map[string]string) (cgroupHost, error) {
	if os.Geteuid() != 0 {
		return cgroupHost{}, errors.New("cgroup v1 needs the runner to be root")
	}
	h := cgroupHost{version: 1}
	for _, c := range v1Needed {
		var dir string
		for _, m := range mounts {
			if !m.v2 && contains(m.opts, c) {
				dir = filepath.Join(m.point, strings.TrimPrefix(own[c], m.prefix), groupName)
				break
			}
		}
		if dir == "" {
			return cgroupHost{}, fmt.Errorf("no cgroup v1 %s hierarchy", c)
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return cgroupHost{}, fmt.Errorf("cgroup v1: %w", err)
		}
		removeStale(dir)
		h.parents = append(h.parents, dir)
	}
	return h, nil
}

// removeStale removes the groups a runner that has ended left in dir
// (named "<its pid>-<n>"), killing first what is left in them: the calls
// of a runner that crashed. Another runner's stay, even empty (its
// command may not have joined yet). A group whose processes take a while
// to exit stays too (rmdir refuses it), until the next runner's start.
func removeStale(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pid, _, ok := strings.Cut(e.Name(), "-")
		n, err := strconv.Atoi(pid)
		if !e.IsDir() || !ok || err != nil || n <= 0 {
			continue
		}
		if n != os.Getpid() && syscall.Kill(n, 0) != syscall.ESRCH {
			continue // its runner is alive
		}
		g := &callGroup{dirs: []string{filepath.Join(dir, e.Name())}}
		g.kill()
		_ = syscall.Rmdir(g.dirs[0])
	}
}

// readCgroupMounts reads the cgroup file systems of a mountinfo file.
func readCgroupMounts(path string) ([]cgroupMount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	var out []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - type source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, cgroupMount{point: unescapeMount(f[4]), v2: true, prefix: f[3]})
		case "cgroup":
			out = append(out, cgroupMount{point: unescapeMount(f[4]), opts: strings.Split(g[2], ","), prefix: f[3]})
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readOwnCgroups reads a /proc/PID/cgroup file: each v1 controller's path,
// and the v2 path under "".
func readOwnCgroups(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read this process's cgroups: %w", err)
	}
	own := map[string]string{}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// callGroup is one call's control group: a directory per hierarchy (one
// for v2; memory, pids and cpuacct for v1).
type callGroup struct {
	version int
	dirs    []string
	lim     Limits
}

// newCallGroup makes a call's group under h's parents with the limits of
// lim. Nothing is in it yet: its first process joins it (procs).
func (h cgroupHost) newCallGroup(lim Limits) (*callGroup, error) {
	name := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(callSeq.Add(1), 10)
	g := &callGroup{version: h.version, lim: lim}
	for _, p := range h.parents {
		d := filepath.Join(p, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("make the call's cgroup: %w", err)
		}
		g.dirs = append(g.dirs, d)
	}
	if err := g.limit(); err != nil {
		g.remove()
		return nil, fmt.Errorf("set the call's cgroup limits: %w", err)
	}
	return g, nil
}

// The files of each version; v1's are in dirs[0] (memory), dirs[1]
// (pids), dirs[2] (cpuacct).
func (g *callGroup) memDir() string  { return g.dirs[0] }
func (g *callGroup) pidsDir() string { return g.dirs[min(1, len(g.dirs)-1)] }
func (g *callGroup) cpuDir() string  { return g.dirs[len(g.dirs)-1] }

// limit writes the group's limits. Swap is not an escape from the memory
// limit: v2's swap limit is zero, v1's memory+swap limit is the memory
// limit (where the kernel accounts swap).
func (g *callGroup) limit() error {
	write := func(dir, file, v string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(v), 0)
	}
	optional := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	if m := g.lim.CallMemory; m > 0 {
		v := strconv.FormatInt(m, 10)
		if g.version == 2 {
			errs = append(errs, write(g.memDir(), "memory.max", v), optional(write(g.memDir(), "memory.swap.max", "0")))
		} else {
			errs = append(errs, write(g.memDir(), "memory.limit_in_bytes", v), optional(write(g.memDir(), "memory.memsw.limit_in_bytes", v)))
		}
	}
	if n := g.lim.CallProcesses; n > 0 {
		errs = append(errs, write(g.pidsDir(), "pids.max", strconv.FormatInt(n, 10)))
	}
	return errors.Join(errs...)
}

// procs are the files a process writes its pid (or 0, itself) to to join
// the group, one per hierarchy.
func (g *callGroup) procs() []string {
	out := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// join moves process pid into the group.
func (g *callGroup) join(pid int) error {
	for _, p := range g.procs() {
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join the call's cgroup: %w", err)
		}
	}
	return nil
}

// describe is the group's part of Result.Limits.
func (g *callGroup) describe() string {
	return fmt.Sprintf("call-memory=%s call-processes=%s call-cpu=%s (the call's processes together, cgroup v%d %s/%s)",
		orUnlimited(g.lim.CallMemory, "B"), orUnlimited(g.lim.CallProcesses, ""), durOrUnlimited(g.lim.CallCPU),
		g.version, groupName, filepath.Base(g.dirs[0]))
}

func orUnlimited(v int64, unit string) string {
	if v <= 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10) + unit
}

func durOrUnlimited(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	return d.String()
}

// cpu is the CPU time the group's processes have used, those that ended
// included.
func (g *callGroup) cpu() (time.Duration, error) {
	if g.version == 2 {
		v, err := readKey(filepath.Join(g.cpuDir(), "cpu.stat"), "usage_usec")
		return time.Duration(v) * time.Microsecond, err
	}
	b, err := os.ReadFile(filepath.Join(g.cpuDir(), "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(v), err
}

// groupUsage is what a call's group counted.
type groupUsage struct {
	cpu time.Duration
	// oomKills is how many of its processes the kernel killed at the
	// memory limit; forksRefused how many forks the process limit refused.
	oomKills, forksRefused int64
}

// usage reads the group's counters; a counter it cannot read is zero.
func (g *callGroup) usage() groupUsage {
	var u groupUsage
	u.cpu, _ = g.cpu()
	if g.version == 2 {
		u.oomKills, _ = readKey(filepath.Join(g.memDir(), "memory.events"), "oom_kill")
	} else {
		u.oomKills, _ = readKey(filepath.Join(g.memDir(), "memory.oom_control"), "oom_kill")
	}
	u.forksRefused, _ = readKey(filepath.Join(g.pidsDir(), "pids.events"), "max")
	return u
}

// readKey reads the value of key in a flat-keyed cgroup file ("key value"
// lines).
func readKey(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// kill kills every process in the group: at once through cgroup.kill
// where the kernel has it (v2, Linux 5.14), else each pid the group lists,
// again while a round finds one it had not killed (a process forking
// meanwhile is bounded by the group's process limit). A killed process is
// listed until it has exited: it is not killed again, so the rounds end
// as soon as nothing new appears rather than spinning until the kernel
// has finished the exits.
func (g *callGroup) kill() {
	if g.version == 2 {
		if os.WriteFile(filepath.Join(g.dirs[0], "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
	}
	killed := map[int]bool{}
	for range 1000 {
		b, err := os.ReadFile(filepath.Join(g.pidsDir(), "cgroup.procs"))
		if err != nil {
			return
		}
		fresh := false
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !killed[pid] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				killed[pid] = true
				fresh = true
			}
		}
		if !fresh {
			return
		}
	}
}

// remove kills what is left in the group and removes its directories. A
// killed process leaves its group when it exits, which may take the
// kernel a moment: rmdir is retried (EBUSY) for up to about a second.
func (g *callGroup) remove() error {
	var errs []error
	for _, d := range g.dirs {
		var err error
		for i := range 60 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, syscall.EBUSY) {
				break
			}
			g.kill()
			time.Sleep(time.Duration(min(1<<i, 20)) * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
