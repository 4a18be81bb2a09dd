package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

const (
	readDefaultLines = 2000
	readMaxBytes     = 256 << 10
	writeMaxBytes    = 8 << 20
	listMaxEntries   = 2000
	sniffBytes       = 8000 // as git and grep: a NUL in the first 8000 bytes means binary
)

const readFileDescription = "Read a text file of the workspace. Returns the lines from offset (1-based) on, at most limit lines and 256 KiB; a note at the end says how to read on when there is more."

const readFileSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path relative to the workspace root."},
    "offset": {"type": ["integer", "null"], "minimum": 1, "description": "First line to return, counting from 1. Default 1."},
    "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 100000, "description": "Maximum number of lines to return. Default 2000."}
  }
}`

type readFileArgs struct {
	Path   string `json:"path"`
	Offset *int   `json:"offset"`
	Limit  *int   `json:"limit"`
}

func readFile(_ context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[readFileArgs](ReadFile, raw)
	if err != nil {
		return Output{}, err
	}
	offset, limit := 1, readDefaultLines
	if args.Offset != nil {
		offset = *args.Offset
	}
	if args.Limit != nil {
		limit = *args.Limit
	}
	root, rel, err := openRoot(ReadFile, "path", ws, args.Path)
	if err != nil {
		return Output{}, err
	}
	defer root.Close()
	// Non-blocking: opening a FIFO a command left would otherwise wait for
	// a writer forever. A regular file reads the same either way.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Output{}, failf("read_file %s: %s", args.Path, describe(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Output{}, failf("read_file %s: %s", args.Path, describe(err))
	}
	if !fi.Mode().IsRegular() {
		return Output{}, failf("read_file %s: not a regular file (%s); use list_files for directories", args.Path, fi.Mode().Type())
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return Output{}, failf("read_file %s: binary file (%d bytes)", args.Path, fi.Size())
	}

	// Lines are read one at a time and at most readMaxBytes are kept, so a
	// huge file (or a huge line) costs memory in proportion to the answer,
	// not to the file.
	var b strings.Builder
	line, shown := 0, 0
	truncated, cut := false, false
	for {
		room := 0
		if line+1 >= offset {
			room = readMaxBytes - b.Len()
		}
		text, n, err := nextLine(br, room)
		if n > 0 {
			line++
			if line >= offset {
				if shown == limit {
					truncated = true
					break
				}
				if n > len(text) {
					// The line does not fit: stop before it, unless it is
					// the first, which is shown cut rather than not at all.
					truncated = true
					if shown == 0 {
						b.Write(text)
						shown, cut = 1, true
					}
					break
				}
				b.Write(text)
				shown++
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Output{}, failf("read_file %s: %s", args.Path, describe(err))
		}
	}
	out := Output{Result: b.String(), Truncated: truncated}
	switch {
	case cut:
		out.Result += fmt.Sprintf("\n[line %d is longer than %d bytes and was cut; read on with offset=%d]", offset, readMaxBytes, offset+1)
	case truncated:
		out.Result += fmt.Sprintf("\n[showing lines %d-%d; the file goes on: read on with offset=%d]", offset, offset+shown-1, offset+shown)
	case shown == 0 && line > 0:
		out.Result = fmt.Sprintf("[the file has %d lines; offset %d is past the end]", line, offset)
	case line == 0:
		out.Result = "[empty file]"
	}
	return out, nil
}

// nextLine reads one line, newline included, keeping at most keep bytes of
// it; n is the line's full length.
func nextLine(br *bufio.Reader, keep int) (kept []byte, n int, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if room := keep - len(kept); room > 0 {
			kept = append(kept, chunk[:min(room, len(chunk))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return kept, n, err
		}
	}
}

const writeFileDescription = "Write a file of the workspace, replacing it if it exists and creating missing parent directories."

const writeFileSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["path", "content"],
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path relative to the workspace root."},
    "content": {"type": "string", "description": "The complete new content of the file."}
  }
}`

type writeFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func writeFile(_ context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[writeFileArgs](WriteFile, raw)
	if err != nil {
		return Output{}, err
	}
	if len(args.Content) > writeMaxBytes {
		return Output{}, &ArgError{Tool: WriteFile, Field: "content", Reason: fmt.Sprintf("is %d bytes, more than the %d allowed", len(args.Content), writeMaxBytes)}
	}
	root, rel, err := openRoot(WriteFile, "path", ws, args.Path)
	if err != nil {
		return Output{}, err
	}
	defer root.Close()
	if dir := path.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return Output{}, failf("write_file %s: %s", args.Path, describe(err))
		}
	}
	// An existing file keeps its mode (an executable script stays
	// executable). Non-blocking, and regular files only: a FIFO a command
	// left would otherwise block the open, or the write, forever.
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) { // a FIFO with no reader
		return Output{}, failf("write_file %s: not a regular file", args.Path)
	}
	if err != nil {
		return Output{}, failf("write_file %s: %s", args.Path, describe(err))
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Output{}, failf("write_file %s: not a regular file", args.Path)
	}
	if err := f.Truncate(0); err != nil {
		return Output{}, failf("write_file %s: %s", args.Path, describe(err))
	}
	if _, err := f.Write([]byte(args.Content)); err != nil {
		return Output{}, failf("write_file %s: %s", args.Path, describe(err))
	}
	if err := f.Close(); err != nil {
		return Output{}, failf("write_file %s: %s", args.Path, describe(err))
	}
	return Output{Result: fmt.Sprintf("wrote %d bytes to %s", len(args.Content), rel)}, nil
}

const listFilesDescription = "List a directory of the workspace: one path per line, relative to the workspace root, directories ending in /, symbolic links as path -> target. .git is not listed."

const listFilesSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": {"type": ["string", "null"], "description": "Directory relative to the workspace root. Default: the root."},
    "recursive": {"type": ["boolean", "null"], "description": "List the whole tree below path, not only its entries. Default false."}
  }
}`

type listFilesArgs struct {
	Path      *string `json:"path"`
	Recursive *bool   `json:"recursive"`
}

func listFiles(_ context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[listFilesArgs](ListFiles, raw)
	if err != nil {
		return Output{}, err
	}
	p := "."
	if args.Path != nil && *args.Path != "" {
		p = *args.Path
	}
	recursive := args.Recursive != nil && *args.Recursive
	root, rel, err := openRoot(ListFiles, "path", ws, p)
	if err != nil {
		return Output{}, err
	}
	defer root.Close()
	fsys := root.FS()
	fi, err := fs.Stat(fsys, rel)
	if err != nil {
		return Output{}, failf("list_files %s: %s", p, describe(err))
	}
	if !fi.IsDir() {
		return Output{Result: rel}, nil
	}

	var lines []string
	truncated := false
	err = fs.WalkDir(fsys, rel, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			// An unreadable directory is listed, not fatal.
			if d != nil && name != rel {
				return fs.SkipDir
			}
			return err
		}
		if name == rel {
			return nil
		}
		if d.IsDir() && strings.EqualFold(d.Name(), ".git") {
			return fs.SkipDir
		}
		if len(lines) == listMaxEntries {
			truncated = true
			return fs.SkipAll
		}
		switch {
		case d.IsDir():
			lines = append(lines, name+"/")
			if !recursive {
				return fs.SkipDir
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := root.Readlink(name)
			lines = append(lines, name+" -> "+target)
		default:
			lines = append(lines, name)
		}
		return nil
	})
	if err != nil {
		return Output{}, failf("list_files %s: %s", p, describe(err))
	}
	out := Output{Result: strings.Join(lines, "\n"), Truncated: truncated}
	switch {
	case truncated:
		out.Result += fmt.Sprintf("\n[stopped after %d entries; list a subdirectory]", listMaxEntries)
	case len(lines) == 0:
		out.Result = "[empty directory]"
	}
	return out, nil
}
