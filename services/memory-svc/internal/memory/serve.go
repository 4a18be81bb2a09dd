package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/reqrep"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// requestTimeout bounds the handling of one request.
const requestTimeout = 30 * time.Second

// Serve answers the memory API on nc, in the queue group memoryapi.Queue,
// with at most inflight requests handled at once, until ctx ends; then it
// drains its subscriptions and waits for the requests in hand.
func (m *Memory) Serve(ctx context.Context, nc *nats.Conn, inflight int, log *slog.Logger) error {
	srv, err := reqrep.Start(ctx, nc, reqrep.Config{
		Prefix: events.MemoryPrefix, Queue: memoryapi.Queue, Service: "memory", Inflight: inflight, Timeout: requestTimeout, Log: log,
	}, map[string]reqrep.Handler{
		memoryapi.ReqAdd:     handler(m.Add),
		memoryapi.ReqRecall:  handler(m.Recall),
		memoryapi.ReqSearch:  handler(m.Search),
		memoryapi.ReqShow:    handler(m.Show),
		memoryapi.ReqHistory: handler(m.History),
		memoryapi.ReqRetract: handler(m.Retract),
		memoryapi.ReqRestore: handler(m.Restore),
		memoryapi.ReqReaders: handler(m.Readers),
		memoryapi.ReqJustify: handler(m.Justify),
		memoryapi.ReqPresent: handler(m.Present),
	})
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	log.Info("memory serving", "subjects", events.MemoryPrefix+"<tenant>.<user>.<request>", "queue", memoryapi.Queue)
	<-ctx.Done()
	srv.Stop()
	return nil
}

// handler adapts a typed operation to a JSON request body.
func handler[Req, Rep any](op func(context.Context, Req) (Rep, error)) reqrep.Handler {
	return func(ctx context.Context, msg *nats.Msg) (any, error) {
		var req Req
		if len(msg.Data) == 0 {
			return nil, memoryapi.Errorf(memoryapi.CodeMalformed, "empty request body: want a JSON object")
		}
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			return nil, memoryapi.Errorf(memoryapi.CodeMalformed, "request body: %v", err)
		}
		return op(ctx, req)
	}
}
