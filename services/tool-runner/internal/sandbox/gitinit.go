package sandbox

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ADR 0022, amended. Placing a workspace used to run `git init`, `git add
// --all` and `git commit` (and the `git maintenance` commit starts): four
// processes of ~10–20 ms of CPU each on this kind of machine, half of a
// short scripted session's CPU. writeRepo writes what those commands write
// for a plain tree: loose objects, the index, HEAD and the branch, in the
// formats git documents (gitformat-index(5), gitformat-loose(5)). A seed git
// would read differently (a .gitignore, .gitattributes or .gitmodules
// anywhere) is still committed by git itself; tests check the result
// against git's own (fsck, status, the tree's hash).

// gitSpecial are the files that change what `git add --all` stages; a tree
// holding one (or a .git) is committed by git.
var gitSpecial = []string{".gitignore", ".gitattributes", ".gitmodules"}

// errNeedsGit says a tree holds something writeRepo leaves to git.
var errNeedsGit = errors.New("the tree needs git itself")

// gitEntry is one file or link of the tree, as the index records it.
type gitEntry struct {
	path string // slash-separated, relative to the workspace
	mode uint32 // 0o100644, 0o100755 or 0o120000
	hash [sha1.Size]byte
	st   syscall.Stat_t
}

// writeRepo makes dir, a tree without .git, a repository on branch whose
// one commit (message, by the backend's identity, at now) holds every file
// and symbolic link under it, as `git init && git add --all && git commit`
// would. It returns errNeedsGit, having written nothing, for a tree it
// leaves to git.
func writeRepo(dir, branch, message string, now time.Time) (commit string, err error) {
	if strings.ContainsAny(message, "\n\x00") {
		return "", errNeedsGit // git would clean the message up
	}
	var entries []gitEntry
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if slices.ContainsFunc(gitSpecial, func(n string) bool { return strings.EqualFold(d.Name(), n) }) ||
			strings.EqualFold(d.Name(), ".git") {
			return errNeedsGit
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var mode uint32
		switch m := info.Mode(); {
		case m.IsRegular() && m&0o100 != 0:
			mode = 0o100755
		case m.IsRegular():
			mode = 0o100644
		case m&fs.ModeSymlink != 0:
			mode = 0o120000
		default:
			return nil // directories are walked; git tracks nothing else
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no inode metadata")
		}
		entries = append(entries, gitEntry{path: filepath.ToSlash(rel), mode: mode, st: *st})
		return nil
	})
	if err != nil {
		return "", err
	}
	objects := filepath.Join(dir, ".git", "objects")
	for _, d := range []string{"info", "pack"} {
		if err := os.MkdirAll(filepath.Join(objects, d), 0o755); err != nil {
			return "", err
		}
	}
	for i := range entries {
		e := &entries[i]
		var body []byte
		if e.mode == 0o120000 {
			target, err := os.Readlink(filepath.Join(dir, e.path))
			if err != nil {
				return "", err
			}
			body = []byte(target)
		} else if body, err = os.ReadFile(filepath.Join(dir, e.path)); err != nil {
			return "", err
		}
		if e.hash, err = writeObject(objects, "blob", body); err != nil {
			return "", err
		}
	}
	// The index sorts by path, bytewise; WalkDir's lexical order is not
	// quite that ("a/b" walks before "a.c").
	slices.SortFunc(entries, func(a, b gitEntry) int { return strings.Compare(a.path, b.path) })
	tree, err := writeTree(objects, entries)
	if err != nil {
		return "", err
	}
	stamp := fmt.Sprintf("rath <rath@localhost> %d +0000", now.Unix())
	body := fmt.Sprintf("tree %x\nauthor %s\ncommitter %s\n\n%s\n", tree, stamp, stamp, message)
	c, err := writeObject(objects, "commit", []byte(body))
	if err != nil {
		return "", err
	}
	commit = hex.EncodeToString(c[:])
	git := filepath.Join(dir, ".git")
	if err := os.MkdirAll(filepath.Join(git, "refs", "tags"), 0o755); err != nil {
		return "", err
	}
	reflog := fmt.Sprintf("%s %s %s\tcommit (initial): %s\n", strings.Repeat("0", 40), commit, stamp, message)
	for _, f := range []struct{ name, body string }{
		{"config", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"},
		{"refs/heads/" + branch, commit + "\n"},
		{"logs/HEAD", reflog},
		{"logs/refs/heads/" + branch, reflog},
		{"index", string(encodeIndex(entries))},
		{"HEAD", "ref: refs/heads/" + branch + "\n"},
	} {
		p := filepath.Join(git, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(f.body), 0o644); err != nil {
			return "", err
		}
	}
	return commit, nil
}

// zlibWriters keeps compressors between objects: a new one allocates and
// clears about a megabyte of state, most of the CPU of writing a small
// object.
var zlibWriters = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}

// writeObject stores a loose object and returns its name.
func writeObject(objects, kind string, body []byte) ([sha1.Size]byte, error) {
	header := fmt.Sprintf("%s %d\x00", kind, len(body))
	h := sha1.New()
	io.WriteString(h, header)
	h.Write(body)
	var sum [sha1.Size]byte
	h.Sum(sum[:0])
	name := hex.EncodeToString(sum[:])
	p := filepath.Join(objects, name[:2], name[2:])
	if _, err := os.Lstat(p); err == nil {
		return sum, nil // the same content, stored already
	}
	var z bytes.Buffer
	w := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(w)
	w.Reset(&z)
	io.WriteString(w, header)
	w.Write(body)
	if err := w.Close(); err != nil {
		return sum, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return sum, err
	}
	// Objects are read-only, as git leaves them.
	return sum, os.WriteFile(p, z.Bytes(), 0o444)
}

// writeTree stores the tree objects of entries (sorted by path) and returns
// the root's name.
func writeTree(objects string, entries []gitEntry) ([sha1.Size]byte, error) {
	type item struct {
		name string
		mode uint32
		hash [sha1.Size]byte
	}
	var items []item
	for i := 0; i < len(entries); {
		name, _, isDir := strings.Cut(entries[i].path, "/")
		if !isDir {
			items = append(items, item{name, entries[i].mode, entries[i].hash})
			i++
			continue
		}
		// Every entry under the directory name, without its prefix.
		prefix := name + "/"
		var sub []gitEntry
		for i < len(entries) && strings.HasPrefix(entries[i].path, prefix) {
			e := entries[i]
			e.path = e.path[len(prefix):]
			sub = append(sub, e)
			i++
		}
		h, err := writeTree(objects, sub)
		if err != nil {
			return h, err
		}
		items = append(items, item{name, 0o40000, h})
	}
	// Git orders a tree's entries by name, a directory's name as if it
	// ended in a slash.
	key := func(it item) string {
		if it.mode == 0o40000 {
			return it.name + "/"
		}
		return it.name
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(key(a), key(b)) })
	var body bytes.Buffer
	for _, it := range items {
		fmt.Fprintf(&body, "%o %s\x00", it.mode, it.name)
		body.Write(it.hash[:])
	}
	return writeObject(objects, "tree", body.Bytes())
}

// encodeIndex is the index (version 2) of entries, sorted by path, with the
// stat data git compares to tell a file unchanged without reading it.
func encodeIndex(entries []gitEntry) []byte {
	var b bytes.Buffer
	b.WriteString("DIRC")
	put := func(v uint32) { binary.Write(&b, binary.BigEndian, v) }
	put(2)
	put(uint32(len(entries)))
	for _, e := range entries {
		start := b.Len()
		put(uint32(e.st.Ctim.Sec))
		put(uint32(e.st.Ctim.Nsec))
		put(uint32(e.st.Mtim.Sec))
		put(uint32(e.st.Mtim.Nsec))
		put(uint32(e.st.Dev))
		put(uint32(e.st.Ino))
		put(e.mode)
		put(e.st.Uid)
		put(e.st.Gid)
		put(uint32(e.st.Size))
		b.Write(e.hash[:])
		binary.Write(&b, binary.BigEndian, uint16(min(len(e.path), 0xfff)))
		b.WriteString(e.path)
		// One to eight NULs end the path and pad the entry to 8 bytes.
		pad := 8 - (b.Len()-start)%8
		b.Write(make([]byte, pad))
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}
