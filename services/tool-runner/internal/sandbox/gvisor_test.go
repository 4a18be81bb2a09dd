package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// A bundle's state names the sandbox's pid; sweep kills that process only
// if it is still this run's sandbox. A stale or forged pid (here a process
// of the test's own, then nonsense) is left alone, and the bundle goes
// either way.
func TestSweepKillsOnlyItsSandbox(t *testing.T) {
	other := exec.Command("sleep", "1000.401")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	}()
	for _, state := range []string{
		`{"sandbox":{"pid":` + strconv.Itoa(other.Process.Pid) + `}}`,
		`{"sandbox":{"pid":1}}`,
		`{"sandbox":{"pid":-5}}`,
		`{"sandbox":{"pid":"1"}}`,
		`not json`,
		``,
	} {
		b := ociBundle{dir: t.TempDir(), id: "rath-x"}
		if err := os.Mkdir(b.state(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.state(), b.id+"_sandbox:"+b.id+".state"), []byte(state), 0o600); err != nil {
			t.Fatal(err)
		}
		b.sweep()
		if err := other.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("state %q: sweep killed a process that is not its sandbox: %v", state, err)
		}
		if _, err := os.Stat(b.dir); !os.IsNotExist(err) {
			t.Errorf("state %q: the bundle is still there (%v)", state, err)
		}
	}
}

// The only host paths a gVisor sandbox may write are the workspace and the
// tenant's cache: every other mount of its configuration is read-only or a
// bounded tmpfs, its root read-only, and it has no capability.
func TestGVisorSpecWritesOnlyTheWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the gvisor backend needs a root runner: run the tests as root, as CI does")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatalf("the gvisor backend needs gVisor's runsc, which is not installed: run scripts/install-sandbox.sh: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Env = []string{"GOROOT=" + t.TempDir()}
	l, err := NewGVisor(cfg, DefaultIsolation())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(l.root, "s1")
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	binds, err := l.iso.mounts(dir, "tenant-a", false)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := l.iso.spec(l.cfg.Limits, binds, l.iso.uid("tenant-a"), []string{"true"}, nil, dir)
	if !spec.Root.Readonly || !spec.Process.NoNewPrivileges || spec.Process.User.UID == 0 {
		t.Errorf("root read-only %v, no new privileges %v, uid %d", spec.Root.Readonly, spec.Process.NoNewPrivileges, spec.Process.User.UID)
	}
	writable := map[string]bool{dir: true, insideCache: true}
	for _, m := range spec.Mounts {
		switch {
		case m.Type == "tmpfs" && slices.ContainsFunc(m.Options, func(o string) bool { return len(o) > 5 && o[:5] == "size=" }):
		case m.Type == "proc":
		case m.Type == "bind" && slices.Contains(m.Options, "ro"):
		case m.Type == "bind" && writable[m.Destination]:
		default:
			t.Errorf("mount %+v is writable", m)
		}
	}
	// .git is read-only over the workspace: it comes after it.
	git := slices.IndexFunc(spec.Mounts, func(m ociMount) bool { return m.Destination == filepath.Join(dir, ".git") })
	ws := slices.IndexFunc(spec.Mounts, func(m ociMount) bool { return m.Destination == dir })
	if git < 0 || ws < 0 || git < ws || !slices.Contains(spec.Mounts[git].Options, "ro") {
		t.Errorf("the workspace's .git is not read-only over it: %+v", spec.Mounts)
	}
}
