// Package layout writes an embedded example out as rath demo reads it: its
// YAML files (the workflow and the agents' scripts) in the directory, and
// the repository, kept as a txtar archive (Go does not embed a directory
// that holds a go.mod), unpacked under it.
package layout

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/txtar"
)

// Archive is the name of the repository's archive in an example's files.
const Archive = "repo.txtar"

// Write writes files' YAML files into dir, creating it if need be, and
// unpacks Archive into dir/repo; what names the example in errors.
func Write(files fs.FS, what, dir, repo string) error {
	if err := os.MkdirAll(filepath.Join(dir, repo), 0o755); err != nil {
		return fmt.Errorf("%s example: %w", what, err)
	}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return fmt.Errorf("%s example: %w", what, err)
	}
	for _, f := range entries {
		if f.IsDir() || !strings.HasSuffix(f.Name(), ".yaml") {
			continue
		}
		raw, err := fs.ReadFile(files, f.Name())
		if err != nil {
			return fmt.Errorf("%s example: %w", what, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), raw, 0o644); err != nil {
			return fmt.Errorf("%s example: %w", what, err)
		}
	}
	raw, err := fs.ReadFile(files, Archive)
	if err != nil {
		return fmt.Errorf("%s example: %w", what, err)
	}
	for _, f := range txtar.Parse(raw).Files {
		if !filepath.IsLocal(f.Name) {
			return fmt.Errorf("%s example: %s names %q, outside the repository", what, Archive, f.Name)
		}
		path := filepath.Join(dir, repo, f.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("%s example: %w", what, err)
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return fmt.Errorf("%s example: %w", what, err)
		}
	}
	return nil
}
