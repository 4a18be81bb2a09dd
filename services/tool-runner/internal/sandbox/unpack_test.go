package sandbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/client"
)

// A directory packed by the client unpacks to the same tree: files with
// their permission bits, directories, symbolic links as links; .git left
// out.
func TestUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	for name, body := range map[string]string{"go.mod": "module m\n", "a/b/c.go": "package b\n", ".git/config": "[core]\n", "a/.git": "gitdir: x\n"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/b/c.go", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	archive, err := client.PackWorkspace(src)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.PackWorkspace(src)
	if err != nil || !bytes.Equal(archive, again) {
		t.Fatalf("the same tree packs to different bytes (%v)", err)
	}
	dst := t.TempDir()
	if err := unpack(archive, dst); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, dst); !slices.Equal(got, []string{"a/", "a/b/", "a/b/c.go", "go.mod", "link -> a/b/c.go", "run.sh"}) {
		t.Fatalf("unpacked %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a/b/c.go")); err != nil || string(b) != "package b\n" {
		t.Errorf("a/b/c.go = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode %v, %v; want 0755", fi.Mode(), err)
	}
}

// entry is one header (and body) of a hand-made archive.
type entry struct {
	h    tar.Header
	body string
}

func archiveOf(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var zw *gzip.Writer
	var w *tar.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	} else {
		w = tar.NewWriter(&buf)
	}
	for _, e := range entries {
		h := e.h
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := w.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func file(name, body string) entry {
	return entry{h: tar.Header{Name: name, Typeflag: tar.TypeReg}, body: body}
}

func link(name, target string) entry {
	return entry{h: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}}
}

// A hostile tenant's archive writes nothing outside the workspace, whatever
// its entries name or link, and gets an error naming the entry; a
// workspace holds only directories, files and links.
func TestUnpackRefusesHostileArchives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"parent", []entry{file("../escaped", "x")}, "outside the workspace"},
		{"deep parent", []entry{file("a/../../escaped", "x")}, "outside the workspace"},
		{"absolute", []entry{file("/tmp/escaped", "x")}, "outside the workspace"},
		{"through an absolute link", []entry{link("l", "/tmp"), file("l/escaped", "x")}, "l/escaped"},
		{"through a relative link", []entry{link("up", ".."), file("up/escaped", "x")}, "up/escaped"},
		{"through a link to a link", []entry{link("a", "b"), link("b", "../.."), file("a/escaped", "x")}, "a/escaped"},
		{"a file over a link", []entry{link("f", "../escaped"), file("f", "x")}, "f"},
		{"the same file twice", []entry{file("f", "one"), file("f", "two")}, "f"},
		{"hard link", []entry{file("f", "x"), {h: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "f"}}}, "not a hard link"},
		{"hard link out", []entry{{h: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}}, "not a hard link"},
		{"device", []entry{{h: tar.Header{Name: "d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}}, "not a device"},
		{"fifo", []entry{{h: tar.Header{Name: "p", Typeflag: tar.TypeFifo}}}, "not a FIFO"},
		{"bytes over the limit", []entry{{h: tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: MaxSeedBytes + 1}}}, "more than"},
	} {
		for _, gz := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				parent := t.TempDir()
				dir := filepath.Join(parent, "ws")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				var archive []byte
				if tc.name == "bytes over the limit" {
					// A header alone: the limit holds before a byte is read.
					archive = headerOnly(t, tc.entries[0].h)
				} else {
					archive = archiveOf(t, gz, tc.entries...)
				}
				err := unpack(archive, dir)
				if !errors.Is(err, ErrBadSeed) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("unpack = %v, want %v naming %q", err, ErrBadSeed, tc.want)
				}
				if got := tree(t, parent); slices.ContainsFunc(got, func(p string) bool { return !strings.HasPrefix(p, "ws/") && p != "ws/" }) {
					t.Fatalf("written outside the workspace: %q", got)
				}
				if _, err := os.Lstat("/tmp/escaped"); err == nil {
					t.Fatal("/tmp/escaped written")
				}
			})
		}
	}
}

// headerOnly is a tar stream of one header and no body: what a bomb
// declares before the bytes it never sends.
func headerOnly(t *testing.T, h tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	if err := w.WriteHeader(&h); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes() // not closed: the body is missing
}

// Set-user-ID, set-group-ID and sticky bits are dropped; a file is always
// readable and writable by the runner, which commits it.
func TestUnpackKeepsPermissionBitsOnly(t *testing.T) {
	dir := t.TempDir()
	archive := archiveOf(t, true,
		entry{h: tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755 | 0o2000 | 0o1000}, body: "x"},
		entry{h: tar.Header{Name: "locked", Typeflag: tar.TypeReg, Mode: 0o000 | 0o4000}, body: "y"})
	if err := unpack(archive, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"suid": 0o755, "locked": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
}

// More entries than MaxSeedEntries are refused, skipped ones (under .git)
// counted too; garbage is refused, not unpacked in part as if whole.
func TestUnpackLimitsAndGarbage(t *testing.T) {
	entries := make([]entry, MaxSeedEntries+1)
	for i := range entries {
		entries[i] = entry{h: tar.Header{Name: ".git/d", Typeflag: tar.TypeDir, Mode: 0o755}}
	}
	if err := unpack(archiveOf(t, true, entries...), t.TempDir()); !errors.Is(err, ErrBadSeed) || !strings.Contains(err.Error(), "entries") {
		t.Errorf("%d entries: %v", len(entries), err)
	}
	for name, archive := range map[string][]byte{
		"gzip header only": {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff},
		"not a tar":        bytes.Repeat([]byte("not a tar stream "), 64),
		"truncated":        archiveOf(t, false, file("f", strings.Repeat("x", 4096)))[:1024],
	} {
		if err := unpack(archive, t.TempDir()); !errors.Is(err, ErrBadSeed) {
			t.Errorf("%s: %v, want %v", name, err, ErrBadSeed)
		}
	}
}

// tree lists dir's entries, slash-separated and sorted, directories with a
// trailing slash and links with their targets.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			rel += "/"
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			rel += " -> " + target
		}
		got = append(got, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}
