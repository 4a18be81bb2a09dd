package consume

import (
	"sync"
	"testing"
	"time"
)

// Processes that share a consumer share its redeliveries: a delivery this
// process naked for want of room may come back to another. Until it is due
// back (plus heldGrace) the session's later deliveries wait behind it;
// after that they are taken, instead of waiting out two ack waits.
func TestHeldDeliveryRedeliveredElsewhereHoldsBackNoLonger(t *testing.T) {
	s := &shard{size: 32, held: map[string]map[uint64]held{}}
	s.cond = sync.NewCond(&s.mu)
	for i := range s.size {
		s.queue = append(s.queue, delivery{seq: uint64(1000 + i)})
	}
	now := time.Unix(1000, 0)
	const ackWait = 30 * time.Second
	if naks, behind, delay := s.put(delivery{seq: 5}, "s1", ackWait, now); naks != 1 || behind || delay != 100*time.Millisecond {
		t.Fatalf("a full shard: naks %d, behind %v, delay %v; want 1, false, 100ms", naks, behind, delay)
	}
	s.queue = nil // room again
	if naks, behind, _ := s.put(delivery{seq: 6}, "s1", ackWait, now.Add(200*time.Millisecond)); naks != 1 || !behind {
		t.Fatalf("the next event while 5 may still come back: naks %d, behind %v; want held behind it", naks, behind)
	}
	if naks, behind, _ := s.put(delivery{seq: 7}, "s1", ackWait, now.Add(3*time.Second)); naks != 0 || behind {
		t.Fatalf("after 5 and 6 were due back and came elsewhere: naks %d, behind %v; want 7 taken", naks, behind)
	}
	if len(s.held) != 0 || len(s.queue) != 1 || s.queue[0].seq != 7 {
		t.Fatalf("held %v, queue %v; want nothing held, 7 queued", s.held, s.queue)
	}
	// Another session's delivery that comes back in time is taken, and so
	// is what waited behind it.
	s.queue = make([]delivery, s.size)
	s.put(delivery{seq: 20}, "s2", ackWait, now)
	s.queue = nil
	if naks, _, _ := s.put(delivery{seq: 20, attempt: 2}, "s2", ackWait, now.Add(100*time.Millisecond)); naks != 0 {
		t.Fatalf("a held delivery back in time: naks %d, want taken", naks)
	}
	if got := s.queue[len(s.queue)-1]; got.seq != 20 || got.attempt != 1 {
		t.Fatalf("queued %+v, want 20 at its first handler attempt", got)
	}
}
