// Package worker takes agent turns: for each rath.agent.turn.requested it
// builds the agent's context from the folded session state, calls the
// agent's model and appends what came back (the answer as a conversation
// chunk, the model call with its token usage, the tool calls it asked for)
// and ends the turn. Every failed model attempt is an event too.
package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/turn"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// Durable is the worker's consumer name (never derived from code).
const Durable = "agent-worker"

// Source is the CloudEvents source of the worker's events.
const Source = "rath/agent-worker"

// Config configures a worker.
type Config struct {
	// Keys are API keys by provider kind, read from the environment at the
	// edge; they never appear in events, logs or errors.
	Keys map[string]string
	// Retry bounds model call retries.
	Retry provider.Retry
	// Endpoints are where live providers' requests, and so Keys, may go
	// (provider.Endpoints; the zero value: the official endpoints only).
	// An agent whose base URL, from its workflow or the session's labels,
	// is not one of them fails its turn without a request.
	Endpoints provider.Endpoints
	// Override, if set, replaces every agent's provider (tests, re-execution
	// replay, and demos pointed at a live model); an Override that returns
	// a nil Provider and no error leaves the agent its own.
	Override func(agent workflow.Agent) (provider.Provider, error)
	// ToolWait bounds how long a turn waits for one of its tools to be
	// registered; 0 is DefaultToolWait.
	ToolWait time.Duration
	// ToolGrace is how long a turn waits for a missing tool before it
	// records the wait in the session; 0 is DefaultToolGrace.
	ToolGrace time.Duration
	// RecallWait bounds how long a turn waits for the memory service to
	// answer the agent's recall before the turn fails; 0 is
	// DefaultRecallWait.
	RecallWait time.Duration
	// States is where the worker reads sessions' states (ADR 0016); nil is
	// a cache of fold.DefaultMaxBytes over the worker's store.
	States *fold.Cache
	// Contexts keeps the model contexts built so far (ADR 0018); nil is
	// NewContexts(DefaultContextBytes).
	Contexts *Contexts
}

// Worker takes agent turns.
type Worker struct {
	c         *client.Client
	store     *eventstore.Store
	workflows *workflow.Library
	cfg       Config
	log       *slog.Logger
	turns     *turn.Server

	mu        sync.Mutex
	providers map[string]provider.Provider // by bundle reference and agent
}

// New returns a worker.
func New(c *client.Client, store *eventstore.Store, workflows *workflow.Library, cfg Config, log *slog.Logger) *Worker {
	if cfg.States == nil {
		cfg.States = fold.NewCache(store, fold.CacheConfig{})
	}
	if cfg.Contexts == nil {
		cfg.Contexts = NewContexts(DefaultContextBytes)
	}
	return &Worker{c: c, store: store, workflows: workflows, cfg: cfg, log: log, providers: map[string]provider.Provider{},
		turns: turn.New(c, cfg.States, workflows, store.PutBlob, log)}
}

// Handler is the worker's consume handler. A session has at most one turn
// in flight, so turns of different sessions run in parallel. It receives
// every kind, to keep its folded sessions current (consume.Handler.Observe),
// and handles requested turns.
func (w *Worker) Handler() consume.Handler {
	return consume.Handler{
		Name: Durable, Tokens: events.Tokens(), Types: []string{events.TypeTurnRequested},
		Handle: w.Handle, Observe: w.cfg.States.Observe, Workers: 16, AckWait: time.Minute,
	}
}

// via is how the worker names itself in the turns it takes.
var via = turn.Via{Handler: Durable, Source: Source, Server: "the agent worker", Answerer: "model"}

// Handle takes one requested turn. A turn of an agent a program serves
// (pkg/agentserver) is not the worker's: that program's durable consumer,
// agent-<name>, takes it.
func (w *Worker) Handle(ctx context.Context, ev events.Stored) error {
	req, err := turn.Request(ev)
	if err != nil {
		return consume.Permanent(err)
	}
	if req == nil {
		return nil
	}
	a, err := w.turns.Take(ctx, ev, req, via)
	var unrunnable *turn.Unrunnable
	switch {
	case errors.Is(err, turn.ErrNotPending):
		return nil
	case errors.As(err, &unrunnable):
		return w.turns.Fail(ctx, a, unrunnable.Why, 0)
	case err != nil:
		return err // a read that failed: the turn is taken again, not failed
	}
	if a.Agent.Served {
		return nil
	}
	return w.turns.Answer(ctx, a, turn.AnswerFunc(w.answer))
}

// answer asks the agent's model, with the layers around it: the wait for
// the agent's tools, the recall, the compaction and the retries, each
// failed attempt recorded.
func (w *Worker) answer(ctx context.Context, a *turn.Ask) (turn.Reply, error) {
	t := &job{w: w, ask: a, ev: a.Stored, req: a.Request}
	st, wf, agent := a.State, a.Workflow, withModelLabels(a.Agent, a.State.Labels)
	p, err := w.provider(wf, agent)
	if err != nil {
		return turn.Reply{}, &turn.Failed{Why: err.Error()}
	}
	attempts := 0
	deltas := w.deltas(a)
	p = provider.WithRetry(p, w.cfg.Retry, func(at provider.Attempt) {
		attempts = at.N
		deltas.attemptFailed(at.N)
		t.attemptFailed(ctx, agent, at)
	})
	tools, names, err := w.tools(ctx, wf.Workflow, agent, t)
	if err != nil {
		return turn.Reply{}, err
	}
	if _, waited := st.Pending[t.waitWorkID()]; waited || t.waited {
		// This delivery or an earlier one waited for a tool: every tool
		// is in now.
		t.settleWait(ctx, "registered", "every tool of the turn is registered")
	}
	var why string
	if st, why, err = t.recall(ctx, st, wf.Workflow, agent); err != nil {
		return turn.Reply{}, err
	}
	if why != "" {
		return turn.Reply{}, &turn.Failed{Why: why}
	}
	if st, err = t.compact(ctx, st, wf.Workflow.Compaction); err != nil {
		return turn.Reply{}, err
	}
	request := provider.Request{Agent: agent.Name, Model: agent.Model, System: agent.System,
		Messages: w.cfg.Contexts.Messages(a.Stored.Session, st, agent.Name), Tools: tools, MaxTokens: agent.MaxTokens,
		Seed: st.Labels[events.LabelSeed], Deltas: deltas.add}
	start := time.Now()
	resp, err := complete(ctx, p, agent, a.Stored, request)
	latency := time.Since(start)
	deltas.done()
	if err != nil {
		return turn.Reply{}, &turn.Failed{Why: err.Error(), Attempts: attempts} // every attempt, the last included, was reported
	}
	rep := turn.Reply{Text: resp.Content, Provider: agent.Provider, Model: cmp.Or(resp.Model, agent.Model),
		TokensIn: resp.TokensIn, TokensOut: resp.TokensOut, StopReason: resp.StopReason, Latency: latency, Attempt: attempts + 1,
		RequestBody: resp.RequestBody, ResponseBody: resp.ResponseBody, State: st}
	if c := resp.Choice; c != nil {
		rep.Choice = &events.ScriptChoice{Turn: c.Turn, Alternative: c.Alternative, Of: c.Of, Seed: c.Seed}
	}
	for _, call := range resp.ToolCalls {
		name := call.Name
		if reg, ok := names[call.Name]; ok {
			name = reg
		}
		rep.Calls = append(rep.Calls, workflow.Call{ID: call.ID, Tool: name, Arguments: call.Arguments})
	}
	return rep, nil
}

// GaveUp wraps the runner's failure record: a turn the runner gave up on
// is also ended (rath.agent.turn.failed), so its session is not left
// waiting for a turn that will never end; its wait for a tool (tools)
// ends too.
func (w *Worker) GaveUp(record consume.Failure) consume.Failure {
	return w.turns.GaveUp(record, via, func(*events.TurnRequested) bool { return true },
		func(ctx context.Context, a *turn.Ask, f events.HandlerFailed) {
			if strings.Contains(f.Error, notRegistered) {
				t := &job{w: w, ask: a, ev: a.Stored, req: a.Request}
				t.settleWait(ctx, "gave-up", "the turn gave up: "+f.Error)
			}
		})
}

// provider returns the agent's provider, built once per workflow bundle.
func (w *Worker) provider(wf *workflow.Loaded, a workflow.Agent) (provider.Provider, error) {
	if w.cfg.Override != nil {
		if p, err := w.cfg.Override(a); p != nil || err != nil {
			return p, err
		}
	}
	// The workflow file's hash does not cover its scripts: two bundles of
	// one file with other scripts are other providers.
	key := wf.Workflow.Hash() + "/" + a.Name + "/" + a.Provider + "/" + a.Model + "/" + a.BaseURL
	if a.Script != "" {
		sum := sha256.Sum256(wf.Bundle.Files[a.Script])
		key += "/" + hex.EncodeToString(sum[:])
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.providers[key]; ok {
		return p, nil
	}
	cfg := provider.Config{Kind: provider.Kind(a.Provider), BaseURL: a.BaseURL, APIKey: w.cfg.Keys[a.Provider], Model: a.Model,
		Endpoints: w.cfg.Endpoints}
	if a.Script != "" {
		s, err := provider.ParseScript(wf.Bundle.Files[a.Script], a.Script)
		if err != nil {
			return nil, err
		}
		cfg.Scripts = map[string]provider.Script{a.Name: s}
	}
	p, err := provider.New(cfg)
	if errors.Is(err, provider.ErrEndpointNotAllowed) {
		return nil, fmt.Errorf("agent %s: %w; no request was sent (an operator allows an endpoint with the agent worker's --allow-base-url %s=URL, or local servers with --allow-loopback-endpoints)", a.Name, err, a.Provider)
	}
	if errors.Is(err, provider.ErrNoAPIKey) {
		// The key is read where the agent worker starts; a person who set
		// it in the shell of a client (rath replay, rath start) is told
		// where it goes.
		return nil, fmt.Errorf("agent %s: %w: this agent worker has no %s; set it in the environment of the process that runs the agent worker (rath up, rath demo, or the agent-worker service) and restart it: a key set where rath replay or rath start runs does not reach it", a.Name, err, provider.KeyEnv(provider.Kind(a.Provider)))
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", a.Name, err)
	}
	w.providers[key] = p
	return p, nil
}

// tools returns the registered specs of the agent's tools, named as model
// APIs accept them ("server.tool" becomes "server__tool"), with the way back
// to the registered names. A tool that is not registered (yet: a tool runner
// or an MCP server still starting) is a transient error: the turn waits for
// it rather than run with fewer tools than its workflow gives it, which
// would change what the model is asked. A tool nobody registers ends the
// turn through the dead-letter path, which records why.
//
// While it waits, the session says so: the turn records pending work
// (WorkKindTool) naming the tool, settled once the tool is registered or
// the turn gives up (GaveUp), so rath state and the console show what the
// session waits for.
func (w *Worker) tools(ctx context.Context, wf *workflow.Workflow, a workflow.Agent, t *job) ([]provider.Tool, map[string]string, error) {
	var out []provider.Tool
	names := map[string]string{}
	for _, name := range a.Tools {
		spec, err := w.store.Tool(ctx, name)
		if err != nil {
			// The tool runner registers an MCP server's tools when it
			// handles the session's start, which races this turn as a
			// built-in tool's registration races a starting runner: both
			// wait. (An MCP tool failed at once, and the consumer's few
			// short retries gave up on a runner still starting.)
			spec, err = w.waitToolRecorded(ctx, wf, name, t)
		}
		if err != nil {
			if server, _, ok := strings.Cut(name, "."); ok {
				if _, declared := wf.MCPServer(server); declared {
					return nil, nil, fmt.Errorf("tool %s of MCP server %s "+notRegistered+" yet (the tool runner has not listed the server's tools within %s): %w", name, server, w.toolWait(), err)
				}
			}
			return nil, nil, fmt.Errorf("tool %s of agent %s "+notRegistered+" (no tool runner or tool server has offered it within %s): %w", name, a.Name, w.toolWait(), err)
		}
		wire := wireName(spec.Name)
		names[wire] = spec.Name
		out = append(out, provider.Tool{Name: wire, Description: spec.Description, Parameters: spec.Parameters})
	}
	return out, names, nil
}

// DefaultToolWait is how long a turn waits for one of its tools to be
// registered before it fails transiently (and is redelivered).
const DefaultToolWait = 30 * time.Second

// DefaultToolGrace is how long a turn waits for a missing tool, with a
// tool runner up, before it records the wait: a custom tool server that
// starts beside the runtime registers within it.
const DefaultToolGrace = 2 * time.Second

// waitToolRecorded waits for tool name, and records the wait in the
// session (pending work) when the tool looks missing rather than late: a
// tool runner has registered its tools, the tool is not one of an MCP
// server the workflow declares (the runner lists those when it handles the
// session's start), and it has not come within the grace. A wait that is
// only the runtime starting (the runner registers as the first turn
// comes) stays out of the log, which a replay compares event for event.
func (w *Worker) waitToolRecorded(ctx context.Context, wf *workflow.Workflow, name string, t *job) (eventstore.ToolSpec, error) {
	if server, _, ok := strings.Cut(name, "."); ok {
		if _, declared := wf.MCPServer(server); declared {
			return w.waitTool(ctx, name, w.toolWait())
		}
	}
	grace := cmp.Or(w.cfg.ToolGrace, DefaultToolGrace)
	if grace >= w.toolWait() || !w.runnerUp(ctx) {
		return w.waitTool(ctx, name, w.toolWait())
	}
	if spec, err := w.waitTool(ctx, name, grace); err == nil {
		return spec, nil
	}
	t.waitingFor(ctx, name)
	return w.waitTool(ctx, name, w.toolWait()-grace)
}

// runnerUp reports whether a tool runner has registered its tools.
func (w *Worker) runnerUp(ctx context.Context) bool {
	tools, err := w.store.Tools(ctx)
	if err != nil {
		return false
	}
	for _, t := range tools {
		if t.Server == "tool-runner" {
			return true
		}
	}
	return false
}

func (w *Worker) toolWait() time.Duration {
	if w.cfg.ToolWait > 0 {
		return w.cfg.ToolWait
	}
	return DefaultToolWait
}

// waitTool waits for a tool to be registered: at start-up a turn can come
// before the tool runner or a tool server has offered its tools. The
// delivery stays in progress meanwhile (internal/consume extends it).
func (w *Worker) waitTool(ctx context.Context, name string, wait time.Duration) (eventstore.ToolSpec, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	pause := 10 * time.Millisecond
	for {
		spec, err := w.store.Tool(ctx, name)
		if err == nil {
			return spec, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return eventstore.ToolSpec{}, err
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// job is one turn the worker answers: the layers around the model record
// their events through it, with IDs derived from the request, so a
// redelivered turn records each once.
type job struct {
	w   *Worker
	ask *turn.Ask
	ev  events.Stored
	req *events.TurnRequested
	// waited is set once the turn recorded a wait for a tool (waitingFor).
	waited bool
}

func (t *job) emit(ctx context.Context, what string, data any) error {
	return t.w.turns.Emit(ctx, t.ask, what, data)
}

// answer is the worker's answer to the turn's request (internal/answer).
func (t *job) answer() answer.Answer { return t.ask.Answer() }

func (t *job) attemptFailed(ctx context.Context, a workflow.Agent, at provider.Attempt) {
	f := &events.ModelCallFailed{TurnID: t.req.TurnID, Agent: a.Name, Provider: a.Provider, Model: a.Model,
		Attempt: at.N, Status: at.Status, Error: at.Err.Error(), RetryInMS: at.RetryIn.Milliseconds()}
	if err := t.emit(ctx, "attempt-"+strconv.Itoa(at.N), f); err != nil {
		t.w.log.Warn("failed model attempt not recorded", "turn", t.req.TurnID, "attempt", at.N, "err", err)
	}
}

// notRegistered is in the error of a turn that waited for a tool in vain.
const notRegistered = "is not registered"

// WorkKindTool is the kind of the pending work a turn records while it
// waits for one of its tools to be registered.
const WorkKindTool = session.WorkKindTool

// waitWorkID is the ID of the pending work of a turn waiting for a tool.
func (t *job) waitWorkID() string { return "tool-wait-" + t.req.TurnID }

// waitingFor records that the turn waits for tool name to be registered:
// pending work, once per turn (its event ID derives from the request).
// Best effort: the wait goes on whether or not it is recorded.
func (t *job) waitingFor(ctx context.Context, name string) {
	p := &events.WorkPending{WorkID: t.waitWorkID(), Kind: WorkKindTool, Assignee: t.req.Agent,
		Description: fmt.Sprintf("turn %s of %s waits for tool %s, which no tool runner or tool server offers yet (a turn waits %s a try, then tries again)", t.req.TurnID, t.req.Agent, name, t.w.toolWait())}
	if err := t.emit(ctx, "tool-wait", p); err != nil {
		t.w.log.Warn("the wait for a tool not recorded", "turn", t.req.TurnID, "tool", name, "err", err)
		return
	}
	t.waited = true
}

// settleWait settles the turn's wait for a tool (waitingFor), if it
// recorded one: what names this settlement among the turn's events.
func (t *job) settleWait(ctx context.Context, what, outcome string) {
	if err := t.emit(ctx, "tool-wait-"+what, &events.WorkDone{WorkID: t.waitWorkID(), Outcome: outcome}); err != nil {
		t.w.log.Warn("the end of a wait for a tool not recorded", "turn", t.req.TurnID, "err", err)
	}
}

// wireNames renames "server.tool" calls in a transcript the way tools are
// offered to models, so that earlier calls match the offered names.
func wireNames(msgs []provider.Message) []provider.Message {
	for i := range msgs {
		for j := range msgs[i].ToolCalls {
			msgs[i].ToolCalls[j].Name = wireName(msgs[i].ToolCalls[j].Name)
		}
	}
	return msgs
}

// wireName is a tool's name as models are offered it.
func wireName(tool string) string { return strings.ReplaceAll(tool, ".", "__") }
