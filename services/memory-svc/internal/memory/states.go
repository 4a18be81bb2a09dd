package memory

import (
	"context"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/session"
)

// WithStates makes the service read sessions' states from a cache of folded
// states (ADR 0016) instead of asking the ledger for each whole state.
func WithStates(c *fold.Cache) Option { return func(m *Memory) { m.states = c } }

// state returns a session's state at sequence at (0: its head): from the
// cache when the service has one, else from the ledger.
func (m *Memory) state(ctx context.Context, id string, at uint64) (*session.State, error) {
	if m.states != nil {
		return m.states.State(ctx, id, at)
	}
	return m.ledger.StateAt(ctx, id, at)
}
