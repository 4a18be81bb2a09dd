package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
)

// Ensure creates one private file per role in a private directory, and a
// second call (a restart) reuses every identity.
func TestEnsureCreatesThenReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "creds")
	first, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s has mode %v, want 0700", dir, fi.Mode().Perm())
	}
	for _, r := range auth.Roles() {
		fi, err := os.Stat(filepath.Join(dir, auth.FileName(r)))
		if err != nil {
			t.Fatalf("role %s: %v", r, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", auth.FileName(r), fi.Mode().Perm())
		}
		if id := first.Identity(r); id.Role != r || !strings.HasPrefix(id.PublicKey, "U") {
			t.Errorf("identity of %s: %+v", r, id)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(auth.Roles())+1 {
		t.Errorf("%d files in %s, want %d (one per role and the approvers file, no leftovers)", len(entries), dir, len(auth.Roles())+1)
	}
	again, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range auth.Roles() {
		if again.Identity(r) != first.Identity(r) || loaded.Identity(r) != first.Identity(r) {
			t.Errorf("role %s: identity changed on reuse: %+v, %+v, was %+v", r, again.Identity(r), loaded.Identity(r), first.Identity(r))
		}
	}
	if _, err := auth.Mint(dir); err == nil {
		t.Error("Mint into a directory with credentials succeeded, want a refusal")
	}
}

// A missing or broken file is an error that names it, never a new identity.
func TestBadCredentials(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "selector.nk")
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Load(dir); !errors.Is(err, auth.ErrNoCredentials) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load without %s: %v", missing, err)
	}
	if _, _, err := auth.Options(missing); !errors.Is(err, auth.ErrNoCredentials) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Option(%s): %v", missing, err)
	}
	broken := filepath.Join(dir, "client.nk")
	if err := os.WriteFile(broken, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Ensure(dir); !errors.Is(err, auth.ErrBadCredentials) || !strings.Contains(err.Error(), broken) {
		t.Errorf("Ensure with a broken %s: %v", broken, err)
	}
	if _, err := auth.ParseRole("root"); err == nil {
		t.Error("ParseRole(root) succeeded")
	}
}
