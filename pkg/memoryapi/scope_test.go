package memoryapi_test

import (
	"testing"

	"github.com/openrath/rath/pkg/memoryapi"
)

func TestParseScope(t *testing.T) {
	for _, tc := range []struct {
		in, kind, name string
		ok             bool
	}{
		{"project:rath", "project", "rath", true},
		{"project:openrath/rath", "project", "openrath/rath", true},
		{"user:ana@example.com", "user", "ana@example.com", true},
		{"agent:coder", "agent", "coder", true},
		{"workflow:fix-failing-test", "workflow", "fix-failing-test", true},
		{"session:01JDQ8ZK3V6ENS6Y9W4T2XH1AB", "session", "01JDQ8ZK3V6ENS6Y9W4T2XH1AB", true},
		{"project", "", "", false},
		{"global:x", "", "", false},
		{"project:", "", "", false},
		{"project:has space", "", "", false},
		{"session:a.b", "", "", false},
		{"session:new", "", "", false},
	} {
		kind, name, err := memoryapi.ParseScope(tc.in)
		if (err == nil) != tc.ok || kind != tc.kind || name != tc.name {
			t.Errorf("ParseScope(%q) = %q, %q, %v", tc.in, kind, name, err)
		}
	}
}
