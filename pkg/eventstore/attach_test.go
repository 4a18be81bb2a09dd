package eventstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/eventstore"
)

// A request of AttachWait that is never answered (a node that hangs, a
// reply lost to a reconnect) costs one bounded attempt, not the caller's
// whole deadline: the attempt after it attaches. The client here talks to
// a server without JetStream whose JetStream API is relayed to the real one,
// except the first request, which goes unanswered.
func TestAttachWaitAsksAgainWhenARequestGoesUnanswered(t *testing.T) {
	back := open(t).Conn()
	front, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go front.Start()
	t.Cleanup(front.Shutdown)
	if !front.ReadyForConnections(10 * time.Second) {
		t.Fatal("front server not ready")
	}
	relay, err := nats.Connect(front.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	var asked atomic.Int64
	if _, err := relay.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if asked.Add(1) == 1 {
			return // lost
		}
		if r, err := back.Request(m.Subject, m.Data, 10*time.Second); err == nil {
			_ = m.Respond(r.Data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(front.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := eventstore.AttachWait(ctx, nc); err != nil {
		t.Fatalf("attach with the first request unanswered: %v", err)
	}
	if n := asked.Load(); n < 7 {
		t.Fatalf("%d requests, want the six of an attempt after the lost one", n)
	}
}
