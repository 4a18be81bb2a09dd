package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/session"
)

// Snapshot is a session's state folded up to Seq, with the stream sequence
// of the session's own last event at that point, where reading on resumes.
// A marker is a snapshot without the state, for sessions whose state grew
// too large to store: it still tells where in the stream event Seq is.
type Snapshot struct {
	State     *session.State `json:"state,omitempty"`
	Seq       uint64         `json:"seq"`
	Hash      string         `json:"hash"`
	StreamSeq uint64         `json:"stream_seq"`
}

// Marker reports whether the snapshot holds no state.
func (s Snapshot) Marker() bool { return s.State == nil }

func snapshotKey(sessionID string, seq uint64) string {
	return sessionID + "." + strconv.FormatUint(seq, 10)
}

// ErrTooLarge is returned for an event above MaxEventSize or a snapshot
// above MaxSnapshotSize.
var ErrTooLarge = errors.New("too large")

// PutSnapshot stores a snapshot under its session and sequence.
func (s *Store) PutSnapshot(ctx context.Context, session string, snap Snapshot) error {
	if snap.State != nil {
		snap.Seq, snap.Hash = snap.State.Seq, snap.State.Hash
	}
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("snapshot %s at %d: %w", session, snap.Seq, err)
	}
	if len(b) > int(s.cfg.MaxSnapshotSize) {
		return fmt.Errorf("snapshot %s at %d: %d bytes: %w", session, snap.Seq, len(b), ErrTooLarge)
	}
	if _, err := s.snapshots.Put(ctx, snapshotKey(session, snap.Seq), b); err != nil {
		return fmt.Errorf("snapshot %s at %d: %w", session, snap.Seq, err)
	}
	return nil
}

// GetSnapshot reads the snapshot of a session at exactly seq; ErrNotFound if
// none was stored.
func (s *Store) GetSnapshot(ctx context.Context, sessionID string, seq uint64) (Snapshot, error) {
	e, err := s.snapshots.Get(ctx, snapshotKey(sessionID, seq))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Snapshot{}, ErrNotFound
		}
		return Snapshot{}, fmt.Errorf("snapshot %s at %d: %w", sessionID, seq, err)
	}
	var snap Snapshot
	if err := json.Unmarshal(e.Value(), &snap); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s at %d: %w", sessionID, seq, err)
	}
	return snap, nil
}
