package consume

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// pendingPerWorker is the consumer's MaxAckPending per worker: the server
// delivers no more than Workers × pendingPerWorker unsettled events.
const pendingPerWorker = 64

// shard handles the deliveries of the sessions hashed to it one at a time,
// in the order it took them. It holds at most size waiting, half of what
// the consumer may have unsettled (MaxAckPending): a burst of one session's
// events (a batch of thousands appended at once) gets a long queue (with 32
// slots, the deliveries naked for want of room and everything behind them
// came back in trickles: 5,000 events took minutes), and the other half of
// the server's window stays for the other sessions. The one Consume
// callback, shared by every session, never waits for room (offer).
type shard struct {
	size    int
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []delivery
	running jetstream.Msg // the delivery being handled, nil between
	closed  bool
	// held names, per session and by stream sequence, the deliveries naked
	// for want of room that have not come back and been taken yet.
	held map[string]map[uint64]held
	// handoffs is what the shard knows of hand-offs (Local); nil when the
	// handler has none.
	handoffs *handoffs
}

// held is a delivery naked for want of room: how often, and when last.
type held struct {
	naks int
	last time.Time
	// due is when its redelivery should be back. Processes that share
	// the consumer share its redeliveries: one not back by due plus
	// heldGrace went to another, and holds this process's later
	// deliveries of the session back no longer.
	due time.Time
}

// heldGrace is how late a delivery naked for want of room may come back
// and still be waited for.
const heldGrace = 250 * time.Millisecond

// offer queues d on its session's shard, or naks it to come back later
// when the shard is full. A session with a delivery naked so takes none of
// its events stored after that one until it has come back and been taken
// (or was due back a quarter of a second ago: processes sharing the consumer share its
// redeliveries, and another took it): the session's events are still
// handled in the order they were stored.
// (A handler's own retry, a Nak after it failed, holds nothing back, as
// before: later events of the session go on meanwhile.)
func (r *runner) offer(d delivery) {
	sid, _ := events.SessionFromSubject(d.m.Subject())
	s := r.shardOf(sid)
	s.mu.Lock()
	naks, behind, delay := s.put(d, sid, r.h.AckWait, time.Now())
	if s.handoffs != nil && d.parseErr == nil {
		// Hand-offs waiting for this event go behind it, or are dropped
		// if it was held back.
		s.handoffs.saw(sid, d.ev.Seq)
		s.release(sid)
	}
	s.mu.Unlock()
	if naks > 0 {
		r.log.Debug("shard busy; the event comes back later", "session", sid, "stream_seq", d.seq, "behind_held", behind, "retry_in", delay)
		_ = d.m.NakWithDelay(delay)
	}
}

// put queues d, or holds it back and returns how often it was (its naks so
// far, at least 1), whether it is behind another held delivery, and the
// delay to nak it with. The caller holds s.mu, and naks a delivery held
// back.
func (s *shard) put(d delivery, sid string, ackWait time.Duration, now time.Time) (naks int, behind bool, delay time.Duration) {
	h := s.held[sid]
	for seq, e := range h {
		if seq < d.seq {
			if now.After(e.due.Add(heldGrace)) {
				delete(h, seq) // redelivered to another process
				continue
			}
			behind = true
		}
	}
	if behind || len(s.queue) >= s.size {
		e := h[d.seq]
		e.naks++
		e.last = now
		delay = min(100*time.Millisecond<<min(e.naks-1, 5), 2*time.Second, ackWait/3)
		e.due = now.Add(delay)
		if d.seq != 0 { // (no sequence: nothing to keep behind it)
			if h == nil {
				h = map[uint64]held{}
				s.held[sid] = h
			}
			h[d.seq] = e
		}
		return e.naks, behind, delay
	}
	if e, ok := h[d.seq]; ok {
		// Its naks for want of room are no attempts of the handler's.
		d.attempt = max(d.attempt-e.naks, 1)
		delete(h, d.seq)
	}
	if len(h) == 0 {
		delete(s.held, sid)
	}
	s.queue = append(s.queue, d)
	s.cond.Signal()
	return 0, false, 0
}

// shardOf is the shard of session sid.
func (r *runner) shardOf(sid string) *shard {
	f := fnv.New32a()
	f.Write([]byte(sid))
	return r.shards[f.Sum32()%uint32(len(r.shards))]
}

// run handles the shard's deliveries until it is closed and empty.
func (s *shard) run(ctx context.Context, r *runner) {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		d := s.queue[0]
		s.queue[0] = delivery{}
		s.queue = s.queue[1:]
		closed := s.closed
		s.running = d.m
		s.mu.Unlock()
		switch {
		case d.handed && closed:
			// Stopping: a hand-off is left to its delivery, which the
			// next consumer takes if this one does not.
			s.mu.Lock()
			s.handoffs.forget(d.seq)
			s.mu.Unlock()
			continue
		case d.handed:
			r.deliverHanded(ctx, s, d)
			continue
		case s.handoffs != nil && s.handedAlready(d.seq):
			// Handled by its hand-off (and shown to Observe as it came).
			s.mu.Lock()
			s.running = nil
			s.mu.Unlock()
			r.failures.done(d.seq)
			_ = d.m.Ack()
			continue
		}
		r.deliver(ctx, d, func() {
			s.mu.Lock()
			s.running = nil
			s.mu.Unlock()
		})
	}
}

// close lets run return once the shard is empty.
func (s *shard) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// alive keeps the delivery being handled alive, appends the ones waiting
// to msgs, and forgets held deliveries last seen before stale: another
// process took them, and the sessions behind them go on.
func (s *shard) alive(msgs []jetstream.Msg, stale time.Time) []jetstream.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		// Under the lock, so never after the delivery was settled: a
		// progress after a delayed Nak would put the redelivery off.
		_ = s.running.InProgress()
	}
	for _, d := range s.queue {
		if d.m != nil { // (a hand-off has no message)
			msgs = append(msgs, d.m)
		}
	}
	s.expire(stale)
	for sid, h := range s.held {
		for seq, e := range h {
			if e.last.Before(stale) {
				delete(h, seq)
			}
		}
		if len(h) == 0 {
			delete(s.held, sid)
		}
	}
	return msgs
}

// keepAlive sends InProgress every third of the ack wait for every
// delivery the shards hold, so that none is redelivered while it is
// handled or waits for its turn, until stop is closed.
func (r *runner) keepAlive(stop <-chan struct{}) {
	t := time.NewTicker(r.h.AckWait / 3)
	defer t.Stop()
	var msgs []jetstream.Msg
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		stale := time.Now().Add(-2 * r.h.AckWait)
		for _, s := range r.shards {
			msgs = s.alive(msgs[:0], stale)
			for _, m := range msgs {
				_ = m.InProgress()
			}
		}
	}
}
