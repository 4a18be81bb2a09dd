package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
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

// A permission refusal from before AttachWait (another request of the same
// connection) is not taken for the identity's refusal of the streams: a
// service whose streams appear later still attaches.
func TestAttachWaitIgnoresAnEarlierRefusal(t *testing.T) {
	ns, admin := natstest.Start(t)
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err := nc.Publish("$JS.API.STREAM.CREATE.NOT_ITS_OWN", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 10*time.Second, "the refusal of a publish", func() (bool, string) {
		return errors.Is(nc.LastError(), nats.ErrPermissionViolation), fmt.Sprint(nc.LastError())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attached := make(chan error, 1)
	go func() {
		_, err := eventstore.AttachWait(ctx, nc)
		attached <- err
	}()
	// The ledger creates the streams after the service began to wait.
	if _, err := eventstore.Open(ctx, admin, eventstore.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := <-attached; err != nil {
		t.Fatalf("attach after an earlier refusal: %v", err)
	}
}
