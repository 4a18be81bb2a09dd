package auth_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// A new credentials directory lets the development client decide every
// approval; roles added for a user are read back, a second add changes
// nothing, and a line naming no role is refused.
func TestApproversFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, auth.ApproversFile)
	roles := auth.ApproverRoles(path)
	if r, err := roles(events.DefaultClient); err != nil || !slices.Equal(r, []string{"*"}) {
		t.Fatalf("default client's roles %v %v, want [*]", r, err)
	}
	alice := events.Principal{Tenant: "acme", User: "alice"}
	for range 2 {
		if err := auth.AddApproverRoles(dir, alice, "maintainers", "leads"); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := roles(alice); !slices.Equal(r, []string{"maintainers", "leads"}) {
		t.Errorf("alice's roles %v", r)
	}
	if r, _ := roles(events.Principal{Tenant: "acme", User: "bob"}); len(r) != 0 {
		t.Errorf("bob holds %v", r)
	}
	if err := os.WriteFile(path, []byte("acme/alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := roles(alice); err == nil {
		t.Error("a line without roles was read")
	}
	if a, err := auth.ReadApprovers(filepath.Join(dir, "none")); err != nil || len(a) != 0 {
		t.Errorf("a missing file: %v %v", a, err)
	}
}
