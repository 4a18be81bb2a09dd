package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

const (
	searchDefaultResults = 100
	searchMaxFileBytes   = 4 << 20
	searchMaxLineBytes   = 300
)

const searchDescription = "Search the workspace's text files for a Go regular expression (RE2 syntax), like grep -rn. Returns one match per line as path:line:text. Skips .git, binary files, symbolic links and files over 4 MiB."

const searchSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["pattern"],
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "Go regular expression (RE2), matched against each line; (?i) makes it case-insensitive."},
    "path": {"type": ["string", "null"], "description": "File or directory to search, relative to the workspace root. Default: the root."},
    "max_results": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000, "description": "Stop after this many matches. Default 100."}
  }
}`

type searchArgs struct {
	Pattern    string  `json:"pattern"`
	Path       *string `json:"path"`
	MaxResults *int    `json:"max_results"`
}

func search(ctx context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[searchArgs](Search, raw)
	if err != nil {
		return Output{}, err
	}
	re, err := regexp.Compile(args.Pattern)
	if err != nil {
		return Output{}, &ArgError{Tool: Search, Field: "pattern", Reason: err.Error()}
	}
	p := "."
	if args.Path != nil && *args.Path != "" {
		p = *args.Path
	}
	limit := searchDefaultResults
	if args.MaxResults != nil {
		limit = *args.MaxResults
	}
	root, rel, err := openRoot(Search, "path", ws, p)
	if err != nil {
		return Output{}, err
	}
	defer root.Close()
	fsys := root.FS()
	if _, err := fs.Stat(fsys, rel); err != nil {
		return Output{}, failf("search %s: %s", p, describe(err))
	}

	var matches []string
	truncated := false
	err = fs.WalkDir(fsys, rel, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == rel {
				return err
			}
			return nil // unreadable: skipped, as grep -s would
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			if strings.EqualFold(d.Name(), ".git") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if searchFile(fsys, name, re, limit, &matches) {
			truncated = true
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return Output{}, fmt.Errorf("search: %w", ctx.Err())
		}
		return Output{}, failf("search %s: %s", p, describe(err))
	}
	out := Output{Result: strings.Join(matches, "\n"), Truncated: truncated}
	switch {
	case truncated:
		out.Result += fmt.Sprintf("\n[stopped after %d matches; narrow the pattern or the path]", limit)
	case len(matches) == 0:
		out.Result = "[no matches]"
	}
	return out, nil
}

// searchFile appends name's matching lines to matches. It reports done when
// a match beyond limit was found, so the caller knows there is more.
// Unreadable files are skipped, as grep -s would.
func searchFile(fsys fs.FS, name string, re *regexp.Regexp, limit int, matches *[]string) (done bool) {
	f, err := fsys.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() > searchMaxFileBytes {
		return false
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return false // the end, or an unreadable file: skipped
		}
		line = bytes.TrimRight(line, "\r\n")
		if re.Match(line) {
			if len(*matches) == limit {
				return true
			}
			if len(line) > searchMaxLineBytes {
				line = append(line[:searchMaxLineBytes:searchMaxLineBytes], "…"...)
			}
			*matches = append(*matches, fmt.Sprintf("%s:%d:%s", name, n, line))
		}
		if err != nil {
			return false
		}
	}
}
