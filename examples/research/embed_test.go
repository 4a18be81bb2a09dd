package research

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/openrath/rath/internal/workflow"
)

// Write lays the example out as rath demo research reads it: a workflow
// whose scripts are all there, and the program with its module file and the
// task's materials.
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
	for _, f := range []string{"TASK.md", "go.mod", "main.go", "fit.go"} {
		if _, err := os.Stat(filepath.Join(dir, Repo, f)); err != nil {
			t.Errorf("repository: %v", err)
		}
	}
}
