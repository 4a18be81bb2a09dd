package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// Write lays out the YAML files and the repository, and refuses an archive
// naming a file outside the repository, writing nothing there.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	files := fstest.MapFS{
		"workflow.yaml": {Data: []byte("name: w\n")},
		"notes.txt":     {Data: []byte("not copied")},
		Archive:         {Data: []byte("-- go.mod --\nmodule x\n-- pkg/a.go --\npackage pkg\n")},
	}
	if err := Write(files, "test", dir, "repo"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"workflow.yaml", "repo/go.mod", "repo/pkg/a.go"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err == nil {
		t.Error("a file that is not YAML was written")
	}

	for _, name := range []string{"../escape.go", "/abs.go", "repo/../../escape.go"} {
		out := filepath.Join(t.TempDir(), "ex")
		files[Archive] = &fstest.MapFile{Data: []byte("-- " + name + " --\npackage x\n")}
		err := Write(files, "test", out, "repo")
		if err == nil || !strings.Contains(err.Error(), "outside the repository") {
			t.Errorf("%s: %v, want it refused", name, err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(out), "escape.go")); err == nil {
			t.Errorf("%s: written outside the example", name)
		}
	}
}
