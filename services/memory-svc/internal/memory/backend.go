package memory

import (
	"context"
	"errors"

	"github.com/openrath/rath/pkg/memoryapi"
)

// Backend stores memory records: an append-only log per item, every record
// kept, with a position that grows with every record stored (across items),
// so that a reader can tell whether it has seen a given write. The
// JetStream stream RATH_MEMORY is the embedded default (JetStream); another
// store implements the same contract (backend_test.go's suite).
type Backend interface {
	// Last returns the item's last record and its position, or (nil, 0)
	// when the item has none.
	Last(ctx context.Context, itemID string) (*memoryapi.Record, uint64, error)
	// Append stores rec as the item's next record only if the item's last
	// record is at position expect (0: the item has none yet), and returns
	// the new record's position. It returns ErrConflict if another record
	// got there first. dedupeID identifies the write: appending the same
	// dedupeID twice within the backend's window stores it once.
	Append(ctx context.Context, rec memoryapi.Record, expect uint64, dedupeID string) (uint64, error)
	// Follow calls fn with every record stored, in position order, from the
	// first, then with each new one as it is stored, on one goroutine, until
	// ctx ends or fn returns an error. It returns once the follower runs.
	// The returned function waits for the follower to stop.
	Follow(ctx context.Context, fn func(rec memoryapi.Record, pos uint64) error) (wait func() error, err error)
	// Head returns the position of the last record stored (0: none).
	Head(ctx context.Context) (uint64, error)
}

// ErrConflict is returned by Backend.Append when the item's last record is
// not the one expected: another writer appended first. Re-read and retry.
var ErrConflict = errors.New("memory item changed concurrently")
