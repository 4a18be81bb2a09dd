package rathwatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Marshaler turns messages into proposals (default JSONMarshaler).
	Marshaler Marshaler
	// StartMissing starts a session that does not exist yet (a
	// rath.session.started with Task, the event ID derived from the
	// session) before proposing into it. Off, a message for a missing
	// session is refused with session_not_found.
	StartMissing bool
	// Task is the task of the sessions StartMissing starts.
	Task string
}

// Publisher proposes messages as events through the ledger's append: each
// is validated, sequenced and signed like any other event, and a refusal
// is returned as an error wrapping the ledger's *ledgerapi.Error (match it
// with errors.Is and the ledgerapi sentinels). It is a message.Publisher.
type Publisher struct {
	c   *client.Client
	cfg PublisherConfig

	mu      sync.RWMutex // held for reading by each Publish, for writing by Close
	closed  bool
	pending sync.WaitGroup
}

// NewPublisher returns a publisher proposing as the client's principal.
func NewPublisher(c *client.Client, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Marshaler == nil {
		cfg.Marshaler = JSONMarshaler{}
	}
	return &Publisher{c: c, cfg: cfg}, nil
}

// Publish proposes each message, in order, into the session topic names
// (for TopicAll, the session of the message's MetadataSession), and
// returns once the ledger stored it. It stops at the first message refused
// or not stored, returning its error; the messages before it are stored.
// The message's UUID determines the event ID, so publishing it again into
// the same session stores nothing twice.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	p.pending.Add(1)
	p.mu.RUnlock()
	defer p.pending.Done()
	for _, msg := range msgs {
		if err := p.publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

func (p *Publisher) publish(topic string, msg *message.Message) error {
	sessionID := topic
	if topic == TopicAll {
		sessionID = msg.Metadata.Get(MetadataSession)
		if sessionID == "" {
			return fmt.Errorf("publish message %s to %q: it names no session (metadata %s)", msg.UUID, TopicAll, MetadataSession)
		}
	}
	if err := events.ValidateSessionID(sessionID); err != nil {
		return fmt.Errorf("publish message %s: %w", msg.UUID, err)
	}
	ev, err := p.cfg.Marshaler.Marshal(sessionID, msg)
	if err != nil {
		return fmt.Errorf("publish to session %s: %w", sessionID, err)
	}
	ctx := msg.Context()
	_, err = p.c.Append(ctx, ev)
	if errors.Is(err, api.ErrNotFound) && p.cfg.StartMissing {
		if err = p.start(ctx, sessionID); err == nil {
			_, err = p.c.Append(ctx, ev)
		}
	}
	if err != nil {
		return fmt.Errorf("publish message %s to session %s: %w", msg.UUID, sessionID, err)
	}
	return nil
}

// start starts a session, once however many publishers try at once.
func (p *Publisher) start(ctx context.Context, sessionID string) error {
	_, err := p.c.Start(ctx, sessionID, events.SessionStarted{Task: p.cfg.Task},
		events.WithID(events.DerivedID("watermill-start", sessionID)), events.WithSource("rath/watermill"))
	if errors.Is(err, api.ErrExists) {
		return nil
	}
	return err
}

// Close refuses further messages and waits for those being published.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.pending.Wait()
	return nil
}

// PoisonPublisher records poisoned messages in their sessions: given to
// Watermill's PoisonQueue middleware, it turns each message the handler
// gave up on into a rath.handler.failed event in the message's session
// (handler, event ID and type, attempts, the reason), so the failure is
// part of the session's record, signed like the rest (a closed session
// takes no record: the message is dropped with a warning). The topic
// PoisonQueue publishes to is not used: the session is the queue.
type PoisonPublisher struct {
	c *client.Client
	// attempts is the attempts recorded when the message does not say.
	attempts int
}

// NewPoisonPublisher returns a poison publisher proposing as the client's
// principal. attempts is how many times a handler tries a message before
// it is poisoned (the Retry middleware's MaxRetries + 1), recorded as the
// event's attempts; 0 records the feed's deliveries.
func NewPoisonPublisher(c *client.Client, attempts int) *PoisonPublisher {
	return &PoisonPublisher{c: c, attempts: attempts}
}

// Publish records each message as rath.handler.failed in its session.
func (p *PoisonPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		if err := p.record(msg); err != nil {
			return err
		}
	}
	return nil
}

func (p *PoisonPublisher) record(msg *message.Message) error {
	sessionID, eventID, typ := msg.Metadata.Get(MetadataSession), msg.Metadata.Get(MetadataEventID), msg.Metadata.Get(MetadataType)
	if sessionID == "" || eventID == "" || typ == "" {
		return fmt.Errorf("record poisoned message %s: it is not an event a Subscriber delivered (no %s, %s or %s metadata)", msg.UUID, MetadataSession, MetadataEventID, MetadataType)
	}
	handler := msg.Metadata.Get(middleware.PoisonedHandlerKey)
	if handler == "" {
		handler = "watermill"
	}
	reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey)
	if reason == "" {
		reason = "poisoned"
	}
	attempts := p.attempts
	if attempts <= 0 {
		attempts, _ = strconv.Atoi(msg.Metadata.Get(MetadataDelivered))
		attempts = max(attempts, 1)
	}
	opts := []events.Option{
		// One record per handler and event, however often it is poisoned.
		events.WithID(events.DerivedID("watermill-poison", handler, eventID)),
		events.WithSource("rath/watermill/" + handler),
		events.WithCausation(eventID),
	}
	if c := msg.Metadata.Get(MetadataCorrelation); c != "" {
		opts = append(opts, events.WithCorrelation(c))
	}
	data := events.HandlerFailed{Handler: handler, EventID: eventID, EventType: typ, Attempts: attempts, Error: reason}
	_, err := p.c.Emit(msg.Context(), sessionID, &data, opts...)
	if errors.Is(err, api.ErrClosed) {
		// A closed session takes no record, and redelivering the message
		// would not change that.
		slog.Warn("poisoned message not recorded: its session is closed", "session", sessionID, "event", eventID, "handler", handler, "reason", reason)
		return nil
	}
	if err != nil {
		return fmt.Errorf("record poisoned message %s in session %s: %w", msg.UUID, sessionID, err)
	}
	return nil
}

// Close does nothing: each Publish returns once its events are stored.
func (p *PoisonPublisher) Close() error { return nil }

// PublishInHandler is a handler middleware that publishes the messages the
// handler returns to topic itself, inside the middleware chain, and returns
// none to the router. Watermill's router publishes a handler's messages
// after every middleware has returned, where a refusal of the ledger (a
// closed session, a schema) escapes Retry and PoisonQueue and is redelivered
// for ever; published here, it is retried and poisoned like any failure of
// the handler. Place it inside Retry and PoisonQueue, and outside
// CorrelationID, which then marks the messages before they are published.
func PublishInHandler(pub message.Publisher, topic string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				return nil, err
			}
			if len(out) == 0 {
				return nil, nil
			}
			for _, m := range out {
				if m.Context() == context.Background() {
					m.SetContext(msg.Context())
				}
			}
			if err := pub.Publish(topic, out...); err != nil {
				return nil, err
			}
			return nil, nil
		}
	}
}
