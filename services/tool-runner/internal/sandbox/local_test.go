package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

func TestPlaceFromDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod":        "module example\n",
		"cmd/main.go":   "package main\n",
		".git/config":   "[core]\n",    // the example's own history stays out
		"sub/.git":      "gitdir: x\n", // so does a submodule's gitfile
		"script.sh":     "#!/bin/sh\n",
		".gitignore":    "*.log\n",
		"ignored.log":   "noise\n",
		"docs/empty.md": "",
	})
	if err := os.Chmod(filepath.Join(src, "script.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := newLocal(t)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})

	if ws.Backend() != "local" || ws.ID() == "" || ws.Host() == "" || !filepath.IsAbs(ws.Dir()) {
		t.Errorf("workspace %q %q %q %q", ws.Backend(), ws.ID(), ws.Host(), ws.Dir())
	}
	if got := readFile(t, filepath.Join(ws.Dir(), "cmd/main.go")); got != "package main\n" {
		t.Errorf("main.go = %q", got)
	}
	if got := readFile(t, filepath.Join(ws.Dir(), ".git/HEAD")); got != "ref: refs/heads/session\n" {
		t.Errorf(".git/HEAD = %q: the example's .git was copied", got)
	}
	if fi, err := os.Stat(filepath.Join(ws.Dir(), "script.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("script.sh lost its executable bit: %v %v", fi, err)
	}
	res := run(t, ws, sandbox.Cmd{Args: []string{"git", "ls-files"}})
	if want := ".gitignore\ncmd/main.go\ndocs/empty.md\ngo.mod\nscript.sh\n"; res.Stdout != want {
		t.Errorf("first commit holds\n%s(%s)\nwant\n%s", res.Stdout, res.Stderr, want)
	}
	head, err := ws.Head(ctx)
	if err != nil || len(head) != 40 {
		t.Fatalf("head %q, %v", head, err)
	}

	// Commit is a no-op when nothing changed, and records what did.
	if again, err := ws.Commit(ctx, "nothing"); err != nil || again != head {
		t.Errorf("commit without changes: %q, %v; want %q", again, err, head)
	}
	writeFiles(t, ws.Dir(), map[string]string{"go.mod": "module example\n\ngo 1.26\n", "new.txt": "new\n"})
	next, err := ws.Commit(ctx, "edit")
	if err != nil || next == head {
		t.Fatalf("commit: %q, %v", next, err)
	}
	diff, err := ws.Diff(ctx, head, next)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--- a/go.mod\n+++ b/go.mod\n", "+go 1.26\n", "+++ b/new.txt\n", "+new\n"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if _, err := ws.Diff(ctx, "--output=/tmp/x", next); err == nil {
		t.Error("Diff accepted an option as a commit")
	}

	if _, err := l.Place(ctx, "s1", nil); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("placing s1 twice: %v, want ErrExists", err)
	}
	if _, err := l.Place(ctx, "../evil", nil); err == nil {
		t.Error("placed a session ID with a path in it")
	}
	reopened, err := l.Open("s1")
	if err != nil || reopened.Dir() != ws.Dir() || reopened.ID() != ws.ID() {
		t.Errorf("open: %v, %v", reopened, err)
	}
	if _, err := l.Open("s2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("open s2: %v, want ErrNotFound", err)
	}
}

func TestPlaceEmpty(t *testing.T) {
	t.Parallel()
	ws := place(t, newLocal(t), "s1", nil)
	head, err := ws.Head(context.Background())
	if err != nil || len(head) != 40 {
		t.Errorf("an empty workspace has head %q, %v; want a commit", head, err)
	}
	entries, err := os.ReadDir(ws.Dir())
	if err != nil || len(entries) != 1 || entries[0].Name() != ".git" {
		t.Errorf("empty workspace holds %v, %v", entries, err)
	}
}

func TestForkMaterialisesCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newLocal(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"f.txt": "one\n"})
	a := place(t, l, "a", &sandbox.Seed{Dir: src})
	first, err := a.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, a.Dir(), map[string]string{"f.txt": "two\n", "later.txt": "A's later change\n"})
	second, err := a.Commit(ctx, "A moves on")
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, a, sandbox.Cmd{Args: []string{"git", "tag", "a-tag"}}); res.ExitCode != 0 {
		t.Fatalf("tag: %+v", res)
	}
	// Uncommitted work in A is not part of any commit, so not of the fork.
	writeFiles(t, a.Dir(), map[string]string{"dirty.txt": "uncommitted\n"})

	b := place(t, l, "b", &sandbox.Seed{Parent: a, Commit: first[:12]})
	if got, err := b.Head(ctx); err != nil || got != first {
		t.Fatalf("fork head %q, %v; want %q", got, err, first)
	}
	if got := readFile(t, filepath.Join(b.Dir(), "f.txt")); got != "one\n" {
		t.Errorf("fork sees f.txt = %q", got)
	}
	for _, name := range []string{"later.txt", "dirty.txt"} {
		if _, err := os.Stat(filepath.Join(b.Dir(), name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("fork sees %s: %v", name, err)
		}
	}
	// Nothing of A after the fork point exists in B's repository, and B has
	// no way back to A.
	for _, args := range [][]string{{"cat-file", "-e", second}, {"rev-parse", "--verify", "a-tag"}} {
		if res := run(t, b, sandbox.Cmd{Args: append([]string{"git"}, args...)}); res.ExitCode == 0 {
			t.Errorf("git %v succeeds in the fork", args)
		}
	}
	if res := run(t, b, sandbox.Cmd{Args: []string{"git", "remote"}}); res.Stdout != "" {
		t.Errorf("fork has remotes %q", res.Stdout)
	}

	// B's commits do not reach A.
	writeFiles(t, b.Dir(), map[string]string{"f.txt": "B's version\n"})
	bHead, err := b.Commit(ctx, "B diverges")
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(a.Dir(), "f.txt")); got != "two\n" {
		t.Errorf("A sees f.txt = %q after B committed", got)
	}
	if got, _ := a.Head(ctx); got != second {
		t.Errorf("A's head moved to %q", got)
	}
	if res := run(t, a, sandbox.Cmd{Args: []string{"git", "cat-file", "-e", bHead}}); res.ExitCode == 0 {
		t.Error("B's commit exists in A")
	}

	// A fork of a fork works the same way, and bad seeds are refused.
	c := place(t, l, "c", &sandbox.Seed{Parent: b, Commit: bHead})
	if got := readFile(t, filepath.Join(c.Dir(), "f.txt")); got != "B's version\n" {
		t.Errorf("fork of fork sees %q", got)
	}
	for name, seed := range map[string]*sandbox.Seed{
		"unknown commit":   {Parent: a, Commit: strings.Repeat("0", 40)},
		"option as commit": {Parent: a, Commit: "--upload-pack=touch /tmp/pwned"},
		"commit only":      {Commit: first},
		"dir and parent":   {Dir: src, Parent: a, Commit: first},
	} {
		if _, err := l.Place(ctx, "d", seed); err == nil {
			t.Errorf("%s: placed", name)
		}
	}
	if _, err := l.Open("d"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a failed Place left a workspace behind: %v", err)
	}
}
