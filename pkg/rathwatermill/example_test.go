package rathwatermill_test

import (
	"context"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/rathwatermill"
)

// A worker of a tenant's user (no JetStream access): the tool calls of
// every session of its tenant in, one event at a time, resumed after a
// restart; what it gives up on recorded in the session. Not run: it needs a
// Rath runtime (examples/watermill-worker runs one in its test).
func ExampleNewSubscriber() {
	opts, me, err := client.Credentials(".rath/data/creds/client.nk")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	c, err := client.New(nc, client.As(me))
	if err != nil {
		log.Fatal(err)
	}
	sub, err := rathwatermill.NewSubscriber(c, rathwatermill.SubscriberConfig{
		Consumer: "audit-tool-calls", // the durable feed: a constant
		Types:    []string{events.TypeToolRequested},
	})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := rathwatermill.NewPublisher(c, rathwatermill.PublisherConfig{})
	if err != nil {
		log.Fatal(err)
	}
	logger := watermill.NewStdLogger(false, false)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		log.Fatal(err)
	}
	poison, err := middleware.PoisonQueue(rathwatermill.NewPoisonPublisher(c, 3), rathwatermill.TopicAll)
	if err != nil {
		log.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: 2, InitialInterval: 100 * time.Millisecond, Logger: logger}
	router.AddMiddleware(poison, retry.Middleware, rathwatermill.PublishInHandler(pub, rathwatermill.TopicAll), middleware.CorrelationID)
	router.AddHandler("audit", rathwatermill.TopicAll, sub, rathwatermill.TopicAll, pub, func(msg *message.Message) ([]*message.Message, error) {
		// msg.Payload is the event's data; its metadata names the session,
		// type, sequence and event ID (rathwatermill.Metadata*).
		log.Println(msg.Metadata.Get(rathwatermill.MetadataSession), msg.Metadata.Get(rathwatermill.MetadataSeq), string(msg.Payload))
		return nil, nil
	})
	if err := router.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
