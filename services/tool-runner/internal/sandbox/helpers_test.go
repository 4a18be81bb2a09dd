package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// newLocal returns a local backend rooted in a temporary directory, with
// limits small enough for tests, adjusted by opts.
func newLocal(t testing.TB, opts ...func(*sandbox.Config)) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Limits.Timeout = 20 * time.Second
	cfg.Limits.Output = 64 << 10
	for _, o := range opts {
		o(&cfg)
	}
	l, err := sandbox.NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func place(t testing.TB, b sandbox.Backend, id string, seed *sandbox.Seed) sandbox.Workspace {
	t.Helper()
	ws, err := b.Place(context.Background(), id, seed)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// writeFiles writes name → content under dir, creating directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func run(t *testing.T, ws sandbox.Workspace, c sandbox.Cmd) sandbox.Result {
	t.Helper()
	res, err := ws.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sh(script string) sandbox.Cmd { return sandbox.Cmd{Args: []string{"sh", "-c", script}} }
