package eventstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// chainOf seals n events of a session after (seq, prev).
func chainOf(t testing.TB, id string, seq uint64, prev string, n int) []eventstore.Sealed {
	t.Helper()
	out := make([]eventstore.Sealed, n)
	for i := range out {
		body, hash, eventID := sealed(t, id, seq+uint64(i), prev)
		out[i] = eventstore.Sealed{Token: events.TokenConversation, Body: body, EventID: eventID, Seq: seq + uint64(i), Hash: hash}
		prev = hash
	}
	return out
}

// lastOf is the stream sequence of a session's last event (0: none).
func lastOf(t *testing.T, s *eventstore.Store, id string) uint64 {
	t.Helper()
	m, err := s.Last(context.Background(), id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return m.StreamSeq
}

// JetStream stores an atomic append whole or not at all: a stale
// expectation, a stored event ID or one message over the size limit leaves
// the session as it was.
func TestAppendAtomicIsAllOrNothing(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	tenant := events.DefaultTenant
	first := chainOf(t, "x", 1, "", 3)
	res, err := s.AppendAtomic(ctx, tenant, "x", first, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastOf(t, s, "x"); got != res.StreamSeq {
		t.Fatalf("last stream seq %d, ack says %d", got, res.StreamSeq)
	}
	for i := range first {
		m, err := s.Get(ctx, res.StreamSeq-uint64(len(first)-1-i))
		if err != nil || !bytes.Equal(m.Body, first[i].Body) {
			t.Fatalf("event %d not at its stream sequence: %v", i, err)
		}
	}
	next := chainOf(t, "x", 4, first[2].Hash, 3)

	// Stale: expects the session empty.
	_, err = s.AppendAtomic(ctx, tenant, "x", next, 0)
	if !eventstore.IsConflict(err) {
		t.Fatalf("stale expectation: %v, want a conflict", err)
	}
	// One event stored already (the batch proposed again with more).
	_, err = s.AppendAtomic(ctx, tenant, "x", append([]eventstore.Sealed{first[2]}, next...), res.StreamSeq)
	if !errors.Is(err, eventstore.ErrDuplicate) {
		t.Fatalf("stored event in the batch: %v, want ErrDuplicate", err)
	}
	// The last message too large for the stream.
	big := append([]eventstore.Sealed(nil), next...)
	big[2].Body = bytes.Repeat([]byte("x"), s.MaxEventSize()+1)
	_, err = s.AppendAtomic(ctx, tenant, "x", big, res.StreamSeq)
	if !errors.Is(err, eventstore.ErrTooLarge) {
		t.Fatalf("a batch with an oversized message: %v, want ErrTooLarge", err)
	}
	if got := lastOf(t, s, "x"); got != res.StreamSeq {
		t.Fatalf("a refused batch moved the session from stream seq %d to %d", res.StreamSeq, got)
	}
	// The right batch still goes in.
	res2, err := s.AppendAtomic(ctx, tenant, "x", next, res.StreamSeq)
	if err != nil || res2.StreamSeq != res.StreamSeq+3 {
		t.Fatalf("append after refusals: %+v %v", res2, err)
	}
}

// BenchmarkAnswer stores a model answer of four events (text, a tool call,
// the model call, the end of the turn) one session at a time: as one atomic
// append, or as four conditional appends one after another.
func BenchmarkAnswer(b *testing.B) {
	s := open(b)
	ctx := context.Background()
	tenant := events.DefaultTenant
	runs := 0
	b.Run("atomic", func(b *testing.B) {
		runs++
		id := fmt.Sprintf("ba-%d", runs)
		var last uint64
		prev := ""
		seq := uint64(1)
		for b.Loop() {
			evs := chainOf(b, id, seq, prev, 4)
			res, err := s.AppendAtomic(ctx, tenant, id, evs, last)
			if err != nil {
				b.Fatal(err)
			}
			last, prev, seq = res.StreamSeq, evs[3].Hash, seq+4
		}
	})
	b.Run("four-appends", func(b *testing.B) {
		runs++
		id := fmt.Sprintf("bf-%d", runs)
		var last uint64
		prev := ""
		seq := uint64(1)
		for b.Loop() {
			for _, e := range chainOf(b, id, seq, prev, 4) {
				res, err := s.Append(ctx, tenant, id, e.Token, e.Body, e.EventID, e.Seq, e.Hash, last)
				if err != nil {
					b.Fatal(err)
				}
				last, prev, seq = res.StreamSeq, e.Hash, seq+1
			}
		}
	})
}
