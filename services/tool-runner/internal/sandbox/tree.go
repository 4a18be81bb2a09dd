package sandbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ADR 0022. A tool call used to cost five git processes whether or not it changed a
// file (rev-parse before; add, diff --cached, rev-parse after; each ~5–20 ms
// of CPU on two cores, most of a scripted session's CPU). Most calls change
// nothing (read_file, list_files, a test run), so the workspace now reads
// its HEAD from .git itself and tells "nothing changed" from a fingerprint
// of the tree's metadata; git runs only when something did.

// fingerprint digests the metadata of every entry under dir but the
// repository itself (.git at the top): path, type and permission bits, size,
// inode, modification and change times. Any write to a file changes its
// ctime, which no unprivileged process can set back, so a tree whose
// fingerprint is unchanged holds the same content. A change git ignores
// (.gitignore) changes the fingerprint too; Commit then asks git, which
// finds nothing to commit.
//
// The kernel stamps files from a coarse clock (a few milliseconds): two
// writes within one tick may leave the same times. So, as git does with its
// "racy" index entries, an entry changed within racyWindow of the walk is
// read by content too, and so is every entry named in byContent (the racy
// entries of the walk this one is compared with: a write within the same
// tick as that walk left their times as they were). A later write to any
// other entry moves its times past the walk's, so metadata tells. The
// entries read by content are returned for the next walk; the fingerprint
// says which they were, so two walks that read different sets differ.
//
// A tree whose racy entries hold more than racyBytes gets no fingerprint
// ("", nil, nil): the caller asks git, which reads them anyway.
func fingerprint(dir string, byContent map[string]bool) (sum string, racy map[string]bool, err error) {
	cutoff := clock().Add(-racyWindow)
	h := sha256.New()
	var buf [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	read := int64(0)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no inode metadata")
		}
		h.Write([]byte(rel))
		h.Write([]byte{0})
		put(uint64(info.Mode()))
		put(uint64(info.Size()))
		put(st.Ino)
		put(uint64(st.Mtim.Sec))
		put(uint64(st.Mtim.Nsec))
		put(uint64(st.Ctim.Sec))
		put(uint64(st.Ctim.Nsec))
		recent := time.Unix(st.Ctim.Unix()).After(cutoff) || time.Unix(st.Mtim.Unix()).After(cutoff)
		if info.IsDir() || !(recent || byContent[rel]) {
			// A directory's content is its entries, each walked.
			return nil
		}
		if read += info.Size(); read > racyBytes {
			return errTooRacy
		}
		if racy == nil {
			racy = make(map[string]bool)
		}
		racy[rel] = true
		h.Write([]byte{1}) // read by content
		return hashContent(h, path, info)
	})
	if errors.Is(err, errTooRacy) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), racy, nil
}

// hashContent writes what a file or symbolic link holds into h.
func hashContent(h io.Writer, path string, info fs.FileInfo) error {
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		_, err = io.WriteString(h, target)
		return err
	case info.Mode().IsRegular():
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(h, io.LimitReader(f, racyBytes+1))
		return err
	default:
		// A fifo, socket or device: git tracks none of them, and reading
		// one could block.
		return nil
	}
}

// racyBytes bounds what a walk reads by content.
const racyBytes = 4 << 20

var errTooRacy = errors.New("too many recent changes to read")

// clock is the wall clock the racy check compares file times with (tests
// move it).
var clock = time.Now

// racyWindow is how recent a change makes a tree's fingerprint unusable:
// well above the kernel's timestamp granularity.
const racyWindow = 50 * time.Millisecond

// readHead reads the commit HEAD names from the repository's files: a
// detached HEAD's hash, or the branch's loose ref. ok is false when it
// cannot tell (a packed ref, anything unexpected): ask git.
func readHead(gitDir string) (commit string, ok bool) {
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return "", false
	}
	head := strings.TrimSpace(string(b))
	if ref, isRef := strings.CutPrefix(head, "ref: "); isRef {
		if !strings.HasPrefix(ref, "refs/heads/") || strings.Contains(ref, "..") {
			return "", false
		}
		if b, err = os.ReadFile(filepath.Join(gitDir, filepath.FromSlash(ref))); err != nil {
			return "", false
		}
		head = strings.TrimSpace(string(b))
	}
	if checkCommit(head) != nil || (len(head) != 40 && len(head) != 64) {
		return "", false
	}
	return head, true
}
