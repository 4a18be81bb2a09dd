package consume

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
)

// Local hands a running consumer the events its own process appended and
// the ledger acked, so that they are handled without waiting for their
// JetStream delivery (ADR 0038 item 5: the selector hands the agent worker
// the turns it requests). Create it before Run and set it as the Handler's
// Local.
//
// A hand-off is only ever a head start. The durable consumer still receives
// every event; a handed event's delivery is acked without being handled
// again once the hand-off was handled, and handled as usual if the hand-off
// was not (it failed, was dropped, or the process stopped first): nothing
// is lost, and what is not handed is handled as before.
//
// A hand-off never overtakes an earlier delivery of its session: it goes on
// the session's shard only once the runner has received the session's
// previous event (it waits, parked, until then), and only if none of the
// session's deliveries is held back waiting for room. So Local needs a
// handler whose Tokens cover every kind (events.Tokens); for any other it
// does nothing. A handed event is shown to Observe just before it is
// handled, and its delivery is shown again when it arrives: Observe must
// ignore an event it holds (fold.Cache does, by stream sequence), which
// also keeps a cache continuous when it had not taken the handed one.
// A duplicate hand-off, or one that comes after the event's delivery, is
// dropped.
type Local struct {
	mu sync.Mutex
	r  *runner
}

// NewLocal returns a Local attached to no consumer yet: hand-offs before
// Run starts, or after it stopped, are dropped.
func NewLocal() *Local { return &Local{} }

// Hand hands ev, stored at streamSeq in the sessions stream and acked by the
// ledger, to the consumer. The caller must hold the ledger's ack: the event
// must be stored (its Seq and Hash are the ack's). Hand does not wait for
// the event to be handled.
func (l *Local) Hand(ev events.Stored, streamSeq uint64) {
	if l == nil || streamSeq == 0 || ev.Seq == 0 || ev.Session == "" {
		return
	}
	l.mu.Lock()
	r := l.r
	l.mu.Unlock()
	if r != nil {
		r.hand(ev, streamSeq)
	}
}

func (l *Local) attach(r *runner) {
	l.mu.Lock()
	l.r = r
	l.mu.Unlock()
}

func (l *Local) detach(r *runner) {
	l.mu.Lock()
	if l.r == r {
		l.r = nil
	}
	l.mu.Unlock()
}

// coversAll reports whether tokens select every kind of event: the runner
// then receives each session's every event, in order.
func coversAll(tokens []string) bool {
	for _, t := range events.Tokens() {
		if !slices.Contains(tokens, t) {
			return false
		}
	}
	return true
}

// Bounds of what a shard remembers for hand-offs; what is forgotten is
// handled by its delivery (a handler is idempotent).
const (
	// handedKept bounds the stream sequences a shard remembers as handed.
	handedKept = 1024
	// seenKept bounds the sessions whose last received event a shard
	// remembers.
	seenKept = 4096
	// parkedKept bounds the hand-offs a shard keeps waiting for their
	// session's previous event.
	parkedKept = 64
)

// handoffs is a shard's memory of hand-offs, guarded by the shard's mu.
type handoffs struct {
	// seen is the last session sequence received, per session.
	seen map[string]uint64
	// handed names the stream sequences handed: false queued, true
	// handled. An entry goes when its delivery is acked unhandled, the
	// hand-off failed, or it is pushed out by newer ones (order).
	handed map[uint64]bool
	order  []uint64
	// parked are hand-offs waiting for their session's previous event.
	parked  map[string][]delivery
	nParked int
}

func newHandoffs() *handoffs {
	return &handoffs{seen: map[string]uint64{}, handed: map[uint64]bool{}, parked: map[string][]delivery{}}
}

// remember notes seq as handed and not handled yet.
func (h *handoffs) remember(seq uint64) {
	if len(h.order) >= handedKept {
		delete(h.handed, h.order[0])
		h.order = slices.Delete(h.order, 0, 1)
	}
	h.handed[seq] = false
	h.order = append(h.order, seq)
}

// forget drops seq's entry.
func (h *handoffs) forget(seq uint64) {
	delete(h.handed, seq)
	if i := slices.Index(h.order, seq); i >= 0 {
		h.order = slices.Delete(h.order, i, i+1)
	}
}

// saw notes that session sid's event seq was received.
func (h *handoffs) saw(sid string, seq uint64) {
	last, ok := h.seen[sid]
	if !ok {
		if len(h.seen) >= seenKept {
			// Forgetting only parks later hand-offs, which their
			// deliveries then settle.
			clear(h.seen)
		}
		// A copy: a session ID parsed from a message is a substring of
		// it (events.ParseStored), which the key would keep alive.
		sid = strings.Clone(sid)
	}
	h.seen[sid] = max(last, seq)
}

// hand queues or parks a hand-off on its session's shard, or drops it.
func (r *runner) hand(ev events.Stored, streamSeq uint64) {
	if len(r.types) > 0 && !r.types[ev.Type] {
		return
	}
	s := r.shardOf(ev.Session)
	if s.handoffs == nil {
		return
	}
	s.mu.Lock()
	outcome := s.hand(ev, streamSeq)
	s.mu.Unlock()
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("hand-off", "event", ev.ID, "type", ev.Type, "session", ev.Session, "seq", ev.Seq, "stream_seq", streamSeq, "outcome", outcome)
	}
}

// hand queues, parks or drops a hand-off and says which. The caller holds
// s.mu.
func (s *shard) hand(ev events.Stored, streamSeq uint64) string {
	h := s.handoffs
	switch _, dup := h.handed[streamSeq]; {
	case s.closed:
		return "dropped: stopping"
	case dup:
		return "dropped: handed before"
	case h.seen[ev.Session] >= ev.Seq:
		return "dropped: its delivery came first"
	}
	d := delivery{ev: ev, seq: streamSeq, attempt: 1, handed: true, at: time.Now()}
	if h.seen[ev.Session] < ev.Seq-1 {
		if h.nParked >= parkedKept {
			return "dropped: too many waiting"
		}
		h.remember(streamSeq)
		h.parked[ev.Session] = append(h.parked[ev.Session], d)
		h.nParked++
		return "parked until its session's previous event comes"
	}
	if len(s.held[ev.Session]) > 0 || len(s.queue) >= s.size {
		return "dropped: the shard is full"
	}
	h.remember(streamSeq)
	s.queue = append(s.queue, d)
	s.cond.Signal()
	return "queued"
}

// release queues the parked hand-offs of session sid whose previous event
// has been received, and drops those whose own delivery has been or that
// can no longer go in order. The caller holds s.mu.
func (s *shard) release(sid string) {
	h := s.handoffs
	p := h.parked[sid]
	if len(p) == 0 {
		return
	}
	seen := h.seen[sid]
	kept := p[:0]
	for _, d := range p {
		switch {
		case seen+1 < d.ev.Seq:
			kept = append(kept, d)
			continue
		case seen+1 == d.ev.Seq && len(s.held[sid]) == 0 && len(s.queue) < s.size:
			s.queue = append(s.queue, d)
			s.cond.Signal()
		default:
			h.forget(d.seq)
		}
		h.nParked--
	}
	if len(kept) == 0 {
		delete(h.parked, sid)
	} else {
		h.parked[sid] = kept
	}
}

// expire drops parked hand-offs older than stale: their session's earlier
// events went to another process, and their deliveries settle them. The
// caller holds s.mu.
func (s *shard) expire(stale time.Time) {
	h := s.handoffs
	if h == nil {
		return
	}
	for sid, p := range h.parked {
		kept := p[:0]
		for _, d := range p {
			if d.at.Before(stale) {
				h.forget(d.seq)
				h.nParked--
				continue
			}
			kept = append(kept, d)
		}
		if len(kept) == 0 {
			delete(h.parked, sid)
		} else {
			h.parked[sid] = kept
		}
	}
}

// saw notes a delivery received and not to be handled (of another type),
// and releases the hand-offs that waited for it.
func (r *runner) saw(d delivery) {
	if d.parseErr != nil || d.ev.Session == "" {
		return
	}
	s := r.shardOf(d.ev.Session)
	s.mu.Lock()
	if s.handoffs != nil {
		s.handoffs.saw(d.ev.Session, d.ev.Seq)
		s.release(d.ev.Session)
	}
	s.mu.Unlock()
}

// handedAlready reports whether the delivery of stream sequence seq was
// handled by its hand-off, and forgets the hand-off if so.
func (s *shard) handedAlready(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handoffs
	if h == nil || seq == 0 || !h.handed[seq] {
		return false
	}
	h.forget(seq)
	return true
}

// deliverHanded shows a hand-off to Observe and handles it. It has no
// message to settle: on success its delivery will be acked unhandled, on
// failure handled as usual (a hand-off's failure is no attempt).
func (r *runner) deliverHanded(ctx context.Context, s *shard, d delivery) {
	ev := d.ev
	if r.h.Observe != nil {
		r.observe(ctx, ev, d.seq)
	}
	ctx, span := tracing.Tracer("consume").Start(ctx, "rath.handle "+r.h.Name,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("rath.session", ev.Session), attribute.Int64("rath.seq", int64(ev.Seq)),
			attribute.String("rath.event.type", ev.Type), attribute.String("rath.event.id", ev.ID), attribute.Bool("rath.handed", true)))
	defer span.End()
	err := r.handle(context.WithValue(ctx, attemptKey{}, 1), ev)
	s.mu.Lock()
	if _, ok := s.handoffs.handed[d.seq]; ok && err == nil {
		s.handoffs.handed[d.seq] = true
	} else {
		s.handoffs.forget(d.seq)
	}
	s.mu.Unlock()
	if err == nil {
		r.logHandled(ctx, ev, true)
	} else {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		r.log.Debug("handed event failed; its delivery handles it", "event", ev.ID, "type", ev.Type, "session", ev.Session, "err", err)
	}
}
