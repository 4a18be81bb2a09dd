// Package agentserver serves an agent written in Go from the bus: it takes
// the turns the workflow's selector requests of the agent and hands each
// answer to the agent worker, which records it in the session exactly as
// it records a model's.
//
// A workflow declares the agent with served: true (docs/workflows.md), so
// the agent worker leaves its turns alone, and its rules route to it like to
// any other agent:
//
//	err := agentserver.Serve(ctx, nc, "planner", agentserver.Func(
//		func(ctx context.Context, t agentserver.Turn) (agentserver.Answer, error) {
//			return agentserver.Answer{Text: "the plan", ToolCalls: ...}, nil
//		}))
//
// The protocol, in short (docs/protocol.md, "Serving an agent"): the server
// consumes rath.agent.turn.requested events from stream RATH_SESSIONS
// through its own durable consumer Durable(name), filtered to
// rath.log.*.*.agent, shared by every process serving the agent; skips
// requests of other agents and turns the session's state shows ended or
// superseded; asks the agent worker what the turn is (pkg/agentapi: the
// agent's system prompt and tools, or a refusal when the workflow does not
// serve the agent); and hands it the answer, which the worker checks and
// records (a conversation chunk, a rath.tool.call.requested per tool call
// with its approval request before it when a gate holds it,
// rath.model.called with the usage, and rath.agent.turn.completed) in one
// atomic append with event IDs derived from the request and the source
// Source(name), so that a redelivered request records the answer once. An
// error of the agent ends the turn with rath.agent.turn.failed. The agent
// worker must be running: gates (CEL) run there, and this package links
// neither CEL nor YAML.
//
// It also serves routers written in Go (ServeRouter): a workflow rule whose
// route is {router: NAME} has the built-in selector ask the program for the
// route, over NATS request/reply on rath.route.<tenant>.<name> in the queue
// group router-<name> (pkg/routerapi), and the selector records the answer
// as its own decision, naming the router.
package agentserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/agentapi"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// Agent answers the turns of one agent.
type Agent interface {
	// Answer takes one turn. It may run again for the same turn after a
	// crash before the answer was recorded, so it should not act outside
	// the session: what it wants done, it asks for as tool calls, which
	// the session records and runs once. An error ends the turn as failed,
	// with the error's message; the workflow's rules decide what follows.
	Answer(ctx context.Context, t Turn) (Answer, error)
}

// Func is an Agent that is a function.
type Func func(ctx context.Context, t Turn) (Answer, error)

// Answer calls f.
func (f Func) Answer(ctx context.Context, t Turn) (Answer, error) { return f(ctx, t) }

// Turn is what an agent is asked: the turn, and the session as it stood
// when the turn was requested.
type Turn struct {
	Session string
	// ID is the turn's ID (rath.agent.turn.requested's turn_id).
	ID string
	// Agent is the agent's name in the workflow.
	Agent string
	// Rule is the workflow rule that routed the turn ("continue" when the
	// agent goes on after its tool results; "" when a program asked).
	Rule string
	// System is the agent's system prompt from the workflow.
	System string
	// Tools are the tools the workflow lets the agent call, as registered
	// (a tool nobody has registered yet has its name only).
	Tools []Tool
	// State is the session folded up to the turn's request at least: its
	// transcript (Chunks), tool calls and their results (Tools), usage,
	// memory and everything else the session holds. The agent must not
	// change it.
	State *session.State
}

// Tool is a tool an agent may call, as the tool registry describes it.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of its arguments (nil if unknown).
	Parameters json.RawMessage
}

// Answer is an agent's answer to a turn.
type Answer struct {
	// Text is what the agent says (a conversation chunk of role assistant,
	// from the agent); "" says nothing.
	Text string
	// ToolCalls are the tools the agent asks to run. Their results come
	// back as tool chunks, and the workflow routes the session on (by
	// default the same agent takes the next turn once they are in).
	ToolCalls []ToolCall
	// Usage is what the answer cost, recorded in rath.model.called.
	Usage Usage
}

// ToolCall is a tool call an answer asks for.
type ToolCall struct {
	// ID names the call; "" (or an ID the session has already) gets one
	// derived from the turn.
	ID        string
	Tool      string
	Arguments json.RawMessage
}

// Usage is the token usage of an answer, and what produced it.
type Usage struct {
	// Provider and Model name what answered, in the usage accounts: a Go
	// agent that calls a model names it here. Empty: DefaultProvider and
	// the agent's name.
	Provider, Model     string
	TokensIn, TokensOut int64
}

// DefaultProvider is the provider recorded for an answer whose Usage names
// none.
const DefaultProvider = "go"

// Durable returns the name of a served agent's durable consumer: "agent-"
// and the agent's name. Every process serving the agent shares it.
func Durable(agent string) string { return "agent-" + agent }

// Source returns the CloudEvents source of the events an agent's server
// appends.
func Source(agent string) string { return "rath/agent/" + agent }

// Option configures Serve.
type Option func(*options)

type options struct {
	log     *slog.Logger
	workers int
	as      events.Principal
	bytes   int64
}

// As sets the principal the server asks the ledger and the agent worker
// as: the one its connection's credentials name (default rath/agent-worker,
// the identity served agents run with, and the only one whose answers the
// agent worker records).
func As(p events.Principal) Option { return func(o *options) { o.as = p } }

// WithLogger sets the logger (default: none).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithWorkers sets how many turns run at once (default 8). Turns of one
// session always run one at a time, in order.
func WithWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithStateCache bounds the server's cache of folded session states in
// approximate bytes (default 256 MiB; ADR 0016).
func WithStateCache(bytes int64) Option { return func(o *options) { o.bytes = bytes } }

// ErrBadName is returned by Serve for a name no workflow can serve.
var ErrBadName = errors.New("agent name cannot be served")

// Serve takes the turns of the agent name until ctx ends, then lets the
// turns in progress finish (for up to 10 seconds) and returns nil. Turns
// requested while no server runs wait in the durable consumer for the next
// one; several processes serving one agent share its turns.
//
// Serve waits for the ledger to have created the streams and buckets.
func Serve(ctx context.Context, nc *nats.Conn, name string, a Agent, opts ...Option) error {
	o := options{log: slog.New(slog.NewTextHandler(io.Discard, nil)), workers: 8, as: events.Service("agent-worker")}
	for _, opt := range opts {
		opt(&o)
	}
	if err := validate(name, a, o); err != nil {
		return err
	}
	s, err := newServer(ctx, nc, name, a, o)
	if err != nil || s == nil {
		return err
	}
	h := consume.Handler{
		Name: s.durable, Tokens: []string{events.TokenAgent}, Types: []string{events.TypeTurnRequested},
		Handle: s.handle, Workers: o.workers, AckWait: time.Minute,
	}
	o.log.Info("serving agent", "agent", name, "durable", s.durable)
	return consume.Run(ctx, nc, h, s.gaveUp(consume.RecordInSession(s.c)), o.log.With("agent", name))
}

// newServer attaches to the event store (nil if ctx ended first) and
// builds the server's client, cache and workflow library.
func newServer(ctx context.Context, nc *nats.Conn, name string, a Agent, o options) (*server, error) {
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(o.log))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil // stopped before the ledger was up
		}
		return nil, fmt.Errorf("agent server %s: %w", name, err)
	}
	c, err := client.New(nc, client.As(o.as), client.WithSource(Source(name)))
	if err != nil {
		return nil, fmt.Errorf("agent server %s: %w", name, err)
	}
	return &server{name: name, agent: a, durable: Durable(name), c: c, store: store,
		states: fold.NewCache(store, fold.CacheConfig{MaxBytes: o.bytes}), log: o.log}, nil
}

// validate checks Serve's arguments. An agent's name is a workflow agent
// name (a CEL identifier), and "worker" would take the agent worker's
// durable consumer.
func validate(name string, a Agent, o options) error {
	var errs []error
	if !agentapi.ValidName(name) {
		errs = append(errs, fmt.Errorf("agent %q: %w: want letters, digits and _, not starting with a digit", name, ErrBadName))
	}
	if name == agentapi.ReservedName {
		errs = append(errs, fmt.Errorf("agent %q: %w: its durable consumer would be the agent worker's", name, ErrBadName))
	}
	if a == nil {
		errs = append(errs, fmt.Errorf("agent %s: no Agent", name))
	}
	if o.bytes < 0 {
		errs = append(errs, fmt.Errorf("agent %s: state cache size must not be negative, got %d", name, o.bytes))
	}
	return errors.Join(errs...)
}
