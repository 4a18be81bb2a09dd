package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks matches os.Root's limit on symbolic links followed in one path, so
// that a path Resolve accepts is one os.Root can open.
const maxLinks = 8

// resolve maps rel, relative to root (absolute and free of symbolic links),
// to an absolute path under root, following symbolic links the way the
// kernel would and refusing any that lead outside root or into .git.
//
// Why not filepath.EvalSymlinks: it fails on a path that does not exist yet
// (a file about to be written), and on a dangling link, which is exactly the
// case where a write would create a file wherever the link points. Walking
// component by component resolves the existing prefix, then keeps the rest
// as written.
//
// Why not os.Root alone: it is the enforcement (file tools open through an
// os.Root on Dir, so a link swapped in between Resolve and the open still
// cannot escape), but its errors are not typed, and it knows nothing of .git.
// resolve gives callers a clear, typed reason first; its rules are os.Root's
// (no absolute link targets, no ".." above the root even in passing, at most
// eight links), so the two agree on every path.
func resolve(root, rel string) (string, error) {
	if rel == "" {
		rel = "."
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return "", &PathError{Path: rel, Reason: "contains a NUL byte"}
	}
	if filepath.IsAbs(rel) {
		return "", &PathError{Path: rel, Reason: "is absolute; use a path relative to the workspace"}
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &PathError{Path: rel, Reason: "leaves the workspace"}
	}
	if inGitDir(clean) {
		return "", &PathError{Path: rel, Reason: ".git is off limits"}
	}

	cur := root
	pending := strings.Split(clean, "/")
	links := 0
walk:
	for len(pending) > 0 {
		name := pending[0]
		pending = pending[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// Only a link target can bring ".." here: the cleaned path has none.
			if cur == root {
				return "", &PathError{Path: rel, Reason: "a symbolic link in it leads outside the workspace"}
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Nothing exists from here on, so no link can redirect the rest.
			cur = filepath.Join(append([]string{next}, pending...)...)
			break walk
		}
		if err != nil {
			return "", fmt.Errorf("resolve %q: %w", rel, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("resolve %q: too many levels of symbolic links", rel)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("resolve %q: %w", rel, err)
		}
		if filepath.IsAbs(target) {
			return "", &PathError{Path: rel, Reason: "a symbolic link in it points outside the workspace (" + target + ")"}
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	if cur != root && !strings.HasPrefix(cur, root+"/") {
		return "", &PathError{Path: rel, Reason: "a symbolic link in it leads outside the workspace"}
	}
	if r, err := filepath.Rel(root, cur); err != nil || inGitDir(r) {
		return "", &PathError{Path: rel, Reason: "leads into .git, which is off limits"}
	}
	return cur, nil
}

// inGitDir reports whether any component of a cleaned relative path is .git,
// in any case: case-insensitive file systems would open the same directory.
func inGitDir(clean string) bool {
	for c := range strings.SplitSeq(clean, "/") {
		if strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}
