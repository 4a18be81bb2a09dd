package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/rathwatermill"
)

// The worker's names. Consumer is its durable feed: renaming it makes a
// new feed, which starts again at the tenant's first event.
const (
	Consumer = "watermill-worker"
	Handler  = "do-work"
	// Assignee is whose work the worker takes (rath.work.pending's assignee).
	Assignee = "watermill-worker"
	// Attempts is how often a work item is tried before it is poisoned.
	Attempts = 3
)

// errUnknownKind is a failure no retry cures; it is poisoned after the
// attempts like any other error (Watermill's Retry does not tell them apart).
var errUnknownKind = errors.New("no handler for this kind of work")

// Run runs the worker's router until ctx ends, then closes it (the event in
// hand is finished or given back to the feed).
func Run(ctx context.Context, c *client.Client, log *slog.Logger) error {
	router, err := NewRouter(c, watermill.NewSlogLogger(log))
	if err != nil {
		return err
	}
	return router.Run(ctx)
}

// NewRouter wires the worker: the session events of the client's tenant
// in, rath.work.done (or, for work it gives up on, rath.handler.failed) out
// into the same session, through the ledger.
func NewRouter(c *client.Client, log watermill.LoggerAdapter) (*message.Router, error) {
	sub, err := rathwatermill.NewSubscriber(c, rathwatermill.SubscriberConfig{
		Consumer: Consumer,
		Types:    []string{events.TypeWorkPending},
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	pub, err := rathwatermill.NewPublisher(c, rathwatermill.PublisherConfig{})
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, log)
	if err != nil {
		return nil, err
	}
	// The poison queue is the session itself: a work item the handler gives
	// up on becomes rath.handler.failed in the session it came from.
	poison, err := middleware.PoisonQueue(rathwatermill.NewPoisonPublisher(c, Attempts), rathwatermill.TopicAll)
	if err != nil {
		return nil, err
	}
	retry := middleware.Retry{MaxRetries: Attempts - 1, InitialInterval: 50 * time.Millisecond, Multiplier: 2, Logger: log}
	// Outermost first: poison what Retry gave up on; publish the handler's
	// outputs inside Retry, so a refusal is retried and poisoned too; mark
	// them with the input's correlation ID before they are published.
	router.AddMiddleware(poison, retry.Middleware, rathwatermill.PublishInHandler(pub, rathwatermill.TopicAll), middleware.CorrelationID, middleware.Recoverer)
	router.AddHandler(Handler, rathwatermill.TopicAll, sub, rathwatermill.TopicAll, pub, doWork)
	return router, nil
}

// doWork takes one rath.work.pending: work of another assignee is not its
// business; a greeting is done; any other kind fails.
func doWork(msg *message.Message) ([]*message.Message, error) {
	var w events.WorkPending
	if err := json.Unmarshal(msg.Payload, &w); err != nil {
		return nil, fmt.Errorf("work %s: %w", msg.Metadata.Get(rathwatermill.MetadataEventID), err)
	}
	if w.Assignee != Assignee {
		return nil, nil
	}
	if w.Kind != "greet" {
		return nil, fmt.Errorf("work %s of kind %q: %w", w.WorkID, w.Kind, errUnknownKind)
	}
	data, err := json.Marshal(events.WorkDone{WorkID: w.WorkID, Outcome: "hello, " + w.Description})
	if err != nil {
		return nil, err
	}
	input := msg.Metadata.Get(rathwatermill.MetadataEventID)
	// The output's UUID is derived from its input, so a redelivered input
	// proposes the same event, which the ledger stores once.
	out := message.NewMessage(events.DerivedID(Handler, input, "done"), data)
	out.Metadata.Set(rathwatermill.MetadataSession, msg.Metadata.Get(rathwatermill.MetadataSession))
	out.Metadata.Set(rathwatermill.MetadataType, events.TypeWorkDone)
	out.Metadata.Set(rathwatermill.MetadataCausation, input)
	return []*message.Message{out}, nil
}
