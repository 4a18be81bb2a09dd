package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/session-ledger/service"
)

// Watch a session: its history, then each event as the ledger stores it.
// A message someone else publishes on the live subject is not shown; it is
// reported to the WithWarnings function.
func ExampleClient_Watch() {
	dir, _ := os.MkdirTemp("", "rath-example")
	defer os.RemoveAll(dir)
	ns, _ := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", StoreDir: dir})
	defer ns.Shutdown()
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- service.Run(ctx, nc, service.ConfigIn(dir), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { stop(); <-done }()

	c, _ := client.New(nc)
	c.Start(ctx, "watched", events.SessionStarted{Task: "fix the failing test"})
	enough := errors.New("enough")
	err := c.Watch(ctx, "watched", func(ev events.Stored) error {
		fmt.Println(ev.Seq, ev.Type)
		switch ev.Seq {
		case 1: // the history is read once the live subscription is in place
			live := strings.TrimSuffix(events.LiveFilter(events.DefaultTenant, "watched"), ">") + events.TokenConversation
			nc.Publish(live, []byte("garbage"))
			c.Emit(ctx, "watched", &events.ChunkAppended{Role: events.RoleUser, Content: "hi"})
		case 2:
			return enough
		}
		return nil
	}, client.WithWarnings(func(w client.Warning) {
		fmt.Println("skipped:", errors.Is(w.Err, client.ErrNotEvent))
	}))
	fmt.Println(err)
	// Output:
	// 1 rath.session.started
	// skipped: true
	// 2 rath.conversation.chunk.appended
	// enough
}
