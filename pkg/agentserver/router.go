package agentserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/pkg/routerapi"
)

// RouteRequest is what a router is asked (routerapi.Request): the session,
// the rule that asked, the workflow's agents, and the trigger and state the
// rule's own expression read.
type RouteRequest = routerapi.Request

// RouteAnswer is a router's answer (routerapi.Answer): exactly one of an
// agent, a close (&routerapi.Close{Outcome: …}) or a fork, with a reason.
type RouteAnswer = routerapi.Answer

// Router chooses the route of the workflow rules that ask it (route:
// {router: NAME}, docs/workflows.md). The selector asks it inside its own
// decision and records the answer as that decision, naming the router: one
// decider per trigger, as with rules written in YAML (ADR 0029).
type Router interface {
	// Route answers one question. It may be asked more than once about
	// one trigger (a redelivery before the decision was stored, two
	// selectors at once); only one answer is ever recorded, so it should
	// not act outside the session. An error is answered as such: the
	// selector takes the rule's fallback, or refuses the trigger and
	// records why in the session (rath.handler.failed).
	Route(ctx context.Context, r RouteRequest) (RouteAnswer, error)
}

// RouterFunc is a Router that is a function.
type RouterFunc func(ctx context.Context, r RouteRequest) (RouteAnswer, error)

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, r RouteRequest) (RouteAnswer, error) { return f(ctx, r) }

// ServeRouter answers the questions the selector asks the router name until
// ctx ends, then stops taking questions, lets those in hand be answered
// (for up to consume.ShutdownGrace) and returns nil. Every process serving
// one router joins one queue group (routerapi.Queue), so each question is
// answered by one of them; a question asked while none serves waits in the
// selector, which asks again until one does (or takes the rule's fallback).
//
// The connection needs the agent worker's identity (or one that may
// subscribe to rath.route.> and answer requests): served programs run with
// it. WithWorkers bounds the questions answered at once (default 8);
// WithLogger sets the logger. Other options are ignored.
func ServeRouter(ctx context.Context, nc *nats.Conn, name string, r Router, opts ...Option) error {
	o := options{log: slog.New(slog.NewTextHandler(io.Discard, nil)), workers: 8}
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	if err := routerapi.ValidateName(name); err != nil {
		errs = append(errs, err)
	}
	if r == nil {
		errs = append(errs, fmt.Errorf("router %s: no Router", name))
	}
	if o.workers <= 0 {
		errs = append(errs, fmt.Errorf("router %s: workers must be positive, got %d", name, o.workers))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log := o.log.With("router", name)
	// Questions in hand outlive the stop by a grace period.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	slots := make(chan struct{}, o.workers)
	var (
		wg sync.WaitGroup
		// stopped is set before the wait for the questions in hand: a
		// question the drain did not stop in time goes unanswered (the
		// selector asks again) rather than join the wait.
		mu      sync.Mutex
		stopped bool
	)
	// A connection's last error stays until it reconnects: only a refusal
	// of this subscription, after it, is this call's.
	before := nc.LastError()
	sub, err := nc.QueueSubscribe(routerapi.Filter(name), routerapi.Queue(name), func(m *nats.Msg) {
		// Blocks the subscription while every worker is busy: questions
		// queue in the client, and the selector's wait bounds them.
		slots <- struct{}{}
		mu.Lock()
		if stopped {
			mu.Unlock()
			<-slots
			return
		}
		wg.Add(1)
		mu.Unlock()
		go func() {
			defer func() { <-slots; wg.Done() }()
			answerQuestion(hctx, m, name, r, log)
		}()
	})
	if err != nil {
		return fmt.Errorf("router %s: subscribe: %w", name, err)
	}
	// The server refuses a subscription apart from it: asked a round trip
	// later, a refusal has arrived.
	if err := nc.FlushWithContext(ctx); err == nil {
		if last := nc.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), routerapi.Filter(name)) {
			_ = sub.Unsubscribe()
			return fmt.Errorf("router %s: %w (a program that serves routers connects as the agent worker, agent-worker.nk)", name, last)
		}
	}
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	log.Info("serving router", "subject", routerapi.Filter(name), "queue", routerapi.Queue(name))
	<-ctx.Done()
	grace := time.AfterFunc(consume.ShutdownGrace, hcancel)
	defer grace.Stop()
	if err := sub.Drain(); err == nil {
		select {
		case <-closed:
		case <-hctx.Done():
		}
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	wg.Wait()
	return nil
}

// answerQuestion decodes one question, asks the router and replies. A
// question that does not decode, an error and a panic of the router are
// answered as errors, so the selector never waits for an answer that will
// not come.
func answerQuestion(ctx context.Context, m *nats.Msg, name string, r Router, log *slog.Logger) {
	var ans RouteAnswer
	var req RouteRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		ans = RouteAnswer{Error: fmt.Sprintf("router %s: not a question: %v", name, err)}
	} else {
		a, err := ask(ctx, name, r, req)
		switch {
		case err != nil:
			ans = RouteAnswer{Error: err.Error()}
			log.Info("router answered an error", "session", req.Session, "rule", req.Rule, "err", err)
		case a.Error != "":
			ans = RouteAnswer{Error: a.Error}
		default:
			ans = a
		}
	}
	body, err := json.Marshal(ans)
	if err == nil {
		err = m.Respond(body)
	}
	if err != nil {
		log.Warn("answer not sent; the selector asks again", "session", req.Session, "err", err)
	}
}

// ask calls the router, turning a panic into an error.
func ask(ctx context.Context, name string, r Router, req RouteRequest) (ans RouteAnswer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("router %s panicked: %v", name, p)
		}
	}()
	return r.Route(ctx, req)
}
