package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A workspace moved to another host as a bundle keeps its commits (the
// evidence names them), and a workspace the session left there earlier is
// brought forward to where it is now.
func TestWorkspaceMovesAsABundle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	here, there := newLocal(t), newLocal(t)
	ws := place(t, here, "s", nil)
	first, err := ws.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, ws.Dir(), map[string]string{"a.txt": "one\n", "dir/b.txt": "two\n"})
	second, err := ws.Commit(ctx, "edit")
	if err != nil {
		t.Fatal(err)
	}
	bundle, head, err := here.Bundle(ctx, "s")
	if err != nil || head != second {
		t.Fatalf("bundle: head %s, %v; want %s", head, err, second)
	}
	moved := place(t, there, "s", &sandbox.Seed{Bundle: bundle, Commit: head})
	if got, err := moved.Head(ctx); err != nil || got != second {
		t.Fatalf("moved workspace at %s, %v; want %s", got, err, second)
	}
	if got := readFile(t, moved.Dir()+"/dir/b.txt"); got != "two\n" {
		t.Errorf("b.txt = %q", got)
	}
	if diff, err := moved.Diff(ctx, first, second); err != nil || diff == "" {
		t.Errorf("the history did not move: diff %q, %v", diff, err)
	}

	// It goes on there, then comes back: the old workspace here is
	// brought forward.
	writeFiles(t, moved.Dir(), map[string]string{"a.txt": "three\n"})
	third, err := moved.Commit(ctx, "edit there")
	if err != nil {
		t.Fatal(err)
	}
	back, head, err := there.Bundle(ctx, "s")
	if err != nil || head != third {
		t.Fatalf("bundle back: %s, %v", head, err)
	}
	if err := here.Advance(ctx, "s", back, third); err != nil {
		t.Fatal(err)
	}
	ws, err = here.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ws.Head(ctx); err != nil || got != third {
		t.Fatalf("brought forward to %s, %v; want %s", got, err, third)
	}
	if got := readFile(t, ws.Dir()+"/a.txt"); got != "three\n" {
		t.Errorf("a.txt = %q after advancing", got)
	}

	// A workspace that changed after the session left is not touched.
	writeFiles(t, moved.Dir(), map[string]string{"a.txt": "four\n"})
	fourth, err := moved.Commit(ctx, "edit there again")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, ws.Dir(), map[string]string{"a.txt": "changed here\n"})
	if _, err := ws.Commit(ctx, "edit here"); err != nil {
		t.Fatal(err)
	}
	again, _, err := there.Bundle(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := here.Advance(ctx, "s", again, fourth); !errors.Is(err, sandbox.ErrDiverged) {
		t.Fatalf("advance a diverged workspace: %v, want ErrDiverged", err)
	}
	if got := readFile(t, ws.Dir()+"/a.txt"); got != "changed here\n" {
		t.Errorf("a diverged workspace was changed: a.txt = %q", got)
	}
}

// A bundle is content another runner sent: garbage, a commit it does not
// reach and a commit that is no hash are refused, and nothing is placed.
func TestBadBundlesAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	here, there := newLocal(t), newLocal(t)
	place(t, here, "s", nil)
	bundle, head, err := here.Bundle(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		seed   sandbox.Seed
		badArg bool
	}{
		{"garbage", sandbox.Seed{Bundle: []byte("# v2 git bundle\nnot really\n"), Commit: head}, true},
		{"empty", sandbox.Seed{Bundle: []byte{}, Commit: head}, true},
		{"unreached commit", sandbox.Seed{Bundle: bundle, Commit: "0123456789abcdef0123456789abcdef01234567"}, true},
		{"option as commit", sandbox.Seed{Bundle: bundle, Commit: "--upload-pack=touch /tmp/pwned"}, false},
		{"no commit", sandbox.Seed{Bundle: bundle}, false},
	} {
		_, err := there.Place(ctx, fmt.Sprintf("t%d", i), &tc.seed)
		if err == nil {
			t.Errorf("%s: placed", tc.name)
			continue
		}
		if tc.badArg && !errors.Is(err, sandbox.ErrBadSeed) {
			t.Errorf("%s: %v, want ErrBadSeed", tc.name, err)
		}
		if _, err := there.Open(fmt.Sprintf("t%d", i)); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: a workspace was left: %v", tc.name, err)
		}
	}
	if _, _, err := there.Bundle(ctx, "nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("bundle of no workspace: %v", err)
	}
}
