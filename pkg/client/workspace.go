package client

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// LabelWorkspace names, in a session's start labels, the blob reference of
// its workspace seed (see PutWorkspace); LabelWorkspaceFrom names the
// directory the client packed it from, for people reading the log. The
// tool runner reads the seed from the blob store only: no server path a
// session names is ever read (ADR 0031).
const (
	LabelWorkspace     = "workspace"
	LabelWorkspaceFrom = "workspace_from"
)

// PackWorkspace packs the directory dir as a workspace seed: a
// gzip-compressed tar of its directories, regular files and symbolic links
// (as links, whatever they point at), without any .git and without other
// file types (sockets, FIFOs, devices). Owners and times are left out, so
// the same tree packs to the same bytes, and so to the same blob.
func PackWorkspace(dir string) ([]byte, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace seed: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("workspace seed %s: not a directory", dir)
	}
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	w := tar.NewWriter(z)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if strings.EqualFold(d.Name(), ".git") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch mode := info.Mode(); {
		case mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case mode&fs.ModeSymlink != 0:
			if h.Linkname, err = os.Readlink(path); err != nil {
				return err
			}
			h.Typeflag = tar.TypeSymlink
		case mode.IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			return nil
		}
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		return copyFileTo(w, path, h.Size)
	})
	if err == nil {
		err = errors.Join(w.Close(), z.Close())
	}
	if err != nil {
		return nil, fmt.Errorf("pack workspace seed %s: %w", dir, err)
	}
	return buf.Bytes(), nil
}

// copyFileTo writes exactly size bytes of the file at path: a file that
// changed size while it was packed fails the pack instead of corrupting it.
func copyFileTo(w io.Writer, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(w, f, size); err != nil {
		return fmt.Errorf("%s changed while it was packed: %w", path, err)
	}
	return nil
}

// PutWorkspace packs dir (PackWorkspace) and stores it as a blob; the
// reference, as the label LabelWorkspace of a session's start, seeds the
// session's workspace. The packed seed must fit in one message of the
// deployment (max_payload: 8 MiB on rath up).
func (c *Client) PutWorkspace(ctx context.Context, dir string) (string, error) {
	archive, err := PackWorkspace(dir)
	if err != nil {
		return "", err
	}
	ref, err := c.PutBlob(ctx, archive)
	if err != nil {
		return "", fmt.Errorf("workspace seed %s (%d bytes packed): %w", dir, len(archive), err)
	}
	return ref, nil
}

// SeedWorkspace packs dir and stores it (PutWorkspace), and labels the
// session start data with its reference and, for people, the directory as
// given.
func (c *Client) SeedWorkspace(ctx context.Context, dir string, data *events.SessionStarted) error {
	ref, err := c.PutWorkspace(ctx, dir)
	if err != nil {
		return err
	}
	if data.Labels == nil {
		data.Labels = map[string]string{}
	}
	data.Labels[LabelWorkspace] = ref
	data.Labels[LabelWorkspaceFrom] = dir
	return nil
}
