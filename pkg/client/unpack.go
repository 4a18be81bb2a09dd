package client

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Limits of a seed archive once unpacked (ADR 0031): a few kilobytes of
// gzip must not fill the disk of whoever unpacks it.
const (
	// MaxSeedBytes bounds the bytes of a seed's files.
	MaxSeedBytes = 1 << 30
	// MaxSeedEntries bounds its files, directories and links.
	MaxSeedEntries = 100_000
)

// ErrBadSeed is returned (wrapped) for a seed archive that cannot be
// unpacked as it is: malformed, over a limit, or with an entry a workspace
// cannot hold (a name leaving it, a hard link, a device, a FIFO).
var ErrBadSeed = errors.New("bad workspace seed")

// UnpackWorkspace writes a seed archive, a tar stream (gzip-compressed or
// not) as PackWorkspace makes it, into the empty directory dir: what the
// tool runner does with a session's seed, and what an exporter does to
// rebuild a workspace. The archive is a tenant's: treat it as hostile. It writes
// directories, regular files (permission bits only, no set-user-ID, and
// always readable and writable by the runner, which commits them) and
// symbolic links, skips .git, and refuses anything else. Every write goes
// through an os.Root on dir, so no entry — whatever its name, or the links
// earlier entries made — lands outside dir.
func UnpackWorkspace(archive []byte, dir string) error {
	var r io.Reader = bytes.NewReader(archive)
	if len(archive) >= 2 && archive[0] == 0x1f && archive[1] == 0x8b {
		z, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadSeed, err)
		}
		defer z.Close()
		r = z
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: entry %d: %v", ErrBadSeed, n+1, err)
		}
		if n >= MaxSeedEntries {
			return fmt.Errorf("%w: more than %d entries", ErrBadSeed, MaxSeedEntries)
		}
		name, skip, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if skip {
			continue
		}
		perm := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, perm|0o700)
		case tar.TypeReg:
			if total += h.Size; total > MaxSeedBytes {
				return fmt.Errorf("%w: more than %d bytes of files", ErrBadSeed, MaxSeedBytes)
			}
			err = unpackFile(root, name, perm|0o600, tr, h.Size)
		case tar.TypeSymlink:
			err = mkParent(root, name)
			if err == nil {
				err = root.Symlink(h.Linkname, name)
			}
		default:
			return fmt.Errorf("%w: %s: a workspace holds directories, files and symbolic links, not %s", ErrBadSeed, h.Name, typeName(h.Typeflag))
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadSeed, h.Name, err)
		}
	}
}

// entryName is the clean relative name of an archive entry; skip is set for
// entries under .git (a workspace has its own history).
func entryName(raw string) (name string, skip bool, err error) {
	name = path.Clean(strings.TrimPrefix(raw, "./"))
	if path.IsAbs(raw) || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(raw, 0) {
		return "", false, fmt.Errorf("%w: entry %q names a path outside the workspace", ErrBadSeed, raw)
	}
	if name == "." {
		return "", true, nil
	}
	for part := range strings.SplitSeq(name, "/") {
		if strings.EqualFold(part, ".git") {
			return "", true, nil
		}
	}
	return name, false, nil
}

func mkParent(root *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		return root.MkdirAll(dir, 0o755)
	}
	return nil
}

// unpackFile creates name, which must not exist, with exactly size bytes.
func unpackFile(root *os.Root, name string, perm fs.FileMode, r io.Reader, size int64) (err error) {
	if err := mkParent(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.CopyN(f, r, size); err != nil {
		return err
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "a hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "a device"
	case tar.TypeFifo:
		return "a FIFO"
	}
	return fmt.Sprintf("entry type %q", t)
}
