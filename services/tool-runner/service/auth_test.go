package service_test

import (
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/services/tool-runner/internal/runner"
)

// The durable consumers this service creates are the ones its role may
// use: the server refuses any other (internal/auth).
func TestDurablesArePermitted(t *testing.T) {
	for _, d := range []string{runner.Durable, runner.DurableMCP} {
		if !slices.Contains(auth.Durables(auth.RoleToolRunner), d) {
			t.Errorf("durable %s is not among %s's in internal/auth: %v", d, auth.RoleToolRunner, auth.Durables(auth.RoleToolRunner))
		}
	}
}
