// Package consume is the one consumer runner of Rath's worker services: it
// feeds stored session events to a typed handler through a durable JetStream
// consumer and owns the ack policy, so no service acks by hand.
//
// The policy: a handler that returns nil has handled the event (Ack). A
// Permanent error, or a transient one on the last allowed attempt, sends the
// event to the dead-letter subject rath.dead.<handler> with the error, records
// a rath.handler.failed event in the session, and ends delivery (Term). Any
// other error is retried after a growing delay (NakWithDelay); a Waiting
// one without end. Every delivery held, waiting for its session's shard or
// being handled, is kept alive automatically (InProgress); one that finds
// its shard full is naked to come back shortly.
//
// An event the process itself appended can be handed to a running consumer
// (Local) ahead of its delivery, which is then acked unhandled.
//
// Handlers must be idempotent: an event can be delivered again after a crash.
// Emitting outputs with events.DerivedID makes the emitted events themselves
// deduplicate; checking the session state before acting makes side effects
// happen once.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// Handler describes one durable handler of session events.
type Handler struct {
	// Name is the durable consumer name. Declare it as a constant beside the
	// handler: renaming it starts a new consumer from the beginning.
	Name string
	// Tokens selects the kinds of stored events to receive (subject tokens).
	Tokens []string
	// Types, if set, are the event types handled; others are acked without
	// being handled (after Observe has seen them).
	Types []string
	// Handle handles one event.
	Handle func(ctx context.Context, ev events.Stored) error
	// Observe, if set, is shown every event received (of Types or not), in
	// the order delivered and before it is handled, with its stream
	// sequence: a handler that folds sessions (fold.Cache.Observe) keeps
	// them current from its own deliveries instead of reading the log on
	// each event. Such a handler receives every kind (events.Tokens) and
	// names the ones it handles in Types: the others are acked once seen.
	Observe func(ctx context.Context, ev events.Stored, streamSeq uint64)
	// MaxAttempts bounds the failures of one event in a process: errors
	// neither Permanent nor Waiting (default 5). The event is then given up.
	MaxAttempts int
	// Workers is how many events are handled at once (default 8). Events of
	// one session are always handled one at a time, in order.
	Workers int
	// AckWait is how long a delivery may go without progress before it is
	// redelivered (default 30s); deliveries held, waiting or being handled,
	// are kept alive.
	AckWait time.Duration
	// Local, if set, takes hand-offs of events this process appended
	// (see Local). It needs Tokens that cover every kind.
	Local *Local
}

// ShutdownGrace is how long handlers in progress may run on after Run was
// asked to stop.
const ShutdownGrace = 10 * time.Second

// Failure records a given-up event in its session. The runner calls it
// before ending the event's delivery.
type Failure func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks an error that retrying cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

type attemptKey struct{}

// Attempt is the delivery attempt (from 1) of the event a handler is
// handling; 0 outside a handler.
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}

type waiting struct{ err error }

func (w waiting) Error() string { return w.err.Error() }
func (w waiting) Unwrap() error { return w.err }

// Waiting marks an error that is a wait for something outside Rath to
// appear, such as a program serving a router no process serves yet: the
// event is retried with the usual growing delay (at most 10 s apart) for
// as long as it takes, and never given up, so it is not lost for want of a
// program. Its attempts do not count toward MaxAttempts (which counts a
// process's failures of the event, not its deliveries). Something else
// must bound the wait (a workflow's wall_time closes the session, and the
// redelivered event then routes nothing).
func Waiting(err error) error {
	if err == nil {
		return nil
	}
	return waiting{err}
}

// IsWaiting reports whether err was marked Waiting.
func IsWaiting(err error) bool {
	var w waiting
	return errors.As(err, &w)
}

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// Run consumes until ctx ends, then stops taking events, lets the handlers
// in progress finish, and returns. Unfinished events are redelivered to the
// next consumer: none is lost.
func Run(ctx context.Context, nc *nats.Conn, h Handler, onFailure Failure, log *slog.Logger) error {
	if h.Name == "" || h.Handle == nil || len(h.Tokens) == 0 {
		return errors.New("consume: handler needs a name, tokens and a handle func")
	}
	if h.MaxAttempts <= 0 {
		h.MaxAttempts = 5
	}
	if h.Workers <= 0 {
		h.Workers = 8
	}
	if h.AckWait <= 0 {
		h.AckWait = 30 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("consume %s: %w", h.Name, err)
	}
	filters := make([]string, len(h.Tokens))
	for i, t := range h.Tokens {
		filters[i] = events.KindFilter(t)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        h.Name,
		Description:    "Rath handler " + h.Name,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        h.AckWait,
		MaxAckPending:  h.Workers * pendingPerWorker,
	}
	var cons jetstream.Consumer
	for wait := 50 * time.Millisecond; ; wait = min(wait*2, 2*time.Second) {
		cons, err = js.CreateOrUpdateConsumer(ctx, events.StreamSessions, cfg)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// The ledger creates the streams; a worker may start first.
			log.Info("waiting for the sessions stream", "handler", h.Name)
		case eventstore.Forming(err):
			// A cluster forming, electing a leader, short of a node, or too
			// busy to answer in time (seen: a worker starting on a 3-node
			// cluster under load exited, and with it the agent loop).
			log.Warn("waiting for the JetStream cluster", "handler", h.Name, "retry_in", wait, "err", err)
		default:
			return fmt.Errorf("consume %s: consumer: %w", h.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	r := &runner{h: h, js: js, onFailure: onFailure, log: log.With("handler", h.Name), types: map[string]bool{}}
	for _, t := range h.Types {
		r.types[t] = true
	}
	// Handlers outlive a shutdown request by a grace period, so that work in
	// progress can finish; then their context ends too. What they did not
	// finish is redelivered.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	local := h.Local != nil && coversAll(h.Tokens)
	if h.Local != nil && !local {
		r.log.Warn("hand-offs ignored: the handler does not receive every kind of event")
	}
	r.shards = make([]*shard, h.Workers)
	var wg sync.WaitGroup
	for i := range r.shards {
		s := &shard{size: h.Workers * pendingPerWorker / 2, held: map[string]map[uint64]held{}}
		if local {
			s.handoffs = newHandoffs()
		}
		s.cond = sync.NewCond(&s.mu)
		r.shards[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(hctx, r)
		}()
	}
	stopTicks, ticked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ticked)
		r.keepAlive(stopTicks)
	}()
	if local {
		h.Local.attach(r)
	}
	// stop lets the shards handle what they hold, then stops keeping it alive.
	stop := func() {
		if local {
			h.Local.detach(r)
		}
		for _, s := range r.shards {
			s.close()
		}
		wg.Wait()
		close(stopTicks)
		<-ticked
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if d, ok := r.receive(hctx, m); ok {
			r.offer(d)
		} else if local {
			r.saw(d)
		}
	}, jetstream.PullMaxMessages(h.Workers*8), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			r.log.Debug("consumer", "err", err)
		}))
	if err != nil {
		stop()
		return fmt.Errorf("consume %s: %w", h.Name, err)
	}
	<-ctx.Done()
	grace := time.AfterFunc(ShutdownGrace, hcancel)
	defer grace.Stop()
	cc.Drain()
	<-cc.Closed()
	stop()
	return nil
}

// A pull request waits at most pullExpiry and the server sends a heartbeat
// every pullHeartbeat while it waits. A consumer whose leader's node is
// lost (killed, or hung) takes its pending pull requests with it, and the
// client notices only when two heartbeats are missing: with nats.go's
// defaults (30 s, 15 s) a worker then sat idle for 30 s after the new
// leader was elected (the cluster test's agent sessions closed 31 s after
// the appends); with these, within 4 s.
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

type runner struct {
	h         Handler
	js        jetstream.JetStream
	onFailure Failure
	log       *slog.Logger
	types     map[string]bool
	failures  failures
	shards    []*shard
}

// failures counts, per message (its stream sequence), the handler's
// failures in this process that count toward MaxAttempts: errors neither
// permanent nor Waiting. A delivery count would include the waits (a
// trigger that waited for a router twenty times, then met one transient
// error, would be given up at once), and deliveries lost to a stopped or
// dead process. Another process that takes the message over counts its own,
// so a message that keeps failing is given up after at most MaxAttempts
// failures in some process.
type failures struct {
	mu sync.Mutex
	n  map[uint64]failure
}

type failure struct {
	count int
	last  time.Time
}

// failuresKept bounds the counts kept: beyond it, counts not added to for
// an hour (a message another process settled) are dropped.
const failuresKept = 4096

// add counts a failure of message seq and returns its count.
func (f *failures) add(seq uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[uint64]failure{}
	}
	now := time.Now()
	if len(f.n) >= failuresKept {
		for k, v := range f.n {
			if now.Sub(v.last) > time.Hour {
				delete(f.n, k)
			}
		}
	}
	c := f.n[seq]
	c.count++
	c.last = now
	f.n[seq] = c
	return c.count
}

// done forgets message seq: settled.
func (f *failures) done(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.n, seq)
}

// delivery is a message received, parsed, for a handling goroutine.
type delivery struct {
	m        jetstream.Msg
	ev       events.Stored
	parseErr error
	attempt  int
	seq      uint64 // stream sequence
	// handed marks a hand-off (Local): m is nil; at is when it was handed.
	handed bool
	at     time.Time
}

// receive parses a message as it arrives, shows it to Observe and acks it
// at once if it is not of the handled types. It reports whether the message
// is to be handled (or given up, unparsable).
func (r *runner) receive(ctx context.Context, m jetstream.Msg) (delivery, bool) {
	d := delivery{m: m, attempt: 1}
	if d.ev, d.parseErr = events.ParseStored(m.Data()); d.parseErr != nil {
		return d, true
	}
	if meta, err := m.Metadata(); err == nil {
		d.attempt, d.seq = int(meta.NumDelivered), meta.Sequence.Stream
	}
	if r.h.Observe != nil && d.seq != 0 {
		r.observe(ctx, d.ev, d.seq)
	}
	if len(r.types) > 0 && !r.types[d.ev.Type] {
		_ = m.Ack()
		return d, false
	}
	return d, true
}

// observe shows an event to the handler's Observe. A panic there is logged
// and the event goes on to be handled: what Observe keeps is a shortcut,
// which a handler reads for itself when it is missing.
func (r *runner) observe(ctx context.Context, ev events.Stored, seq uint64) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("observing an event panicked", "event", ev.ID, "type", ev.Type, "session", ev.Session, "panic", p)
		}
	}()
	r.h.Observe(ctx, ev, seq)
}

// deliver handles d and settles it; handled is called in between.
func (r *runner) deliver(ctx context.Context, d delivery, handled func()) {
	m, ev, attempt, seq := d.m, d.ev, d.attempt, d.seq
	if d.parseErr != nil {
		handled()
		r.giveUp(ctx, m, events.Stored{}, 1, Permanent(d.parseErr))
		return
	}
	// The handler continues the trace of the append that stored the event
	// (the ledger puts its context on the stored message).
	ctx, span := tracing.Tracer("consume").Start(tracing.Extract(ctx, nats.Header(m.Headers())), "rath.handle "+r.h.Name,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", m.Subject()),
			attribute.String("rath.session", ev.Session), attribute.Int64("rath.seq", int64(ev.Seq)),
			attribute.String("rath.event.type", ev.Type), attribute.String("rath.event.id", ev.ID), attribute.Int("rath.attempt", attempt)))
	defer span.End()
	err := r.handle(context.WithValue(ctx, attemptKey{}, attempt), ev)
	handled()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	switch {
	case err == nil:
		r.failures.done(seq)
		r.logHandled(ctx, ev, false)
		if err := m.DoubleAck(ctx); err != nil {
			r.log.Warn("ack lost; the event will be redelivered", "event", ev.ID, "err", err)
		}
	case IsWaiting(err) && !IsPermanent(err):
		delay := retryDelay(attempt)
		r.log.Warn("handler waiting; retrying", "event", ev.ID, "type", ev.Type, "session", ev.Session, "attempt", attempt, "retry_in", delay, "err", err)
		_ = m.NakWithDelay(delay)
	case IsPermanent(err) || r.failures.add(seq) >= r.h.MaxAttempts:
		r.failures.done(seq)
		r.giveUp(ctx, m, ev, attempt, err)
	default:
		delay := retryDelay(attempt)
		r.log.Warn("handler failed; retrying", "event", ev.ID, "type", ev.Type, "session", ev.Session, "attempt", attempt, "retry_in", delay, "err", err)
		_ = m.NakWithDelay(delay)
	}
}

// logHandled logs, at debug level, that ev was handled, and whether from a
// hand-off (Local) or its delivery: a test counts the handlings.
func (r *runner) logHandled(ctx context.Context, ev events.Stored, handed bool) {
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("handled", "event", ev.ID, "type", ev.Type, "session", ev.Session, "seq", ev.Seq, "handed", handed)
	}
}

// retryDelay is how long the delivery attempt waits before the next: 100 ms,
// doubling, at most 10 s.
func retryDelay(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(max(attempt, 1)-1, 7), 10*time.Second)
}

// handle runs the handler (its shard keeps the delivery alive meanwhile).
func (r *runner) handle(ctx context.Context, ev events.Stored) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("handler panicked: %v", p))
		}
	}()
	return r.h.Handle(ctx, ev)
}

// giveUp dead-letters the event, records the failure in its session and ends
// its delivery. If either record cannot be written the event is retried
// later instead: a failure is never silent.
func (r *runner) giveUp(ctx context.Context, m jetstream.Msg, ev events.Stored, attempts int, cause error) {
	subject := events.DeadSubject(r.h.Name)
	dead := nats.NewMsg(subject)
	dead.Data = m.Data()
	dead.Header.Set("Rath-Handler", r.h.Name)
	dead.Header.Set("Rath-Error", cause.Error())
	dead.Header.Set("Rath-Attempts", strconv.Itoa(attempts))
	dead.Header.Set("Rath-Subject", m.Subject())
	if _, err := r.js.PublishMsg(ctx, dead, jetstream.WithMsgID(r.h.Name+"/"+ev.ID)); err != nil {
		r.log.Error("dead letter not stored; retrying later", "event", ev.ID, "err", err)
		_ = m.NakWithDelay(10 * time.Second)
		return
	}
	if ev.Session != "" && r.onFailure != nil {
		f := events.HandlerFailed{Handler: r.h.Name, EventID: ev.ID, EventType: ev.Type, Attempts: attempts, Error: cause.Error(), DeadLetter: subject}
		if err := r.onFailure(ctx, ev, f); err != nil {
			r.log.Error("failure not recorded in the session; retrying later", "event", ev.ID, "session", ev.Session, "err", err)
			_ = m.NakWithDelay(10 * time.Second)
			return
		}
	}
	r.log.Error("handler gave up", "event", ev.ID, "type", ev.Type, "session", ev.Session, "attempts", attempts, "err", cause)
	_ = m.TermWithReason(truncate(cause.Error(), 256))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
