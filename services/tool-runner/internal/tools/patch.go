package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

const applyPatchDescription = "Apply a unified diff to the workspace with git apply. Paths are relative to the workspace root with a/ and b/ prefixes, as git diff writes them; creating, deleting and renaming files is supported. The patch applies completely or not at all."

const applyPatchSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["patch"],
  "properties": {
    "patch": {"type": "string", "minLength": 1, "description": "The unified diff, for example:\n--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n-var x = 1\n+var x = 2\n"}
  }
}`

type applyPatchArgs struct {
	Patch string `json:"patch"`
}

func applyPatch(ctx context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[applyPatchArgs](ApplyPatch, raw)
	if err != nil {
		return Output{}, err
	}
	paths, check, err := patchPaths(args.Patch)
	if err != nil {
		return Output{}, &ArgError{Tool: ApplyPatch, Field: "patch", Reason: err.Error()}
	}
	// git apply refuses most of these itself (absolute paths, "..", .git,
	// writing beyond a symbolic link); checking each path against the
	// workspace first makes the refusal certain and typed.
	for _, p := range check {
		if _, err := ws.Resolve(p); errors.Is(err, sandbox.ErrEscape) {
			return Output{}, fmt.Errorf("%s: argument patch: %w", ApplyPatch, err)
		}
	}
	if !strings.HasSuffix(args.Patch, "\n") {
		args.Patch += "\n" // a patch cut after its last line is still meant whole
	}
	res, err := ws.Run(ctx, sandbox.Cmd{
		Args:  []string{"git", "apply", "--whitespace=nowarn", "-"},
		Stdin: strings.NewReader(args.Patch),
	})
	if err != nil {
		return Output{}, fmt.Errorf("%s: %w", ApplyPatch, err)
	}
	out := Output{
		ExitCode:  res.ExitCode,
		Stdout:    res.Stdout,
		Stderr:    res.Stderr,
		Truncated: res.Truncated,
		Duration:  res.Duration,
		Limits:    res.Limits,
	}
	if res.ExitCode != 0 {
		out.Result = fmt.Sprintf("the patch does not apply; nothing was changed (git apply exit code %d):\n%s", res.ExitCode, strings.TrimSpace(res.Stderr))
		return out, nil
	}
	out.Result = fmt.Sprintf("patched %d file(s): %s", len(paths), strings.Join(paths, ", "))
	return out, nil
}

var hunkHeader = regexp.MustCompile(`^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@`)

// patchPaths reads the paths a patch names, relative to the workspace (the
// a/ or b/ prefix removed, as git apply -p1 does). files are the files it
// changes, sorted, for the result; check adds every reading of ambiguous
// headers, for the escape check. Hunk lines are skipped by their counts, so
// a removed line that reads "-- x" is not taken for a file header.
func patchPaths(patch string) (files, check []string, err error) {
	add := func(raw string, strip, file bool) error {
		p, err := headerPath(raw)
		if err != nil || p == "/dev/null" {
			return err
		}
		if path.IsAbs(p) {
			// git apply -p1 would read /etc/x as etc/x; the intent is plain.
			check = append(check, p)
			return nil
		}
		if strip {
			if _, rest, ok := strings.Cut(p, "/"); ok {
				p = rest
			}
		}
		check = append(check, p)
		if file {
			files = append(files, p)
		}
		return nil
	}
	oldLeft, newLeft := 0, 0
	sawHeader := false
	for line := range strings.Lines(patch) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if oldLeft > 0 || newLeft > 0 {
			inHunk := true
			switch {
			case line == "" || line[0] == ' ':
				oldLeft--
				newLeft--
			case line[0] == '-':
				oldLeft--
			case line[0] == '+':
				newLeft--
			case line[0] == '\\': // "\ No newline at end of file"
			default:
				// A short hunk: git apply will say so; read on as headers.
				oldLeft, newLeft, inHunk = 0, 0, false
			}
			if inHunk {
				continue
			}
		}
		var err error
		switch {
		case strings.HasPrefix(line, "@@ "):
			m := hunkHeader.FindStringSubmatch(line)
			if m == nil {
				return nil, nil, fmt.Errorf("bad hunk header %q", line)
			}
			oldLeft, newLeft = count(m[1]), count(m[2])
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "):
			sawHeader = true
			err = add(line[4:], true, true)
		case strings.HasPrefix(line, "diff --git "):
			sawHeader = true
			names, same := gitHeaderPaths(line[len("diff --git "):])
			for _, p := range names {
				if err = add(p, true, same); err != nil {
					break
				}
			}
		case strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "copy from "):
			_, p, _ := strings.Cut(line, " from ")
			err = add(p, false, true)
		case strings.HasPrefix(line, "rename to "), strings.HasPrefix(line, "copy to "):
			_, p, _ := strings.Cut(line, " to ")
			err = add(p, false, true)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if !sawHeader {
		return nil, nil, errors.New("no file headers (--- a/path and +++ b/path, or diff --git)")
	}
	slices.Sort(files)
	return slices.Compact(files), check, nil
}

// count is a hunk's line count; absent means 1.
func count(s string) int {
	if s == "" {
		return 1
	}
	n, _ := strconv.Atoi(s)
	return n
}

// headerPath reads the path of a ---/+++ line: quoted C-style if it has
// special characters, and followed by a tab and a timestamp in diff -u's
// output.
func headerPath(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		if end := closingQuote(s); end > 0 {
			if p, err := strconv.Unquote(s[:end+1]); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("bad quoted path %s", s)
	}
	p, _, _ := strings.Cut(s, "\t")
	return strings.TrimRight(p, " "), nil
}

// closingQuote returns the index of the quote ending a quoted string that
// starts at s[0], or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// gitHeaderPaths returns the candidate paths of a "diff --git a/x b/y"
// line, and whether they are certain. Unquoted names with spaces make the
// split ambiguous unless both halves name the same file, so otherwise every
// reading is returned, for checking: over-refusing an odd name is
// acceptable, missing an escape is not.
func gitHeaderPaths(s string) (names []string, certain bool) {
	if strings.HasPrefix(s, `"`) {
		end := closingQuote(s)
		if end < 0 {
			return []string{s}, false
		}
		return []string{s[:end+1], strings.TrimSpace(s[end+1:])}, true
	}
	if n := (len(s) - 1) / 2; len(s)%2 == 1 && s[n] == ' ' && len(s) > 4 && s[2:n] == s[n+3:] {
		return []string{s[:n], s[n+1:]}, true
	}
	for i := range len(s) {
		if s[i] == ' ' {
			names = append(names, s[:i], s[i+1:])
		}
	}
	if names == nil {
		names = []string{s}
	}
	return names, false
}
