package dossier

import (
	"slices"
	"strings"
)

// DiffFiles lists the files a unified diff (git's format, or plain) changes,
// in the order it names them: both sides of a rename, neither /dev/null.
func DiffFiles(diff string) []string {
	var out []string
	add := func(p string) {
		p = strings.TrimSpace(p)
		if i := strings.IndexByte(p, '\t'); i >= 0 {
			p = p[:i] // plain diff: "+++ name<TAB>date"
		}
		if p == "" || p == "/dev/null" {
			return
		}
		if rest, ok := strings.CutPrefix(p, "a/"); ok {
			p = rest
		} else if rest, ok := strings.CutPrefix(p, "b/"); ok {
			p = rest
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for line := range strings.Lines(diff) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "diff --git "):
			a, b, ok := splitGitHeader(strings.TrimPrefix(line, "diff --git "))
			if ok {
				add(a)
				add(b)
			}
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "):
			add(line[4:])
		case strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "rename to "):
			_, p, _ := strings.Cut(line[7:], " ")
			add(p)
		}
	}
	return out
}

// splitGitHeader splits "a/x b/x" (paths without spaces, or equal halves).
func splitGitHeader(s string) (string, string, bool) {
	if n := len(s); n%2 == 1 {
		if a, b := s[:n/2], s[n/2+1:]; strings.TrimPrefix(a, "a/") == strings.TrimPrefix(b, "b/") {
			return a, b, true
		}
	}
	i := strings.Index(s, " b/")
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// MatchFile reports whether path (as a diff names it) is the file the
// question names: the same path, or path ends with "/"+file.
func MatchFile(path, file string) bool {
	file = strings.TrimPrefix(strings.TrimSpace(file), "./")
	return file != "" && (path == file || strings.HasSuffix(path, "/"+file))
}

// FileDiff is the part of a diff that changes file: its "diff --git"
// section (or, for a plain diff, its "---" section); "" when none does.
func FileDiff(diff, file string) string {
	var sections []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			sections = append(sections, cur.String())
			cur.Reset()
		}
	}
	git := strings.Contains(diff, "diff --git ")
	for line := range strings.Lines(diff) {
		if git && strings.HasPrefix(line, "diff --git ") || !git && strings.HasPrefix(line, "--- ") {
			flush()
		}
		cur.WriteString(line)
	}
	flush()
	for _, s := range sections {
		if slices.ContainsFunc(DiffFiles(s), func(p string) bool { return MatchFile(p, file) }) {
			return s
		}
	}
	return ""
}
