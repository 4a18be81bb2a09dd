package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// requestTimeout bounds the handling of one request.
const requestTimeout = 30 * time.Second

// Serve answers the memory API on nc, in the queue group memoryapi.Queue,
// with at most inflight requests handled at once, until ctx ends; then it
// drains its subscriptions and waits for the requests in hand.
func (m *Memory) Serve(ctx context.Context, nc *nats.Conn, inflight int, log *slog.Logger) error {
	s := &server{ctx: context.WithoutCancel(ctx), nc: nc, sem: make(chan struct{}, inflight), log: log}
	handlers := map[string]func(context.Context, []byte) (any, error){
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
	}
	var subs []*nats.Subscription
	for req, h := range handlers {
		sub, err := nc.QueueSubscribe(memoryapi.RequestFilter(req), memoryapi.Queue, func(msg *nats.Msg) { s.dispatch(msg, h) })
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return fmt.Errorf("subscribe %s: %w", req, err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	log.Info("memory serving", "subjects", events.MemoryPrefix+"<tenant>.<user>.<request>", "queue", memoryapi.Queue)
	<-ctx.Done()
	// Drain: stop taking requests, take the ones queued, then wait until
	// every handler has replied.
	closed := make([]<-chan nats.SubStatus, len(subs))
	for i, sub := range subs {
		closed[i] = sub.StatusChanged(nats.SubscriptionClosed)
		_ = sub.Drain()
	}
	for _, c := range closed {
		select {
		case <-c:
		case <-time.After(requestTimeout):
		}
	}
	s.wg.Wait()
	return nil
}

type server struct {
	ctx context.Context
	nc  *nats.Conn
	sem chan struct{}
	wg  sync.WaitGroup
	log *slog.Logger
}

// handler adapts a typed operation to a JSON request body.
func handler[Req, Rep any](op func(context.Context, Req) (Rep, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, body []byte) (any, error) {
		var req Req
		if len(body) == 0 {
			return nil, memoryapi.Errorf(memoryapi.CodeMalformed, "empty request body: want a JSON object")
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, memoryapi.Errorf(memoryapi.CodeMalformed, "request body: %v", err)
		}
		return op(ctx, req)
	}
}

// dispatch handles one request on its own goroutine, at most cap(sem) at
// once: a request waits for a ledger append, and many are in flight.
func (s *server) dispatch(msg *nats.Msg, h func(context.Context, []byte) (any, error)) {
	s.wg.Add(1)
	s.sem <- struct{}{}
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
		defer cancel()
		// The server let the asker publish on this subject only under its
		// own name: that names who asks.
		p, _, err := events.ParseRequest(msg.Subject, events.MemoryPrefix)
		if err != nil {
			s.reply(msg, nil, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err))
			return
		}
		rep, err := h(events.WithPrincipal(ctx, p), msg.Data)
		s.reply(msg, rep, err)
	}()
}

func (s *server) reply(msg *nats.Msg, rep any, err error) {
	if msg.Reply == "" {
		return
	}
	out := nats.NewMsg(msg.Reply)
	if err != nil {
		e := asAPIError(err)
		if e.Code == memoryapi.CodeUnavailable {
			s.log.Warn("memory request failed", "subject", msg.Subject, "err", err)
		}
		out.Header.Set(api.HeaderError, string(e.Code))
		out.Data, _ = json.Marshal(api.ErrorReply{Error: e})
	} else if out.Data, err = json.Marshal(rep); err != nil {
		e := memoryapi.Errorf(memoryapi.CodeUnavailable, "encode reply: %v", err)
		out.Header.Set(api.HeaderError, string(e.Code))
		out.Data, _ = json.Marshal(api.ErrorReply{Error: e})
	}
	if len(out.Data) > int(s.nc.MaxPayload())-4096 {
		e := memoryapi.Errorf(api.CodeTooLarge, "the reply to %s would be %d bytes, above the server's message limit of %d", msg.Subject, len(out.Data), s.nc.MaxPayload())
		out.Header = nats.Header{}
		out.Header.Set(api.HeaderError, string(e.Code))
		out.Data, _ = json.Marshal(api.ErrorReply{Error: e})
	}
	if err := msg.RespondMsg(out); err != nil {
		s.log.Warn("memory reply lost", "subject", msg.Subject, "err", err)
	}
}

// asAPIError maps an error to its reply: an *api.Error in its chain keeps
// its code (the ledger's refusals pass through) with the whole message;
// anything else is unavailable. This is the only mapping of the transport.
func asAPIError(err error) *api.Error {
	var e *api.Error
	if errors.As(err, &e) {
		return &api.Error{Code: e.Code, Message: err.Error()}
	}
	return &api.Error{Code: memoryapi.CodeUnavailable, Message: err.Error()}
}
