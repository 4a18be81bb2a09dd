// Package reqrep serves Rath's request/reply APIs (the ledger's
// rath.ledger.<tenant>.<user>.<op>, the memory service's
// rath.memory.<tenant>.<user>.<request>): one queue subscription per
// operation, at most a bounded number of requests handled at once, the
// asker named by the subject the server let it publish on, a deadline per
// request, replies in the one error model of pkg/ledgerapi (a Rath-Error
// header and {"error":{"code","message"}}), and a drain on shutdown that
// loses no request in hand.
package reqrep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Handler answers one request. The context names the asker
// (events.PrincipalFrom) and carries the request's deadline. A []byte
// result is sent as it is; anything else is encoded as JSON. An error is
// sent as its *api.Error (found with errors.As; anything else is
// unavailable).
type Handler func(ctx context.Context, m *nats.Msg) (any, error)

// Config is a server's subjects and limits.
type Config struct {
	// Prefix starts the request subjects: <Prefix><tenant>.<user>.<op>.
	Prefix string
	// Queue is the queue group every instance subscribes in.
	Queue string
	// Inflight bounds the requests handled at once.
	Inflight int
	// Timeout bounds the handling of one request, and the drain.
	Timeout time.Duration
	// Service names the server in its metrics (rath_requests_total).
	Service string
	// TooLarge, if set, is added to the refusal of a reply above the
	// server's message limit: what to ask for instead.
	TooLarge string
	Log      *slog.Logger
}

// Server is a running set of subscriptions.
type Server struct {
	cfg  Config
	nc   *nats.Conn
	ctx  context.Context // the requests' parent: outlives the serve context
	sem  chan struct{}   // a slot per handling goroutine, Inflight in all
	jobs chan job        // requests for an idle handling goroutine
	quit chan struct{}   // closed by Stop: idle goroutines end
	stop sync.Once
	// mu guards stopped, set by Stop before it waits, so that no handling
	// goroutine is added to wg while Stop waits for them.
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
	subs    []*nats.Subscription
}

// job is one request and its operation's handler.
type job struct {
	m *nats.Msg
	h Handler
}

// Start subscribes every operation's handler and returns once the server
// has them (a flush). Requests are handled until Stop.
func Start(ctx context.Context, nc *nats.Conn, cfg Config, handlers map[string]Handler) (*Server, error) {
	if cfg.Inflight <= 0 || cfg.Timeout <= 0 || cfg.Prefix == "" || cfg.Queue == "" || cfg.Log == nil {
		return nil, errors.New("reqrep: config needs a prefix, a queue, a log, and positive inflight and timeout")
	}
	s := &Server{cfg: cfg, nc: nc, ctx: context.WithoutCancel(ctx), sem: make(chan struct{}, cfg.Inflight),
		jobs: make(chan job), quit: make(chan struct{})}
	for op, h := range handlers {
		sub, err := nc.QueueSubscribe(cfg.Prefix+"*.*."+op, cfg.Queue, func(m *nats.Msg) { s.dispatch(m, h) })
		if err != nil {
			s.unsubscribe()
			return nil, fmt.Errorf("subscribe %s%s: %w", cfg.Prefix, op, err)
		}
		s.subs = append(s.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		s.unsubscribe()
		return nil, fmt.Errorf("subscribe %s*: %w", cfg.Prefix, err)
	}
	return s, nil
}

func (s *Server) unsubscribe() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
}

// Stop takes no more requests, answers the ones already queued, and waits
// until every handler has replied.
func (s *Server) Stop() {
	closed := make([]<-chan nats.SubStatus, len(s.subs))
	for i, sub := range s.subs {
		closed[i] = sub.StatusChanged(nats.SubscriptionClosed)
		_ = sub.Drain()
	}
	for _, c := range closed {
		select {
		case <-c:
		case <-time.After(s.cfg.Timeout):
		}
	}
	s.stop.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		close(s.quit)
	})
	s.wg.Wait()
}

// dispatch hands one request to an idle handling goroutine, or starts one:
// at most Inflight handle requests at once (a request may wait for a ledger
// append; many are in flight). A goroutine stays for the next requests
// until Stop: one per request grew its stack anew each time
// (runtime.copystack, ~3 % of the CPU of the bench's scripted sessions).
func (s *Server) dispatch(m *nats.Msg, h Handler) {
	j := job{m: m, h: h}
	select {
	case s.jobs <- j:
		return
	default:
	}
	select {
	case s.jobs <- j:
	case s.sem <- struct{}{}:
		s.mu.Lock()
		if s.stopped {
			// A subscription Stop could not drain in time: its late
			// requests are told to ask again, not handled after Stop.
			s.mu.Unlock()
			<-s.sem
			s.reply(m, nil, api.Errorf(api.CodeUnavailable, "%s is stopping; ask again", s.cfg.Service))
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.work(j)
	}
}

// work handles j, then the requests dispatch hands it, until Stop.
func (s *Server) work(j job) {
	defer func() { <-s.sem; s.wg.Done() }()
	for {
		s.handle(j.m, j.h)
		select {
		case j = <-s.jobs:
		case <-s.quit:
			return
		}
	}
}

// handle answers one request.
func (s *Server) handle(m *nats.Msg, h Handler) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	// The server let the asker publish on this subject only under its
	// own name: that names who asks.
	p, op, err := events.ParseRequest(m.Subject, s.cfg.Prefix)
	if err != nil {
		s.reply(m, nil, api.Errorf(api.CodeMalformed, "%v", err))
		return
	}
	start := time.Now()
	res, err := h(events.WithPrincipal(ctx, p), m)
	outcome := "ok"
	if err != nil {
		outcome = string(ErrorOf(err).Code)
	}
	telemetry.Request(s.cfg.Service, op, outcome, time.Since(start))
	s.reply(m, res, err)
}

// reply sends a result or an error; a reply above the server's message
// limit is refused as too large rather than lost.
func (s *Server) reply(m *nats.Msg, res any, err error) {
	if m.Reply == "" {
		return
	}
	out := nats.NewMsg(m.Reply)
	switch raw, isRaw := res.([]byte); {
	case err != nil:
		s.fail(out, m, ErrorOf(err))
	case isRaw:
		out.Data = raw
	default:
		if out.Data, err = marshal(res); err != nil {
			s.fail(out, m, &api.Error{Code: api.CodeUnavailable, Message: "encode reply: " + err.Error()})
		}
	}
	if size, limit := int64(len(out.Data)), s.nc.MaxPayload()-4096; limit > 0 && size > limit {
		hint := ""
		if s.cfg.TooLarge != "" {
			hint = ": " + s.cfg.TooLarge
		}
		out = nats.NewMsg(m.Reply)
		s.fail(out, m, api.Errorf(api.CodeTooLarge, "the reply to %s would be %d bytes, above the server's message limit of %d%s", m.Subject, size, s.nc.MaxPayload(), hint))
	}
	if err := m.RespondMsg(out); err != nil {
		s.cfg.Log.Warn("reply lost", "subject", m.Subject, "err", err)
	}
}

func (s *Server) fail(out, m *nats.Msg, e *api.Error) {
	if e.Code == api.CodeUnavailable {
		s.cfg.Log.Warn("request failed", "subject", m.Subject, "err", e.Message)
	}
	out.Header.Set(api.HeaderError, string(e.Code))
	out.Data, _ = json.Marshal(api.ErrorReply{Error: e})
}

// ErrorOf is the reply an error gets: the *api.Error in its chain, with
// the context the wrappers added kept in its message; anything else is
// unavailable.
func ErrorOf(err error) *api.Error {
	var e *api.Error
	switch {
	case !errors.As(err, &e):
		return &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
	case err == error(e):
		return e
	}
	return &api.Error{Code: e.Code, Message: strings.Replace(err.Error(), e.Error(), e.Message, 1)}
}

// marshal encodes a reply without escaping <, >, & and U+2028/2029:
// encoding/json would rewrite them inside the stored bodies a log page
// carries (json.RawMessage), and a client must get the bytes the chain hash
// covers.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Decode reads a request's JSON body into v; an empty or malformed body is
// refused as malformed, naming the subject.
func Decode(m *nats.Msg, v any) error {
	if len(m.Data) == 0 {
		return api.Errorf(api.CodeMalformed, "%s: empty request body, want JSON", m.Subject)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return api.Errorf(api.CodeMalformed, "%s: request body: %v", m.Subject, err)
	}
	return nil
}

// DecodeStrict is Decode for a body that must be one JSON object of v's
// fields and nothing after it: an unknown field (a source, an actor) is
// refused, not ignored.
func DecodeStrict(m *nats.Msg, v any) error {
	if len(m.Data) == 0 {
		return api.Errorf(api.CodeMalformed, "%s: empty request body, want JSON", m.Subject)
	}
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeMalformed, "%s: request body: %v", m.Subject, err)
	}
	if dec.More() {
		return api.Errorf(api.CodeMalformed, "%s: request body: data after the JSON object", m.Subject)
	}
	return nil
}
