package service_test

import (
	"slices"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// The durable consumers this service creates are the ones its role may
// use: the server refuses any other (internal/auth).
func TestDurablesArePermitted(t *testing.T) {
	for _, d := range []string{worker.Durable} {
		if !slices.Contains(auth.Durables(auth.RoleAgentWorker), d) {
			t.Errorf("durable %s is not among %s's in internal/auth: %v", d, auth.RoleAgentWorker, auth.Durables(auth.RoleAgentWorker))
		}
	}
}
