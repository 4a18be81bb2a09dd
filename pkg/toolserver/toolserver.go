// Package toolserver serves a custom tool from the bus: it registers the
// tool in the tool registry and runs the calls sessions request of it,
// recording each call's evidence in the session as the tool runner does for
// built-in tools.
//
// Any program in any language can serve a tool the same way; docs/tools.md
// describes the protocol step by step. This package is the Go helper:
//
//	err := toolserver.Serve(ctx, nc, toolserver.Tool{
//		Name:        "word_count",
//		Description: "Count the words of a text.",
//		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
//		Handle: func(ctx context.Context, args json.RawMessage) (string, error) { ... },
//	})
//
// The protocol, in short: the server puts its ToolSpec in the rath-tools
// bucket (Server = Durable(name)); consumes rath.tool.call.requested events
// from stream RATH_SESSIONS through its own durable consumer Durable(name),
// filtered to rath.log.*.*.tool (and rath.log.*.*.control, for the
// decisions of approvals that gate calls); skips requests of other tools and
// calls the session's state shows finished; leaves a call whose approval is
// pending until the approval's decision comes, and fails one whose approval
// was rejected with the reason; leaves a call that the agent worker did not
// propose until the tool runner has decided its gate (its
// rath.tool.call.cleared runs it, its rath.approval.requested holds it:
// the server evaluates no workflow itself); and appends rath.tool.call.started, a
// conversation chunk of role "tool" with the result, and
// rath.tool.call.completed (or the chunk and rath.tool.call.failed) through
// the ledger, with event IDs derived from the request and the attempt, so
// that a redelivered request records each event once.
package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// Tool is a custom tool and its implementation.
type Tool struct {
	// Name is what agents call the tool (and list in a workflow's tools):
	// 1 to 64 of A-Z a-z 0-9 _ -. A name with a dot would be an MCP server's
	// tool, and a built-in's name is the tool runner's.
	Name        string
	Description string
	// Parameters is the JSON Schema (draft 2020-12) of the arguments: what
	// agents are offered, and what arguments are checked against before
	// Handle sees them. Nil means any object.
	Parameters json.RawMessage
	// Handle runs one call. Its result is the text the model reads; an
	// error fails the call, and the model reads the error's message. It may
	// run again for the same call after a crash (a new attempt), so side
	// effects should be idempotent. Call returns what the call is.
	Handle func(ctx context.Context, args json.RawMessage) (string, error)
}

// Call is the call a Handle runs, from its context.
type Call struct {
	Session string
	CallID  string
	// EventID is the ID of the rath.tool.call.requested event, or of the
	// rath.approval.granted (or the tool runner's rath.tool.call.cleared)
	// that let the call run when it came after the request was handled:
	// what a side effect of the call can cite as its cause (memory
	// provenance).
	EventID string
	// Agent is the agent that requested the call (empty if none did).
	Agent string
	// Attempt counts the attempts of the call, from 1.
	Attempt int
}

type callKey struct{}

// CallFrom returns the call a Handle's context belongs to.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// Durable returns the name of a tool's durable consumer, which is also its
// server's name in the registry: "tool-" and the tool's name.
func Durable(tool string) string { return "tool-" + tool }

// Source returns the CloudEvents source of the events a tool's server
// appends.
func Source(tool string) string { return "rath/tool/" + tool }

// ErrTaken is returned by Serve for a tool name that another server has
// registered, such as a built-in tool's.
var ErrTaken = errors.New("tool name registered by another server")

// validName is the form of a custom tool's name: what model APIs accept as
// a function name, and usable in a durable consumer name.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// reserved are names whose durable consumer would be a Rath service's.
var reserved = map[string]bool{"runner": true}

// Option configures Serve.
type Option func(*options)

type options struct {
	log     *slog.Logger
	workers int
	as      events.Principal
	states  States
	bytes   int64
}

// As sets the principal the server records its results as: the one its
// connection's credentials name (default rath/tool-runner, the identity
// custom tool servers run with).
func As(p events.Principal) Option { return func(o *options) { o.as = p } }

// WithLogger sets the logger (default: none).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithWorkers sets how many calls run at once (default 8). Calls of one
// session always run one at a time, in order.
func WithWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithStateCache bounds the server's cache of folded session states in
// approximate bytes (default 256 MiB): each call is checked
// against its session's state, which the server keeps folded and brings up
// to date from the session's log (ADR 0016).
func WithStateCache(bytes int64) Option { return func(o *options) { o.bytes = bytes } }

// States gives a session's head, which must include sequence seq (the
// requested call's event), as Rath's cache of folded states does: each call
// is checked against it. A head below seq was read from a replica that lags
// and is an error, so that the request is delivered again rather than
// dropped.
type States interface {
	StateSince(ctx context.Context, id string, seq uint64) (*session.State, error)
}

// WithStates makes the server read sessions' states from a cache it shares
// with its caller (a service serving a tool beside its own work, with
// Rath's cache of folded states); it overrides WithStateCache.
func WithStates(s States) Option { return func(o *options) { o.states = s } }

// Serve registers t and runs its calls until ctx ends, then lets the calls
// in progress finish (for up to 10 seconds) and returns nil.
// Calls requested while no server runs wait in the durable consumer for the
// next one. It returns ErrTaken if another server registered the name.
//
// Serve waits for the ledger to have created the streams and buckets.
func Serve(ctx context.Context, nc *nats.Conn, t Tool, opts ...Option) error {
	o := options{log: slog.New(slog.NewTextHandler(io.Discard, nil)), workers: 8, as: events.Service("tool-runner")}
	for _, opt := range opts {
		opt(&o)
	}
	if err := t.validate(); err != nil {
		return err
	}
	schema, err := compile(t)
	if err != nil {
		return err
	}
	if o.bytes < 0 {
		return fmt.Errorf("tool server %s: state cache size must not be negative, got %d", t.Name, o.bytes)
	}
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(o.log))
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the ledger was up
		}
		return fmt.Errorf("tool server %s: %w", t.Name, err)
	}
	if o.states == nil {
		o.states = fold.NewCache(store, fold.CacheConfig{MaxBytes: o.bytes})
	}
	c, err := client.New(nc, client.As(o.as), client.WithSource(Source(t.Name)))
	if err != nil {
		return fmt.Errorf("tool server %s: %w", t.Name, err)
	}
	if err := register(ctx, store, t); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	s := &server{t: t, durable: Durable(t.Name), states: o.states, schema: schema,
		rec: evidence.New(c, store, Durable(t.Name), ""), allow: newAllowList(store.GetBlob)}
	// The decisions of approvals that gate calls are on the control token:
	// a granted call runs, a rejected one fails; the tool runner's
	// clearance of a call nobody had decided the gate of is on the tool
	// token, and runs it (call.go).
	h := consume.Handler{
		Name: s.durable, Tokens: []string{events.TokenTool, events.TokenControl},
		Types:  []string{events.TypeToolRequested, events.TypeToolCleared, events.TypeApprovalGranted, events.TypeApprovalRejected, events.TypeApprovalExpired},
		Handle: s.handle, Workers: o.workers, AckWait: time.Minute,
	}
	return consume.Run(ctx, nc, h, consume.RecordInSession(c), o.log.With("tool", t.Name))
}

func (t Tool) validate() error {
	var errs []error
	if !validName.MatchString(t.Name) {
		errs = append(errs, fmt.Errorf("tool name %q: want 1-64 characters of A-Z a-z 0-9 _ -", t.Name))
	}
	if reserved[t.Name] {
		errs = append(errs, fmt.Errorf("tool name %q is reserved", t.Name))
	}
	if t.Handle == nil {
		errs = append(errs, fmt.Errorf("tool %s: no Handle func", t.Name))
	}
	if t.Parameters != nil && !json.Valid(t.Parameters) {
		errs = append(errs, fmt.Errorf("tool %s: parameters are not valid JSON", t.Name))
	}
	return errors.Join(errs...)
}

// register puts the tool in the registry, unless another server holds the
// name. (Two servers registering one name at the same moment can both
// succeed; the registry is a plain bucket.)
func register(ctx context.Context, store *eventstore.Store, t Tool) error {
	spec := eventstore.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Server: Durable(t.Name)}
	if spec.Parameters == nil {
		spec.Parameters = json.RawMessage(`{"type":"object"}`)
	}
	old, err := store.Tool(ctx, t.Name)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
	case err != nil:
		return fmt.Errorf("tool server %s: %w", t.Name, err)
	case old.Server != spec.Server:
		return fmt.Errorf("tool server %s: %w (%s)", t.Name, ErrTaken, old.Server)
	}
	if err := store.PutTool(ctx, spec); err != nil {
		return fmt.Errorf("tool server %s: %w", t.Name, err)
	}
	return nil
}
