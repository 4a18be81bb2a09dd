package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A call that changes nothing costs no git process: HEAD is read from .git
// and the tree's fingerprint says nothing changed, also just after the
// workspace was placed (its files are read by content then). A change is
// committed as before. Not parallel: it moves the package's clock.
func TestCommitWithoutChangesRunsNoGit(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"go.mod": "module example\n", "a/b.go": "package a\n"})
	l := newLocal(t)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})

	// Just written: the racy files are read by content, no git.
	head, err := ws.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := sandbox.GitRuns(l)
	if again, err := ws.Commit(ctx, "nothing"); err != nil || again != head {
		t.Fatalf("commit without changes: %q, %v; want %q", again, err, head)
	}
	if n := sandbox.GitRuns(l) - before; n != 0 {
		t.Fatalf("%d git processes for a call that changed nothing just after placement, want 0", n)
	}
	// Just written and changed: committed.
	writeFiles(t, ws.Dir(), map[string]string{"go.mod": "module changed\n"})
	if next, err := ws.Commit(ctx, "racy edit"); err != nil || next == head {
		t.Fatalf("commit after an edit just after placement: %q, %v; want a commit after %q", next, err, head)
	}

	// Seen from a second later (the kernel's file times are coarse): no git.
	defer sandbox.MoveClock(time.Second)()
	if head, err = ws.Head(ctx); err != nil {
		t.Fatal(err)
	}
	before = sandbox.GitRuns(l)
	for range 3 {
		if again, err := ws.Commit(ctx, "nothing"); err != nil || again != head {
			t.Fatalf("commit without changes: %q, %v; want %q", again, err, head)
		}
	}
	if n := sandbox.GitRuns(l) - before; n != 0 {
		t.Fatalf("%d git processes for calls that changed nothing, want 0", n)
	}

	// A change is committed (git runs), and HEAD read from .git is git's.
	writeFiles(t, ws.Dir(), map[string]string{"a/b.go": "package a\n\nvar X = 1\n"})
	next, err := ws.Commit(ctx, "edit")
	if err != nil || next == head {
		t.Fatalf("commit after an edit: %q, %v; want a new commit", next, err)
	}
	if out, err := exec.Command("git", "-C", ws.Dir(), "rev-parse", "HEAD").Output(); err != nil || string(out) != next+"\n" {
		t.Fatalf("git says HEAD is %q (%v), Commit said %q", out, err, next)
	}
	// A file removed, and one added with no content: both seen.
	for _, change := range []func() error{
		func() error { return os.Remove(filepath.Join(ws.Dir(), "go.mod")) },
		func() error { return os.WriteFile(filepath.Join(ws.Dir(), "empty"), nil, 0o644) },
	} {
		h, err := ws.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := change(); err != nil {
			t.Fatal(err)
		}
		c, err := ws.Commit(ctx, "change")
		if err != nil || c == h {
			t.Fatalf("commit after a change: %q, %v; want a commit after %q", c, err, h)
		}
	}
}

// HEAD is read from .git when the ref is loose or detached, and asked of
// git when it is packed.
func TestHeadFromGitFiles(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"x": "1\n"})
	l := newLocal(t)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})
	want, err := exec.Command("git", "-C", ws.Dir(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name    string
		git     []string
		withGit bool
	}{
		{"loose ref", nil, false},
		{"packed ref", []string{"pack-refs", "--all"}, true},
		{"detached", []string{"checkout", "--quiet", "--detach"}, false},
	} {
		if step.git != nil {
			if out, err := exec.Command("git", append([]string{"-C", ws.Dir()}, step.git...)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", step.name, err, out)
			}
		}
		before := sandbox.GitRuns(l)
		got, err := ws.Head(ctx)
		if err != nil || got+"\n" != string(want) {
			t.Fatalf("%s: head %q, %v; want %q", step.name, got, err, want)
		}
		if ran := sandbox.GitRuns(l) > before; ran != step.withGit {
			t.Errorf("%s: git ran: %v, want %v", step.name, ran, step.withGit)
		}
	}
}

// A HEAD naming a ref outside refs/heads (a command on local can write
// .git) is not read from the files: git is asked, and refuses it.
func TestHeadNamingAnEscapingRefIsAskedOfGit(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"x": "1\n"})
	l := newLocal(t)
	ws := place(t, l, "s1", &sandbox.Seed{Dir: src})
	if err := os.WriteFile(filepath.Join(ws.Dir(), ".git", "HEAD"), []byte("ref: refs/heads/../../../../etc/hostname\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := sandbox.GitRuns(l)
	head, err := ws.Head(context.Background())
	if err == nil || sandbox.GitRuns(l) == before {
		t.Fatalf("head %q, %v (git ran: %v); want git's refusal", head, err, sandbox.GitRuns(l) > before)
	}
	t.Log(err)
}
