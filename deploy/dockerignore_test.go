package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerignore checks that .dockerignore keeps the big and the secret out
// of the build context and keeps in every file deploy/Dockerfile's build
// compiles or embeds (go list over the packages it builds).
func TestDockerignore(t *testing.T) {
	failAll(t, checkDockerignore(t, repoRoot))
}

// mustIgnore are paths that must never reach the build context: the
// repository's history, the root's rath binary and a deployment's secrets.
var mustIgnore = []string{".git/HEAD", "rath", "rath-creds/ledger.nk", "rath-creds/keys/ledger.key", "rath-creds/nkeys.env", ".rath/data/creds/admin.nk"}

func checkDockerignore(t *testing.T, root string) []error {
	t.Helper()
	patterns, err := readDockerignore(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, p := range mustIgnore {
		if !ignored(patterns, p) {
			errs = append(errs, fmt.Errorf(".dockerignore lets %s into the build context", p))
		}
	}
	df, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		return append(errs, err)
	}
	pkgs := regexp.MustCompile(`\./(?:cmd|services)/[a-z-]+`).FindAllString(string(df), -1)
	if len(pkgs) == 0 {
		return append(errs, fmt.Errorf("deploy/Dockerfile builds no ./cmd or ./services package"))
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", `{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`}, pkgs...)...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		return append(errs, fmt.Errorf("go list %v: %v", pkgs, err))
	}
	abs, _ := filepath.Abs(repoRoot)
	needed := []string{"go.mod", "go.sum"}
	for line := range strings.Lines(string(out)) {
		if rel, err := filepath.Rel(abs, strings.TrimSpace(line)); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	for _, f := range needed {
		if ignored(patterns, f) {
			errs = append(errs, fmt.Errorf(".dockerignore leaves out %s, which the image build needs", f))
		}
	}
	return errs
}

func readDockerignore(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("%s: exceptions (%s) are not understood by this check", file, line)
		}
		out = append(out, strings.Trim(line, "/"))
	}
	return out, s.Err()
}

// ignored applies .dockerignore's rules as Docker does for these patterns: a
// pattern matches a path or any of its parent directories, relative to the
// context's root; a leading **/ matches at any depth.
func ignored(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		anyDepth := strings.HasPrefix(p, "**/")
		p = strings.TrimPrefix(p, "**/")
		n := len(strings.Split(p, "/"))
		for end := 1; end <= len(parts); end++ {
			starts := []int{0}
			if anyDepth {
				starts = starts[:0]
				for s := 0; s+n <= end; s++ {
					starts = append(starts, s)
				}
			}
			for _, s := range starts {
				if end-s != n {
					continue
				}
				if ok, _ := filepath.Match(p, strings.Join(parts[s:end], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}
