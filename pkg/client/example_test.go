package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/services/session-ledger/service"
)

// Start a session, append to it, fork it at step 2, and read both states.
// (The example runs its own embedded NATS and ledger; a program would
// connect to `rath up` instead.)
func Example() {
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
	ack, _ := c.Start(ctx, "example", events.SessionStarted{Task: "fix the failing test"})
	c.Emit(ctx, ack.Session, &events.ChunkAppended{Role: events.RoleUser, Content: "TestParse fails"})
	c.Emit(ctx, ack.Session, &events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m1", TokensIn: 800, TokensOut: 60})

	fork, _ := c.Fork(ctx, api.ForkRequest{Parent: "example", At: 2, ID: "example-b", Reason: "try another strategy"})
	c.Emit(ctx, fork.Session, &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "plan B"})

	for _, id := range []string{"example", "example-b"} {
		st, _ := c.State(ctx, id)
		rep, _ := c.Verify(ctx, id)
		fmt.Printf("%s: head %d, %d chunks, %d tokens in, parent %q at %d, chain ok %v\n",
			id, st.Seq, len(st.Chunks), st.Usage.Total.In, st.Lineage.Parent, st.Lineage.ForkSeq, rep.OK)
	}
	// Output:
	// example: head 3, 1 chunks, 800 tokens in, parent "" at 0, chain ok true
	// example-b: head 4, 2 chunks, 0 tokens in, parent "example" at 2, chain ok true
}
