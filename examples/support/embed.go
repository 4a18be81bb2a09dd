// Package support is the example rath demo support runs, embedded so that
// the rath binary runs it from any directory: the workflow (a simulated
// customer and a support assistant), the shop's workspace (its written
// policy and its database at the start) and the tasks, each with the
// customer's instruction, both agents' scripts and the database the run
// must end with.
package support

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed *.yaml workspace tasks
var files embed.FS

// Workspace is the directory, under the example's, that seeds each
// session's workspace.
const Workspace = "workspace"

// Write writes the example into dir, creating it if need be, laid out as
// in the repository.
func Write(dir string) error {
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		raw, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, raw, 0o644)
	})
	if err != nil {
		return fmt.Errorf("support example: %w", err)
	}
	return nil
}
