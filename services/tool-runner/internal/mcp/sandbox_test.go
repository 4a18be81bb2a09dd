package mcp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// TestServerRunsInTheSessionSandbox: a server process started for a session
// on the isolating backend runs in its sandbox: its own pid namespace, its
// workspace the only writable path, an environment of its own.
func TestServerRunsInTheSessionSandbox(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{sandbox.BackendBwrap, sandbox.BackendGVisor} {
		t.Run(backend, func(t *testing.T) { serverRunsInTheSessionSandbox(t, backend) })
	}
}

// isolating returns an isolating backend that starts sandboxes here, or
// fails the test naming what is missing.
func isolating(t *testing.T, backend string) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	var b *sandbox.Local
	var err error
	switch backend {
	case sandbox.BackendBwrap:
		if _, err := exec.LookPath("bwrap"); err != nil {
			t.Fatalf("the bwrap backend needs bubblewrap (bwrap), which is not installed: run scripts/install-sandbox.sh: %v", err)
		}
		b, err = sandbox.NewIsolated(cfg, sandbox.DefaultIsolation())
	default:
		if _, err := exec.LookPath("runsc"); err != nil {
			t.Fatalf("the gvisor backend needs gVisor's runsc, which is not installed: run scripts/install-sandbox.sh: %v", err)
		}
		b, err = sandbox.NewGVisor(cfg, sandbox.DefaultIsolation())
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background()); err != nil {
		t.Fatalf("%s cannot start a sandbox here: %v", backend, err)
	}
	return b
}

func serverRunsInTheSessionSandbox(t *testing.T, backend string) {
	b := isolating(t, backend)
	ws, err := b.Place(context.Background(), "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	p := newPool(t, nil)
	tg := target(t, "s1")
	tg.Dir = ws.Dir()
	tg.Contain = func(c *exec.Cmd) error { return b.Contain(c, "") }

	if pid := pidOf(t, p, tg); pid > 10 {
		t.Errorf("the server is pid %d: not in a pid namespace of its own", pid)
	}
	env := call(t, p, tg, "env", "").Text
	if !strings.Contains(env, "PWD="+ws.Dir()+"\n") || !strings.Contains(env, "HOME=/tmp") || !strings.Contains(env, "GREETING=hello") {
		t.Errorf("server environment:\n%s", env)
	}
	// The workspace is read-only to a server: a process that lives across
	// calls must not change it while the runner, as root, works on it.
	if res := call(t, p, tg, "write", `{"path": "inside.txt", "content": "ok"}`); !res.IsError || !strings.Contains(res.Text, "read-only") {
		t.Errorf("write in the workspace: %+v, want refused", res)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), "inside.txt")); err == nil {
		t.Error("a server wrote in the workspace")
	}
	if res := call(t, p, tg, "write", `{"path": "/tmp/scratch.txt", "content": "ok"}`); res.IsError {
		t.Errorf("write in the server's /tmp: %+v", res)
	}
	for _, path := range []string{filepath.Join(outside, "escape.txt"), "/usr/escape.txt"} {
		call(t, p, tg, "write", `{"path": `+strconv.Quote(path)+`, "content": "x"}`)
		if _, err := os.Stat(path); err == nil {
			t.Errorf("the server wrote %s outside its workspace", path)
		}
	}
}
