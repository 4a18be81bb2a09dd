package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFindCgroupsV2 sets up a delegated cgroup v2 in a directory that
// stands in for the cgroup file system (the hosts the tests run on have
// no memory controller in v2): the runner moves itself to a leaf of its
// own, enables the controllers for its children, and a call's group gets
// its limits.
func TestFindCgroupsV2(t *testing.T) {
	root := t.TempDir()
	own := filepath.Join(root, "system.slice", "rath.service")
	write(t, filepath.Join(own, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	write(t, filepath.Join(own, "cgroup.subtree_control"), "\n")
	mountinfo := write(t, filepath.Join(t.TempDir(), "mountinfo"),
		"30 22 0:27 / /sys rw - sysfs sysfs rw\n"+
			"not a mount line\n"+
			"35 30 0:30 / "+root+" rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
	self := write(t, filepath.Join(t.TempDir(), "cgroup"), "0::/system.slice/rath.service\n")

	h := findCgroups(mountinfo, self)
	if h.version != 2 || !slices.Equal(h.parents, []string{filepath.Join(own, groupName)}) {
		t.Fatalf("found %+v", h)
	}
	if got := read(t, filepath.Join(own, "rath-runner", "cgroup.procs")); got != "0" {
		t.Errorf("the runner did not move itself to its leaf: %q", got)
	}
	if got := read(t, filepath.Join(own, "cgroup.subtree_control")); got != "+memory +pids +cpu" {
		t.Errorf("controllers enabled: %q", got)
	}
	g, err := h.newCallGroup(Limits{CallMemory: 1 << 20, CallProcesses: 7, CallCPU: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.max": "1048576", "memory.swap.max": "0", "pids.max": "7"} {
		if got := read(t, filepath.Join(g.dirs[0], file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	write(t, filepath.Join(g.dirs[0], "memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	write(t, filepath.Join(g.dirs[0], "pids.events"), "max 4\n")
	write(t, filepath.Join(g.dirs[0], "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\n")
	if u := g.usage(); u != (groupUsage{cpu: 1500 * time.Millisecond, oomKills: 1, forksRefused: 4}) {
		t.Errorf("usage %+v", u)
	}
	if d := g.describe(); !strings.Contains(d, "call-memory=1048576B call-processes=7 call-cpu=1s (the call's processes together, cgroup v2 rath-calls/") {
		t.Errorf("describe = %q", d)
	}
}

// TestRemoveStale: the groups of a runner that has ended are removed, a
// live runner's are not, even empty (its command may not have joined yet),
// and names that are not groups of a runner are left alone.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	// 4194304 is the largest pid_max the kernel allows, and pids stay below
	// pid_max: no process has it.
	for _, name := range []string{"4194304-1", strconv.Itoa(os.Getppid()) + "-7", "rath-runner", "x-1", "-1", "12"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStale(dir)
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"-1", "12", strconv.Itoa(os.Getppid()) + "-7", "rath-runner", "x-1"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// TestRemoveStaleKills: what a crashed runner's call left running in its
// group is killed, and the group removed.
func TestRemoveStaleKills(t *testing.T) {
	h := cgroups()
	if h.version == 0 {
		t.Fatalf("no control group for a call here (%s): run the tests as root on cgroup v1 or with a delegated cgroup v2", h.why)
	}
	parent := h.parents[len(h.parents)-1]
	dir := filepath.Join(parent, "4194304-1") // no process has this pid: the runner has ended
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(dir) })
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	removeStale(parent)
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the stale group's process ended with %v, want killed", err)
	}
	removeStale(parent) // the first may have found it still exiting
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the stale group is still there: %v", err)
	}
}

// TestFindCgroupsRefuses: what the runner may not use is reported, never
// guessed around.
func TestFindCgroupsRefuses(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "hugetlb\n")
	mountinfo := write(t, filepath.Join(t.TempDir(), "mountinfo"), "40 30 0:37 / "+root+" rw - cgroup2 cgroup2 rw\n")
	self := write(t, filepath.Join(t.TempDir(), "cgroup"), "0::/\n")
	h := findCgroups(mountinfo, self)
	if h.version == 2 || !strings.Contains(h.why, "has no memory controller (it has: hugetlb): not delegated to the runner") {
		t.Errorf("a v2 without memory: %+v", h)
	}
	if h := findCgroups(filepath.Join(root, "missing"), self); h.version != 0 || !strings.Contains(h.why, "read the mount table") {
		t.Errorf("no mount table: %+v", h)
	}
	if d := (cgroupHost{why: "x"}).describe(); d != "none: x; each process has its rlimits only" {
		t.Errorf("describe = %q", d)
	}
}

// TestReadCgroupFiles: the parsers of /proc files take what they do not
// understand as absent.
func TestReadCgroupFiles(t *testing.T) {
	mi := write(t, filepath.Join(t.TempDir(), "mountinfo"),
		"31 30 0:28 / /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpu,cpuacct\n"+
			"32 30 0:29 /sub /mnt/memory rw shared:1 - cgroup cgroup rw,memory\n"+
			" - \n\n- cgroup\n")
	mounts, err := readCgroupMounts(mi)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 2 || mounts[0].point != "/sys/fs/cgroup/cpu acct" || !slices.Equal(mounts[0].opts, []string{"rw", "cpu", "cpuacct"}) || mounts[1].prefix != "/sub" {
		t.Errorf("mounts %+v", mounts)
	}
	self := write(t, filepath.Join(t.TempDir(), "cgroup"), "4:memory:/a/b\n2:cpu,cpuacct:/c\nbogus\n0::/d\n")
	own, err := readOwnCgroups(self)
	if err != nil {
		t.Fatal(err)
	}
	if own["memory"] != "/a/b" || own["cpuacct"] != "/c" || own["cpu"] != "/c" || own[""] != "/d" || len(own) != 4 {
		t.Errorf("own %v", own)
	}
	f := write(t, filepath.Join(t.TempDir(), "events"), "oom 2\noom_kill x\n")
	if _, err := readKey(f, "oom_kill"); err == nil {
		t.Error("a value that is not a number was read")
	}
	if _, err := readKey(f, "max"); err == nil {
		t.Error("a missing key was read")
	}
}

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
