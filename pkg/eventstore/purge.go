package eventstore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// PurgeSession removes from the sessions stream every stored event of one
// session with a stream sequence below before, and nothing else: a JetStream
// purge with the subject filter rath.log.*.<session>.> and a sequence, which
// the server reads as "matching the filter, up to but not including this
// sequence" (a wildcard filter is matched per subject; sequence and keep
// cannot be combined). Purging again is a no-op, so two ledgers doing the
// same purge are harmless.
func (s *Store) PurgeSession(ctx context.Context, session string, before uint64) error {
	if before <= 1 {
		return nil
	}
	err := s.sessions.Purge(ctx, jetstream.WithPurgeSubject(events.SessionFilter(session)), jetstream.WithPurgeSequence(before))
	if err != nil {
		return fmt.Errorf("purge session %s below stream %d: %w", session, before, err)
	}
	return nil
}
