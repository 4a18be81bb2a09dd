package sandbox_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t), "s1", nil)
	dir := ws.Dir()
	outside := t.TempDir()
	writeFiles(t, dir, map[string]string{"a/b.txt": "b", "c.txt": "c"})
	for name, target := range map[string]string{
		"etc":          "/etc",                         // absolute, outside
		"up":           "../" + filepath.Base(outside), // relative, outside
		"a/deep":       "../../..",
		"dangling":     "../nowhere/x", // dangling, outside: a write would create it
		"gitlink":      ".git",
		"a/gitcfg":     "../.git/config",
		"self":         "a",             // inside
		"a/sibling":    "../c.txt",      // inside
		"new":          "a/not-yet.txt", // inside, dangling
		"loop1":        "loop2",
		"loop2":        "loop1",
		"a/in-and-out": "../a/../../x",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		path string
		want string // relative to dir; "" means ErrEscape
	}{
		{path: "c.txt", want: "c.txt"},
		{path: "", want: "."},
		{path: ".", want: "."},
		{path: "./a//b.txt", want: "a/b.txt"},
		{path: "a/../c.txt", want: "c.txt"},
		{path: "a/new/dir/file.txt", want: "a/new/dir/file.txt"},
		{path: "self/b.txt", want: "a/b.txt"},
		{path: "a/sibling", want: "c.txt"},
		{path: "new", want: "a/not-yet.txt"},
		{path: ".gitignore", want: ".gitignore"},
		{path: "a/.github/x", want: "a/.github/x"},

		{path: "../x"},
		{path: ".."},
		{path: "a/../../x"},
		{path: "/etc/passwd"},
		{path: dir + "/c.txt"},
		{path: "etc"},
		{path: "etc/passwd"},
		{path: "etc/new-file"},
		{path: "up"},
		{path: "up/x"},
		{path: "a/deep/etc/passwd"},
		{path: "dangling"},
		{path: "a/in-and-out"},
		{path: ".git"},
		{path: ".git/config"},
		{path: "a/../.git/HEAD"},
		{path: ".GIT/config"},
		{path: "sub/.git/x"},
		{path: "gitlink/config"},
		{path: "a/gitcfg"},
		{path: "nul\x00byte"},
	} {
		got, err := ws.Resolve(tc.path)
		if tc.want == "" {
			var pe *sandbox.PathError
			if !errors.Is(err, sandbox.ErrEscape) || !errors.As(err, &pe) {
				t.Errorf("Resolve(%q) = %q, %v; want ErrEscape", tc.path, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Resolve(%q): %v", tc.path, err)
			continue
		}
		if want := filepath.Join(dir, tc.want); got != want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.path, got, want)
		}
	}

	// A loop is an error, but not an escape.
	if _, err := ws.Resolve("loop1/x"); err == nil || errors.Is(err, sandbox.ErrEscape) {
		t.Errorf("Resolve(loop1/x) = %v, want a non-escape error", err)
	}
}
