// Package timer is Rath's durable timers (ADR 0026): a deadline recorded in
// a session (an approval's, a workflow's wall time) is set as a JetStream
// message schedule on RATH_TIMERS, which the server keeps across restarts
// and publishes once, at its time, to the timer's fired subject; a durable
// consumer turns each fired timer into the event it stands for, with an ID
// derived from the timer, after checking that the deadline is still the
// session's. A timer set twice, fired twice or fired after the session
// moved on is recorded at most once.
package timer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Consumer is the durable consumer of fired timers on RATH_TIMERS (not on
// RATH_SESSIONS, so not among auth.Durables: internal/auth permits it by
// name, auth.TimersDurable). Never derive it from code: a new name is a new
// consumer.
const Consumer = "timers"

// Source is the CloudEvents source of what fired timers record. It is not
// the selector's, so the selector routes on expiries like on any event.
const Source = "rath/timer"

// Kinds of timer.
const (
	KindApproval = "approval"
	KindWallTime = "wall_time"
)

// Timer is one deadline of a session: what a schedule carries and what
// fires.
type Timer struct {
	Session  string `json:"session"`
	Kind     string `json:"kind"`
	Deadline string `json:"deadline"`
	// ApprovalID is the approval that expires (KindApproval).
	ApprovalID string `json:"approval_id,omitempty"`
	// Budget is the wall time budget, for the close's reason (KindWallTime).
	Budget string `json:"budget,omitempty"`
}

// name is the timer's subject token: one timer per approval, one wall time
// per session. Setting a timer again replaces it.
func (t Timer) name() string {
	if t.Kind == KindApproval {
		return t.ApprovalID
	}
	return t.Kind
}

// Timers sets timers and records the ones that fire.
type Timers struct {
	js     jetstream.JetStream
	c      *client.Client
	states *fold.Cache
	log    *slog.Logger
	now    func() time.Time
}

// New returns timers that record through c (its source should be Source)
// and read sessions from states.
func New(js jetstream.JetStream, c *client.Client, states *fold.Cache, log *slog.Logger) *Timers {
	return &Timers{js: js, c: c, states: states, log: log.With("component", "timers"), now: time.Now}
}

// Set sets a timer, replacing any earlier one of the same name in the
// session. A deadline already passed fires at once.
func (t *Timers) Set(ctx context.Context, tm Timer) error {
	at, err := events.ParseDeadline(tm.Deadline)
	if err != nil {
		return fmt.Errorf("timer %s of %s: %w", tm.name(), tm.Session, err)
	}
	body, err := json.Marshal(tm)
	if err != nil {
		return fmt.Errorf("timer %s of %s: %w", tm.name(), tm.Session, err)
	}
	m := nats.NewMsg(events.TimerSubject(tm.Session, tm.name()))
	m.Data = body
	if _, err := t.js.PublishMsg(ctx, m, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(events.TimerFiredSubject(tm.Session, tm.name()))); err != nil {
		return fmt.Errorf("set timer %s of %s at %s: %w", tm.name(), tm.Session, tm.Deadline, err)
	}
	t.log.Info("timer set", "session", tm.Session, "kind", tm.Kind, "timer", tm.name(), "deadline", tm.Deadline)
	return nil
}

// Arm sets the timers an event of a session asks for: an approval
// requested with a deadline, an escalation's next deadline, a workflow
// session's wall time when it starts (or is forked), and a fork's pending
// approvals with a deadline. head is the session's
// state now; wf its workflow (nil: none). An approval that is no longer
// pending with that deadline needs no timer.
func (t *Timers) Arm(ctx context.Context, ev events.Stored, head *session.State, wf *workflow.Workflow) error {
	switch ev.Type {
	case events.TypeApprovalRequested, events.TypeApprovalExpired:
		d, err := ev.Decode()
		if err != nil {
			return nil // the ledger validated it; nothing to arm
		}
		var id string
		switch d := d.(type) {
		case *events.ApprovalRequested:
			id = d.ApprovalID
		case *events.ApprovalExpired:
			id = d.ApprovalID
		}
		a, ok := head.Approvals[id]
		if !ok || a.Outcome != "" || a.Deadline == "" {
			return nil
		}
		return t.Set(ctx, Timer{Session: ev.Session, Kind: KindApproval, ApprovalID: id, Deadline: a.Deadline})
	case events.TypeSessionStarted, events.TypeSessionForked:
		if head.Status.Ended() {
			return nil
		}
		// A fork holds its parent's pending approvals with their
		// deadlines: they are its own to time out.
		for id, a := range head.Approvals {
			if ev.Type == events.TypeSessionForked && a.Outcome == "" && a.Deadline != "" {
				if err := t.Set(ctx, Timer{Session: ev.Session, Kind: KindApproval, ApprovalID: id, Deadline: a.Deadline}); err != nil {
					return err
				}
			}
		}
		if wf == nil || wf.Budgets.WallTime <= 0 || head.Created.IsZero() {
			return nil
		}
		return t.Set(ctx, Timer{Session: ev.Session, Kind: KindWallTime, Deadline: events.DeadlineText(head.Created.Add(wf.Budgets.WallTime)),
			Budget: wf.Budgets.WallTime.String()})
	}
	return nil
}

// errEarly is a fired timer whose deadline this clock has not reached: it
// is retried at the deadline, never recorded early (nor dropped).
var errEarly = errors.New("timer fired before its deadline by this clock")

// fire records what a fired timer stands for, if the session still waits
// for it: an approval's expiry (its on_timeout from the state), or the
// close of a session past its wall time. A moot timer (the approval was
// decided, the session closed) records nothing.
func (t *Timers) fire(ctx context.Context, tm Timer) error {
	deadline, err := events.ParseDeadline(tm.Deadline)
	if err != nil {
		return fmt.Errorf("timer of %s: %w", tm.Session, err)
	}
	if t.now().Before(deadline) {
		return errEarly
	}
	st, err := t.states.State(ctx, tm.Session, 0)
	if api.CodeOf(err) == api.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Status.Ended() {
		t.log.Info("timer moot: the session ended", "session", tm.Session, "kind", tm.Kind, "deadline", tm.Deadline)
		return nil
	}
	var data any
	switch tm.Kind {
	case KindApproval:
		a, ok := st.Approvals[tm.ApprovalID]
		if !ok || a.Outcome != "" || a.Deadline != tm.Deadline {
			t.log.Info("timer moot: the approval was decided or its deadline moved", "session", tm.Session, "approval", tm.ApprovalID, "deadline", tm.Deadline)
			return nil
		}
		x := &events.ApprovalExpired{ApprovalID: tm.ApprovalID, Deadline: tm.Deadline, OnTimeout: a.OnTimeout, Approver: a.Approver}
		if x.OnTimeout == "" {
			x.OnTimeout = events.TimeoutReject
		}
		if x.OnTimeout == events.TimeoutEscalate {
			if a.EscalateTo == "" || a.EscalateDeadline == "" {
				x.OnTimeout = events.TimeoutReject
			} else {
				x.EscalatedTo, x.NextDeadline = a.EscalateTo, a.EscalateDeadline
			}
		}
		data = x
	case KindWallTime:
		data = &events.SessionClosed{Outcome: workflow.OutcomeBudget,
			Reason: fmt.Sprintf("budget wall_time=%s reached at %s (timer)", tm.Budget, tm.Deadline)}
	default:
		return fmt.Errorf("timer of %s: unknown kind %q", tm.Session, tm.Kind)
	}
	_, err = t.c.Emit(ctx, tm.Session, data, events.WithID(events.DerivedID(tm.Session+"/"+tm.name()+"@"+tm.Deadline, "timer")))
	switch api.CodeOf(err) {
	case api.CodeClosed, api.CodeApprovalSettled, api.CodeApprovalExpired, api.CodeNotFound:
		// Decided, or closed, between the check and the append.
		t.log.Info("timer moot", "session", tm.Session, "kind", tm.Kind, "deadline", tm.Deadline, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("timer %s of %s at %s: %w", tm.name(), tm.Session, tm.Deadline, err)
	}
	t.log.Info("timer fired", "session", tm.Session, "kind", tm.Kind, "timer", tm.name(), "deadline", tm.Deadline)
	return nil
}

// maxDeliver bounds the deliveries of one fired timer that keeps failing;
// its last error is logged.
const maxDeliver = 20

// Run records fired timers until ctx ends, then drains. A fired timer is
// acked once recorded (or found moot), retried after a growing delay when
// the ledger could not be asked, and at its deadline when it fired early.
func (t *Timers) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(wait*2, 2*time.Second) {
		cons, err = t.js.CreateOrUpdateConsumer(ctx, events.StreamTimers, jetstream.ConsumerConfig{
			Durable:       Consumer,
			Description:   "Rath timers: record fired timers",
			FilterSubject: events.TimersFiredWildcard,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 64,
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !eventstore.Forming(err) {
			return fmt.Errorf("timers consumer: %w", err)
		}
		t.log.Info("waiting for the timers stream", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	cc, err := cons.Consume(func(m jetstream.Msg) { t.deliver(hctx, m) },
		jetstream.PullMaxMessages(16), jetstream.PullExpiry(10*time.Second), jetstream.PullHeartbeat(2*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { t.log.Debug("timers consumer", "err", err) }))
	if err != nil {
		return fmt.Errorf("consume timers: %w", err)
	}
	<-ctx.Done()
	grace := time.AfterFunc(10*time.Second, hcancel)
	defer grace.Stop()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// deliver handles one fired timer and acks, naks or terminates it.
func (t *Timers) deliver(ctx context.Context, m jetstream.Msg) {
	var tm Timer
	if err := json.Unmarshal(m.Data(), &tm); err != nil || tm.Session == "" {
		t.log.Error("fired timer unreadable; dropped", "subject", m.Subject(), "err", err)
		_ = m.TermWithReason("unreadable timer")
		return
	}
	err := t.fire(ctx, tm)
	if err == nil {
		_ = m.Ack()
		return
	}
	attempts := uint64(1)
	if md, merr := m.Metadata(); merr == nil {
		attempts = md.NumDelivered
	}
	if errors.Is(err, errEarly) {
		deadline, _ := events.ParseDeadline(tm.Deadline)
		_ = m.NakWithDelay(time.Until(deadline) + 10*time.Millisecond)
		return
	}
	if attempts >= maxDeliver {
		t.log.Error("fired timer not recorded; given up", "session", tm.Session, "kind", tm.Kind, "deadline", tm.Deadline, "attempts", attempts, "err", err)
		_ = m.TermWithReason(err.Error())
		return
	}
	t.log.Warn("fired timer not recorded yet; retrying", "session", tm.Session, "kind", tm.Kind, "attempt", attempts, "err", err)
	_ = m.NakWithDelay(min(100*time.Millisecond<<min(attempts, 6), 5*time.Second))
}
