package sandbox_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// newIsolated returns the isolating backend rooted in a temporary directory.
// A machine without bubblewrap or without user namespaces fails the test,
// naming what is missing: the isolation tests are never skipped.
func newIsolated(t *testing.T, opts ...func(*sandbox.Config, *sandbox.Isolation)) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Limits.Timeout = 20 * time.Second
	cfg.Limits.Output = 64 << 10
	iso := sandbox.DefaultIsolation()
	for _, o := range opts {
		o(&cfg, &iso)
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("the isolating backend needs bubblewrap (bwrap), which is not installed: run scripts/install-sandbox.sh (apt-get install bubblewrap): %v", err)
	}
	b, err := sandbox.NewIsolated(cfg, iso)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background()); err != nil {
		t.Fatalf("bubblewrap cannot start a sandbox on this machine (user namespaces?): %v", err)
	}
	return b
}

func TestIsolatedBasics(t *testing.T) {
	t.Parallel()
	ws := place(t, newIsolated(t), "s1", nil)
	if ws.Backend() != sandbox.BackendBwrap || ws.ID() != "bwrap-s1" {
		t.Errorf("backend %q id %q", ws.Backend(), ws.ID())
	}
	res := run(t, ws, sh("pwd; id -u; echo hi > f; cat f; echo err >&2; exit 3"))
	if res.ExitCode != 3 || res.Stdout != ws.Dir()+"\n1000\nhi\n" || res.Stderr != "err\n" {
		t.Errorf("got %+v", res)
	}
	if got := readFile(t, ws.Dir()+"/f"); got != "hi\n" {
		t.Errorf("f = %q", got)
	}
	if !strings.Contains(res.Limits, "nproc=") {
		t.Errorf("limits %q", res.Limits)
	}
}
