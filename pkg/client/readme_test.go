package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's "Using Rath from Go" program compiles as printed: the test
// copies its go block into a directory of this module and builds it.
func TestREADMEGoProgramCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Using Rath from Go\n")
	if !ok {
		t.Fatal(`README.md has no "## Using Rath from Go" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the section has no go block")
	}
	code, _, ok = strings.Cut(code, "\n```")
	if !ok {
		t.Fatal("the section's go block does not end")
	}
	if strings.Contains(code, "/internal/") {
		t.Fatalf("the README's Go program imports an internal package, which a program outside this module cannot:\n%s", code)
	}
	// testdata keeps the package out of ./... for anyone building the tree
	// meanwhile; the directory is inside the module, so its imports resolve.
	if _, err := os.Stat("testdata"); os.IsNotExist(err) {
		if err := os.Mkdir("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("testdata") })
	}
	dir, err := os.MkdirTemp("testdata", "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "vet", "./"+filepath.ToSlash(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go program does not build:\n%s\n%s", out, code)
	}
}
