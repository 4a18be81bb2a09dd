package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A workspace placed without git processes is the repository git would
// have made: the same tree, a clean status, a repository fsck accepts, and
// one git can go on committing in.
func TestPlaceWritesTheRepositoryGitWould(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod":              "module example\n",
		"a/b.go":              "package a\n",
		"a.c":                 "int main;\n", // sorts before "a/" in the index, after it in the tree
		"a-b/x":               "x\n",
		"dir with space/ü.md": "# ü\n",
		"empty":               "",
		"deep/er/est/f":       strings.Repeat("line\n", 1000),
	})
	if err := os.Chmod(filepath.Join(src, "a/b.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"link-to-file": "go.mod", "link-to-dir": "a", "dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "empty-dir/inner"), 0o755); err != nil {
		t.Fatal(err)
	}

	l := newLocal(t)
	runs := sandbox.GitRuns(l)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})
	if n := sandbox.GitRuns(l) - runs; n != 0 {
		t.Errorf("placing a plain tree ran git %d times, want 0", n)
	}
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	git(ws.Dir(), "fsck", "--strict", "--no-dangling")
	if st := git(ws.Dir(), "status", "--porcelain", "--untracked-files=all"); st != "" {
		t.Errorf("status of a fresh workspace:\n%s", st)
	}
	if got := git(ws.Dir(), "log", "--format=%an <%ae>|%s", "session"); got != "rath <rath@localhost>|seed from "+filepath.Base(src)+"\n" {
		t.Errorf("log: %q", got)
	}

	// git's own tree for the same files.
	ref := t.TempDir()
	if out, err := exec.Command("cp", "-a", src+"/.", ref).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	git(ref, "init", "--quiet")
	git(ref, "add", "--all")
	if want, got := git(ref, "write-tree"), git(ws.Dir(), "rev-parse", "HEAD^{tree}"); got != want {
		t.Errorf("tree %s, git's is %s", got, want)
	}

	// Git goes on from there: an edit is committed and diffed.
	head, err := ws.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, ws.Dir(), map[string]string{"a.c": "int main(void);\n"})
	next, err := ws.Commit(ctx, "edit")
	if err != nil || next == head {
		t.Fatalf("commit after an edit: %q, %v", next, err)
	}
	diff, err := ws.Diff(ctx, head, next)
	if err != nil || !strings.Contains(diff, "+int main(void);") || strings.Contains(diff, "go.mod") {
		t.Fatalf("diff: %v\n%s", err, diff)
	}
}

// An empty workspace's commit holds git's empty tree.
func TestPlaceEmptyWorkspace(t *testing.T) {
	l := newLocal(t)
	ws := place(t, l, "s1", nil)
	out, err := exec.Command("git", "-C", ws.Dir(), "rev-parse", "HEAD^{tree}").CombinedOutput()
	if err != nil || string(out) != "4b825dc642cb6eb9a060e54bf8d69288fbee4904\n" {
		t.Fatalf("tree of an empty workspace: %s, %v", out, err)
	}
	if out, err := exec.Command("git", "-C", ws.Dir(), "fsck", "--strict").CombinedOutput(); err != nil {
		t.Fatalf("fsck: %v: %s", err, out)
	}
}

// A seed with a .gitignore is committed by git itself, which leaves the
// ignored files out.
func TestPlaceSeedWithGitignoreUsesGit(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{".gitignore": "*.log\n", "kept": "1\n", "noise.log": "x\n"})
	l := newLocal(t)
	runs := sandbox.GitRuns(l)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})
	if sandbox.GitRuns(l) == runs {
		t.Error("a seed with a .gitignore was committed without git")
	}
	out, err := exec.Command("git", "-C", ws.Dir(), "ls-files").CombinedOutput()
	if err != nil || string(out) != ".gitignore\nkept\n" {
		t.Fatalf("tracked files: %q, %v", out, err)
	}
}
