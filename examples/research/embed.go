// Package research is the example rath demo research runs (an
// MLAgentBench-like task), embedded so that the rath binary runs it from any
// directory.
package research

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/tools/txtar"
)

// files are the workflow, the agents' scripts and the repository, as a txtar
// archive: Go does not embed a directory that holds a go.mod.
//
//go:embed *.yaml repo.txtar
var files embed.FS

// Repo is the directory, under the example's, that Write unpacks the
// repository into: the workspace label of the research demo's sessions.
const Repo = "repo"

// Write writes the example into dir, creating it if need be, as rath demo research
// reads it: workflow.yaml, the scripts it names, and the
// repository unpacked from repo.txtar into dir/repo.
func Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, Repo), 0o755); err != nil {
		return fmt.Errorf("research example: %w", err)
	}
	yamls, err := files.ReadDir(".")
	if err != nil {
		return fmt.Errorf("research example: %w", err)
	}
	for _, f := range yamls {
		if f.Name() == "repo.txtar" {
			continue
		}
		raw, err := files.ReadFile(f.Name())
		if err != nil {
			return fmt.Errorf("research example: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), raw, 0o644); err != nil {
			return fmt.Errorf("research example: %w", err)
		}
	}
	raw, err := files.ReadFile("repo.txtar")
	if err != nil {
		return fmt.Errorf("research example: %w", err)
	}
	for _, f := range txtar.Parse(raw).Files {
		if !filepath.IsLocal(f.Name) {
			return fmt.Errorf("research example: repo.txtar names %q, outside the repository", f.Name)
		}
		path := filepath.Join(dir, Repo, f.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("research example: %w", err)
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return fmt.Errorf("research example: %w", err)
		}
	}
	return nil
}
