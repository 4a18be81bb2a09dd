package demo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/openrath/rath/internal/workflow"
)

// Write lays the example out as rath demo reads it: a workflow whose
// scripts are all there, and the repository with its module file.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "example")
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Load(filepath.Join(dir, "workflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wf.CheckScripts(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ISSUE.md", "go.mod", "slug.go", "slug_test.go"} {
		if _, err := os.Stat(filepath.Join(dir, Repo, f)); err != nil {
			t.Errorf("repository: %v", err)
		}
	}
}
