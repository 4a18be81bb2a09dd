package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A workspace moves to a tool runner on another host as a git bundle of its
// branch: the history travels with the files, so the commits the session's
// evidence names (commit_before, commit_after, forks' commits) are the same
// objects on the new host, and a workspace the session left there earlier
// can be brought forward instead of placed again (ADR 0042).

// bundleRef is the one ref a workspace bundle carries.
const bundleRef = "refs/heads/" + branch

// Bundle returns a git bundle of the session's workspace at its head, and
// that head.
func (l *Local) Bundle(ctx context.Context, sessionID string) ([]byte, string, error) {
	w, err := l.Open(sessionID)
	if err != nil {
		return nil, "", err
	}
	ws := w.(*localWorkspace)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	head, err := ws.head(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("bundle %s: %w", sessionID, err)
	}
	stage, err := os.MkdirTemp(l.staging, sessionID+"-bundle-")
	if err != nil {
		return nil, "", fmt.Errorf("bundle %s: %w", sessionID, err)
	}
	defer os.RemoveAll(stage)
	file := filepath.Join(stage, "workspace.bundle")
	// No delta search and no compression: a workspace's large files are
	// often binary (build outputs, data), which zlib only slows down, and
	// the bundle crosses the bus once (50 MB of random bytes: 17 s with
	// git's defaults, 5 s without, on a loaded 2-core machine).
	if _, err := l.runGit(ctx, ws.dir, "-c", "pack.window=0", "-c", "pack.compression=0", "bundle", "create", "--quiet", file, bundleRef); err != nil {
		return nil, "", fmt.Errorf("bundle %s: %w", sessionID, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("bundle %s: %w", sessionID, err)
	}
	return data, head, nil
}

// fromBundle makes the empty directory dir a repository holding bundle's
// history and checks out commit, which the bundle must reach.
func (l *Local) fromBundle(ctx context.Context, dir string, bundle []byte, commit string) error {
	if commit == "" {
		return errors.New("seed: a bundle needs the commit to check out")
	}
	if _, err := l.runGit(ctx, dir, "init", "--quiet", "--initial-branch="+branch); err != nil {
		return err
	}
	return l.fetchBundle(ctx, dir, bundle, commit)
}

// Advance brings the session's existing workspace forward to commit, from
// a bundle of the workspace it moved from: the session left this workspace
// at an earlier commit of the same history, and every call since ran
// elsewhere. A workspace whose head is not an ancestor of commit changed
// after the session left it, and is not touched.
func (l *Local) Advance(ctx context.Context, sessionID string, bundle []byte, commit string) error {
	w, err := l.Open(sessionID)
	if err != nil {
		return err
	}
	ws := w.(*localWorkspace)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	head, err := ws.head(ctx)
	if err != nil {
		return fmt.Errorf("advance %s: %w", sessionID, err)
	}
	if err := l.fetchBundle(ctx, ws.dir, bundle, ""); err != nil {
		return fmt.Errorf("advance %s: %w", sessionID, err)
	}
	if _, err := l.runGit(ctx, ws.dir, "merge-base", "--is-ancestor", head, commit); err != nil {
		return fmt.Errorf("advance %s: its workspace here is at commit %s, which commit %s does not descend from: %w", sessionID, head, commit, ErrDiverged)
	}
	if _, err := l.runGit(ctx, ws.dir, "reset", "--quiet", "--hard", commit); err != nil {
		return fmt.Errorf("advance %s: %w", sessionID, err)
	}
	ws.seen.commit = "" // Head reads the tree again
	return nil
}

// ErrDiverged is returned by Advance for a workspace that changed after the
// session left it.
var ErrDiverged = errors.New("the workspace diverged")

// fetchBundle fetches bundle's branch into the repository dir; with commit
// set, it checks commit out on the workspace's branch.
func (l *Local) fetchBundle(ctx context.Context, dir string, bundle []byte, commit string) error {
	if commit != "" {
		if err := checkCommit(commit); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	if len(bundle) == 0 {
		return fmt.Errorf("seed: %w: an empty workspace bundle", ErrBadSeed)
	}
	stage, err := os.MkdirTemp(l.staging, "fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	file := filepath.Join(stage, "workspace.bundle")
	if err := os.WriteFile(file, bundle, 0o600); err != nil {
		return err
	}
	if _, err := l.runGit(ctx, dir, "bundle", "verify", "--quiet", file); err != nil {
		return fmt.Errorf("seed: %w: %v", ErrBadSeed, err)
	}
	if _, err := l.runGit(ctx, dir, "fetch", "--quiet", "--no-tags", "--end-of-options", file, "+"+bundleRef+":refs/rath/moved"); err != nil {
		return fmt.Errorf("seed: %w: %v", ErrBadSeed, err)
	}
	if commit == "" {
		return nil
	}
	full, err := l.runGit(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", commit+"^{commit}")
	if err != nil {
		return fmt.Errorf("seed: %w: the bundle does not reach commit %s", ErrBadSeed, commit)
	}
	_, err = l.runGit(ctx, dir, "checkout", "--quiet", "-B", branch, strings.TrimSpace(full))
	return err
}
