package service_test

import (
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/toolserver"
	"github.com/openrath/rath/services/memory-svc/internal/memory"
)

// The durable consumers this service creates are the ones its role may
// use: the server refuses any other (internal/auth).
func TestDurablesArePermitted(t *testing.T) {
	for _, d := range []string{toolserver.Durable(memory.RememberTool)} {
		if !slices.Contains(auth.Durables(auth.RoleMemory), d) {
			t.Errorf("durable %s is not among %s's in internal/auth: %v", d, auth.RoleMemory, auth.Durables(auth.RoleMemory))
		}
	}
}
