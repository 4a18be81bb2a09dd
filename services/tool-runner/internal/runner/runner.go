// Package runner runs the tool calls sessions request, where the session is
// placed, and records the evidence of each call in the session: arguments,
// result, exit code, duration, workspace commit before and after, the diff,
// the sandbox and the attempt. It places sessions on sandbox backends
// (place.go) and moves them between backends on request (move.go).
//
// Who runs a requested tool is decided by one rule (route), in order: a
// built-in name runs here; a name "<server>.<tool>" whose server is an MCP
// server of the session's workflow runs here, on that server; a name another
// server registered (eventstore.ToolSpec.Server other than Durable) is that
// server's to run, and the runner leaves it alone; anything else fails, since
// nobody would ever run it.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/mcp"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

// Durable is the tool runner's consumer name (never derived from code), and
// the Server of the tools it registers.
const Durable = "tool-runner"

// DurableMCP is the consumer name of the handler that registers the tools of
// a session's MCP servers when the session starts and stops its servers when
// it closes.
const DurableMCP = "mcp-servers"

// Source is the CloudEvents source of the runner's events.
const Source = "rath/tool-runner"

// LabelWorkspace names, in a session's start labels, the blob reference of
// its workspace seed (ADR 0031).
const LabelWorkspace = client.LabelWorkspace

// Runner runs tool calls.
type Runner struct {
	c         *client.Client
	states    *fold.Cache
	store     *eventstore.Store
	backends  *Backends
	workflows *workflow.Library
	servers   *mcp.Pool
	rec       *evidence.Recorder
	log       *slog.Logger
	locks     [64]sync.Mutex // by session
	pool      string         // "": events.PoolDefault (pool.go)
}

// New returns a runner placing workspaces on backends and running MCP tools
// on servers. It reads sessions' states from states (ADR 0016), and their
// workspace seeds from the blob store only (ADR 0031).
func New(c *client.Client, states *fold.Cache, store *eventstore.Store, backends *Backends, workflows *workflow.Library, servers *mcp.Pool, log *slog.Logger) *Runner {
	return &Runner{c: c, states: states, store: store, backends: backends, workflows: workflows, servers: servers,
		rec: evidence.New(c, store, Durable, Source), log: log}
}

// Register publishes the built-in tools in the tool registry.
//
// A cluster electing a JetStream leader (a node lost as the runner starts)
// answers no put for seconds: each is made again while it is forming, for
// registerPatience at the most, rather than stopping the runner.
func (r *Runner) Register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerPatience)
	defer cancel()
	for _, t := range tools.Specs() {
		spec := eventstore.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Server: Durable}
		if err := eventstore.WhileForming(ctx, r.log, "register tool "+t.Name, func(ctx context.Context) error { return r.store.PutTool(ctx, spec) }); err != nil {
			return err
		}
	}
	return nil
}

// registerPatience bounds Register's wait for a JetStream cluster.
const registerPatience = time.Minute

// Handler is the runner's consume handler: tool calls, moves between
// sandbox backends, and the decisions of approvals that gate calls (which
// run or fail the call they gate). A session's events are handled one at a
// time, in order, so each call's diff is its own and a move happens between
// calls. It receives every kind, to keep its folded sessions current
// (consume.Handler.Observe), and handles those.
func (r *Runner) Handler() consume.Handler {
	return consume.Handler{
		Name: Durable, Tokens: events.Tokens(), Observe: r.states.Observe,
		Types:  []string{events.TypeToolRequested, events.TypeSandboxRequested, events.TypeApprovalGranted, events.TypeApprovalRejected, events.TypeApprovalExpired},
		Handle: r.Handle, Workers: 8, AckWait: time.Minute,
	}
}

// Handle runs one requested tool call or move: here, or, when another runner
// holds the session's workspace, on that runner (see forward).
func (r *Runner) Handle(ctx context.Context, ev events.Stored) error {
	err := r.handle(ctx, ev, false)
	var away *elsewhere
	if errors.As(err, &away) {
		return r.forward(ctx, ev, away)
	}
	return err
}

// handle runs a call or a move with the session's lock held, so that an
// event handed over by another runner and a redelivery never run at once.
func (r *Runner) handle(ctx context.Context, ev events.Stored, takeOver bool) error {
	mu := &r.locks[fnvHash(ev.Session)%uint32(len(r.locks))]
	mu.Lock()
	defer mu.Unlock()
	switch ev.Type {
	case events.TypeSandboxRequested:
		return r.move(ctx, ev, takeOver)
	case events.TypeApprovalGranted, events.TypeApprovalRejected, events.TypeApprovalExpired:
		return r.decided(ctx, ev, takeOver)
	}
	return r.call(ctx, ev, takeOver)
}

// call runs one requested tool call, unless a gate holds it.
func (r *Runner) call(ctx context.Context, ev events.Stored, takeOver bool) error {
	d, err := ev.Decode()
	if err != nil {
		return consume.Permanent(err)
	}
	st, err := r.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return err
	}
	return r.runCall(ctx, ev, d.(*events.ToolRequested), st, takeOver)
}

// decided runs, or fails, the call an approval's decision settles. Its
// answers are caused by the decision (ev): a fork that approves a call
// asked for before its fork point runs the call itself, under its own IDs.
func (r *Runner) decided(ctx context.Context, ev events.Stored, takeOver bool) error {
	req, st, err := r.gated(ctx, ev)
	if err != nil || req == nil {
		return err
	}
	return r.runCall(ctx, ev, req, st, takeOver)
}

// gated returns the tool call an approval decision (ev) settles, as its
// request, with the session's state; nil when the approval gates no call
// the session holds.
func (r *Runner) gated(ctx context.Context, ev events.Stored) (*events.ToolRequested, *session.State, error) {
	d, err := ev.Decode()
	if err != nil {
		return nil, nil, consume.Permanent(err)
	}
	var id string
	switch d := d.(type) {
	case *events.ApprovalGranted:
		id = d.ApprovalID
	case *events.ApprovalRejected:
		id = d.ApprovalID
	case *events.ApprovalExpired:
		id = d.ApprovalID
	}
	st, err := r.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return nil, nil, err
	}
	return st.GatedCall(id), st, nil
}

// runCall runs the call req in answer to ev (its request, or the decision
// of the approval that gates it), once: a call done already, or one whose
// approval is pending, is left alone (the decision is delivered here too
// and runs it); one whose approval was rejected fails with the reason. A
// call its caller runs (events.RunnerCaller, as its request or its latest
// request says) is not the runner's: nothing is screened, recorded or run.
func (r *Runner) runCall(ctx context.Context, ev events.Stored, req *events.ToolRequested, st *session.State, takeOver bool) error {
	call := st.Tools[req.CallID]
	if st.Status.Ended() || call == nil || call.Status == session.ToolCompleted || call.Status == session.ToolFailed {
		return nil // done already (a redelivery), or nothing to do
	}
	if req.Runner == events.RunnerCaller || call.Runner == events.RunnerCaller {
		return nil // its caller runs it and records the outcome
	}
	attempt := call.Attempts + 1
	e := r.rec.Attempt(ev, req, attempt)
	gate := st.GateOf(req.CallID)
	if gate.Unscreened {
		// Nobody decided its gate: decided here, for every tool (gate.go).
		var why string
		var err error
		if st, why, err = r.screen(ctx, ev, req, st); err != nil || st == nil {
			return err
		}
		if why != "" {
			return e.Fail(ctx, why, 0, nil)
		}
		if gate = st.GateOf(req.CallID); gate.Unscreened {
			return fmt.Errorf("tool %s: its gate is undecided after the runner recorded its decision", req.CallID)
		}
	}
	rt, err := r.route(ctx, st, req.Tool)
	if err != nil {
		return err
	}
	if rt.kind == routeOther {
		return nil // a custom server's tool: it consumes its own requests
	}
	switch {
	case gate.Refused():
		return e.Fail(ctx, gate.Rejection(), 0, nil)
	case !gate.Runnable():
		return nil // waits for its approval's decision
	}
	if rt.kind == routeRefused {
		return e.Fail(ctx, rt.why, 0, nil)
	}
	if allowed, why, err := r.allowed(ctx, st, req); err != nil {
		return err
	} else if !allowed {
		return e.Fail(ctx, why, 0, nil)
	}
	if req.Tool == tools.Todo {
		return todo(ctx, e, req, st)
	}
	if err := waitForMove(st, ev); err != nil {
		return err
	}
	ws, err := r.place(ctx, st, ev, req, takeOver)
	if errors.Is(err, errHandedOver) {
		return nil
	}
	var refused *placeError
	if errors.As(err, &refused) {
		return e.Fail(ctx, refused.why, 0, nil)
	}
	if err != nil {
		return err
	}
	sb := &events.Sandbox{Backend: ws.Backend(), SandboxID: ws.ID(), Pool: recorded(r.Pool())}
	if err := e.Start(ctx, sb); err != nil {
		return err
	}
	before, err := ws.Head(ctx)
	if err != nil {
		return fmt.Errorf("tool %s: workspace head: %w", req.CallID, err)
	}
	start := time.Now()
	out, callErr := r.execute(ctx, rt, st, ws, ev, req, sb)
	dur := time.Since(start)
	after, err := ws.Commit(ctx, fmt.Sprintf("rath: %s %s (session %s, attempt %d)", req.Tool, req.CallID, ev.Session, attempt))
	if err != nil {
		return fmt.Errorf("tool %s: commit workspace: %w", req.CallID, err)
	}
	if callErr != nil {
		// Bad arguments, an escape, an MCP server's error or one that
		// could not run the call: the model is told, the call fails.
		return e.Fail(ctx, callErr.Error(), dur, sb)
	}
	diff := ""
	if after != before {
		if diff, err = ws.Diff(ctx, before, after); err != nil {
			return fmt.Errorf("tool %s: diff: %w", req.CallID, err)
		}
	}
	// A validation or an experiment is recorded after the result's chunk,
	// before the completion.
	var then []evidence.Event
	switch req.Tool {
	case tools.Validate:
		then = append(then, evidence.Event{What: "verdict", Data: verdict(req, out, after)})
	case tools.Experiment:
		then = append(then, evidence.Event{What: "experiment", Data: experimentOf(req, out, after)})
	}
	return e.Complete(ctx, &events.ToolCompleted{ExitCode: out.ExitCode, DurationMS: dur.Milliseconds(),
		CommitBefore: before, CommitAfter: after, Sandbox: sb, Limits: out.Limits}, out.Result, diff, then...)
}

// todo runs a todo call on the session's open work, without a workspace:
// no placement, no sandbox, no commits. The work event (rath.work.pending
// or rath.work.done) comes before the result's chunk and the completion,
// so the agent's next turn, and the rules, see the list as the result says.
func todo(ctx context.Context, e evidence.Attempt, req *events.ToolRequested, st *session.State) error {
	work, result, err := tools.Work(req.Arguments, req.CallID, req.Agent, st.Pending)
	if err != nil {
		return e.Fail(ctx, err.Error(), 0, nil)
	}
	if err := e.Start(ctx, nil); err != nil {
		return err
	}
	if work != nil {
		if err := e.Emit(ctx, "work", work); err != nil {
			return err
		}
	}
	return e.Complete(ctx, &events.ToolCompleted{}, result, "")
}

// verdict is the validation a validate call records: the check passed if
// its command exited 0. Target is the workspace commit it checked, so the
// verdict names exactly which code it judged.
func verdict(req *events.ToolRequested, out tools.Output, commit string) any {
	d := map[string]any{"call_id": req.CallID, "agent": req.Agent, "exit_code": out.ExitCode, "commit": commit}
	if r := tools.ParseReport(out.Stdout); len(r.Metrics) > 0 {
		d["metrics"] = r.Metrics // a check that reports metrics as an experiment does (a metric threshold)
	}
	details, _ := json.Marshal(d)
	check := tools.CheckName(req.Arguments)
	if out.ExitCode == 0 {
		return &events.ValidationPassed{Validator: check, Target: commit, Details: details}
	}
	return &events.ValidationFailed{Validator: check, Target: commit, Details: details,
		Reason: fmt.Sprintf("exit code %d: %s", out.ExitCode, tail(out.Stdout+out.Stderr, 600))}
}

// experimentOf is the experiment an experiment call records: what its
// report says, with the command, its exit code and the workspace commit it
// ran on.
func experimentOf(req *events.ToolRequested, out tools.Output, commit string) *events.ExperimentRecorded {
	var a tools.ExperimentArgs
	_ = json.Unmarshal(req.Arguments, &a) // checked against the schema before the call ran
	r := tools.ParseReport(out.Stdout)
	name := a.Name
	if name == "" {
		name = req.CallID
	}
	return &events.ExperimentRecorded{Name: name, CallID: req.CallID, Agent: req.Agent, Command: a.Command,
		Config: r.Config, Metrics: r.Metrics, ExitCode: out.ExitCode, Commit: commit, Problem: r.Problem}
}

// tail is the end of s, at most n bytes, cut at a line start when it can be.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return strings.ToValidUTF8("…"+s, "")
}

// GaveUp wraps the runner's failure record: a tool call the runner gave up
// on also fails (with its result telling the model why), so the turn can go
// on instead of waiting for a result that will never come; a move it gave up
// on is refused, so its requester hears why.
func (r *Runner) GaveUp(record consume.Failure) consume.Failure {
	return func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error {
		if d, err := ev.Decode(); err == nil {
			var answer error
			switch d := d.(type) {
			case *events.ToolRequested:
				answer = r.rec.Attempt(ev, d, f.Attempts).Fail(ctx, "the tool runner gave up: "+f.Error, 0, nil)
			case *events.ApprovalGranted, *events.ApprovalRejected, *events.ApprovalExpired:
				if req, _, err := r.gated(ctx, ev); err != nil {
					answer = err
				} else if req != nil {
					answer = r.rec.Attempt(ev, req, f.Attempts).Fail(ctx, "the tool runner gave up: "+f.Error, 0, nil)
				}
			case *events.SandboxRequested:
				answer = r.refuse(ctx, ev, d.Backend, "the tool runner gave up: "+f.Error)
			}
			if answer != nil && !api.Permanent(answer) {
				return answer
			}
		}
		return record(ctx, ev, f)
	}
}

// allowed checks the tool against the requesting agent's list in the
// session's workflow. Sessions without a workflow may use every tool. A
// workflow that is missing or does not open refuses the call; one whose
// read failed (a NATS node lost) is an error, so the request is taken again.
func (r *Runner) allowed(ctx context.Context, st *session.State, req *events.ToolRequested) (bool, string, error) {
	if st.WorkflowRef == "" {
		return true, "", nil
	}
	wf, err := r.workflows.Get(ctx, st.WorkflowRef)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, workflow.ErrInvalidBundle) {
		return false, err.Error(), nil
	}
	if err != nil {
		return false, "", err
	}
	allowed, why := wf.Workflow.Allows(req.Agent, req.Tool)
	return allowed, why, nil
}

// routeKind says who runs a requested tool.
type routeKind int

const (
	routeBuiltin routeKind = iota + 1
	routeMCP
	// routeOther is a tool another server registered and runs.
	routeOther
	// routeRefused is a tool nobody runs: the call fails.
	routeRefused
)

// route is who runs one requested tool.
type route struct {
	kind routeKind
	// For routeMCP: the hash of the session's workflow, the server and the
	// tool's name on it.
	workflow string
	server   workflow.MCPServer
	tool     string
	// why a call is refused.
	why string
}

// route applies the routing rule of the package comment. An error is
// transient (the registry or the blob store could not be read).
func (r *Runner) route(ctx context.Context, st *session.State, name string) (route, error) {
	if builtin(name) {
		return route{kind: routeBuiltin}, nil
	}
	server, _, scoped := strings.Cut(name, ".")
	if scoped && st.WorkflowRef != "" {
		wf, err := r.workflows.Get(ctx, st.WorkflowRef)
		if errors.Is(err, eventstore.ErrNotFound) {
			return route{kind: routeRefused, why: err.Error()}, nil
		}
		if err != nil {
			return route{}, err
		}
		if s, tool, ok := mcp.Lookup(wf.Workflow, name); ok {
			return route{kind: routeMCP, workflow: wf.Workflow.Hash(), server: s, tool: tool}, nil
		}
	}
	spec, err := r.store.Tool(ctx, name)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return route{kind: routeRefused, why: fmt.Sprintf("unknown tool %s: not built in, not a tool of an MCP server of the session's workflow, and not registered by any tool server", name)}, nil
	case err != nil:
		return route{}, err
	case spec.Server != Durable:
		return route{kind: routeOther}, nil
	case scoped:
		return route{kind: routeRefused, why: fmt.Sprintf("tool %s is not available to this session: its workflow declares no MCP server %q", name, server)}, nil
	}
	return route{kind: routeRefused, why: fmt.Sprintf("tool %s is registered by %s, which no longer serves it", name, Durable)}, nil
}

// run runs a call routed here, on the session's workspace. An MCP server
// runs in the sandbox of the session's backend, as its tenant's.
func (r *Runner) run(ctx context.Context, rt route, st *session.State, ws sandbox.Workspace, req *events.ToolRequested) (tools.Output, error) {
	if rt.kind == routeBuiltin {
		// The hosts the workflow allows the agent's commands to reach.
		var hosts []string
		if st.WorkflowRef != "" {
			wf, err := r.workflows.Get(ctx, st.WorkflowRef)
			if err != nil {
				return tools.Output{}, err
			}
			hosts = wf.Workflow.NetworkFor(req.Agent)
		}
		return tools.Call(ctx, sandbox.WithHosts(ws, hosts), req.Tool, req.Arguments)
	}
	b, err := r.backends.Get(ws.Backend())
	if err != nil {
		return tools.Output{}, err
	}
	contain := func(cmd *exec.Cmd) error { return b.Contain(cmd, st.Tenant) }
	res, err := r.servers.Call(ctx, mcp.Target{Workflow: rt.workflow, Server: rt.server, Session: st.ID, Dir: ws.Dir(), Contain: contain}, rt.tool, req.Arguments)
	switch {
	case err != nil:
		return tools.Output{}, err
	case res.IsError && res.Text == "":
		return tools.Output{}, fmt.Errorf("MCP tool %s reported an error without a message", req.Tool)
	case res.IsError:
		return tools.Output{}, errors.New(res.Text)
	}
	return tools.Output{Result: res.Text}, nil
}

func builtin(name string) bool {
	for _, t := range tools.Specs() {
		if t.Name == name {
			return true
		}
	}
	return false
}
