package service_test

import (
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/services/selector/internal/selector"
)

// The durable consumers this service creates are the ones its role may
// use: the server refuses any other (internal/auth).
func TestDurablesArePermitted(t *testing.T) {
	for _, d := range []string{selector.Durable} {
		if !slices.Contains(auth.Durables(auth.RoleSelector), d) {
			t.Errorf("durable %s is not among %s's in internal/auth: %v", d, auth.RoleSelector, auth.Durables(auth.RoleSelector))
		}
	}
}
