// Package mcp runs the tools of the Model Context Protocol servers that
// sessions' workflows declare: it starts each server over stdio with the
// official Go SDK, lists its tools and calls them.
//
// A server runs as one process per (workflow, server, session), in the
// session's workspace: a server that touches files touches that session's
// files, whose changes the runner commits as the call's evidence, and no two
// sessions (a fork and its parent included) share a server's state. A process
// starts on the session's first call of the server, stays up for the next
// calls, is started again if it died, and stops when its session closes, after
// Config.Idle without calls, or when the pool closes.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/openrath/rath/internal/workflow"
)

// Config configures the pool.
type Config struct {
	// Path is the PATH of server processes, and where a command without a
	// slash is looked up.
	Path string
	// Scratch is the directory under which each server process gets a HOME
	// of its own; empty means the system's temporary directory.
	Scratch string
	// Contain runs a server process in a sandbox when its Target has no
	// Contain of its own, as when the runner lists a server's tools at the
	// start of a session; nil runs it as the runner's user, unconfined.
	Contain func(*exec.Cmd) error
	// StartTimeout bounds starting a server: the process, the MCP handshake
	// and, for a listing, the tools list.
	StartTimeout time.Duration
	// CallTimeout bounds one tool call.
	CallTimeout time.Duration
	// Idle stops a server that had no call for this long; zero keeps it
	// until its session closes.
	Idle time.Duration
}

// DefaultConfig returns the defaults; Path must still be set.
func DefaultConfig() Config {
	return Config{StartTimeout: 30 * time.Second, CallTimeout: 2 * time.Minute, Idle: 15 * time.Minute}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("MCP server PATH is required"))
	}
	if c.StartTimeout <= 0 {
		errs = append(errs, fmt.Errorf("MCP start timeout must be positive, got %v", c.StartTimeout))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("MCP call timeout must be positive, got %v", c.CallTimeout))
	}
	if c.Idle < 0 {
		errs = append(errs, fmt.Errorf("MCP idle timeout must not be negative, got %v", c.Idle))
	}
	return errors.Join(errs...)
}

// ErrClosed is returned by Call and Tools once the pool is closed.
var ErrClosed = errors.New("MCP pool closed")

// Target names the server process a call runs on.
type Target struct {
	// Workflow is the hash of the workflow that declares the server
	// (workflow.Workflow.Hash): two versions of a workflow never share a
	// process.
	Workflow string
	Server   workflow.MCPServer
	// Session is the session the process serves.
	Session string
	// Dir is the process's working directory, the session's workspace. It
	// is also offered to the server as its one root.
	Dir string
	// Contain runs the process in the session's sandbox (the workspace
	// backend's Contain); nil uses Config.Contain.
	Contain func(*exec.Cmd) error
}

// key identifies one server process.
type key struct{ workflow, server, session string }

func (t Target) key() key { return key{t.Workflow, t.Server.Name, t.Session} }

// Tool is a tool a server offers.
type Tool struct {
	// Name is the tool's name on its server (without the "<server>." prefix).
	Name        string
	Description string
	// InputSchema is the JSON Schema of the tool's arguments.
	InputSchema json.RawMessage
}

// Result is what a tool call returned.
type Result struct {
	// Text is the call's content for the model: text content as is, other
	// content summarised, one part a line.
	Text string
	// IsError is the server's verdict that the call failed; Text says why.
	IsError bool
}

// Lookup returns the server of wf that serves the tool named
// "<server>.<tool>" and the tool's name on it; ok is false if the name has
// no dot or wf declares no such server.
func Lookup(wf *workflow.Workflow, name string) (s workflow.MCPServer, tool string, ok bool) {
	server, tool, scoped := strings.Cut(name, ".")
	if !scoped || tool == "" {
		return workflow.MCPServer{}, "", false
	}
	s, ok = wf.MCPServer(server)
	return s, tool, ok
}

// Pool starts, keeps and stops server processes. It is safe for concurrent
// use; calls to one process may run concurrently, as MCP allows.
type Pool struct {
	cfg  Config
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	closed  bool
	servers map[key]*server
	listed  map[key]*listing
}

// listing is one workflow server's tools, listed once.
type listing struct {
	done  chan struct{}
	tools []Tool
	err   error
}

// NewPool returns a pool; Close stops it.
func NewPool(cfg Config, log *slog.Logger) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, log: log, stop: make(chan struct{}), done: make(chan struct{}),
		servers: map[key]*server{}, listed: map[key]*listing{}}
	go p.reap()
	return p, nil
}

// Tools lists the tools of a workflow's server. The list is taken once per
// (workflow, server) from a process started for the purpose in an empty
// directory and stopped right after; a failed listing is tried again on the
// next call.
func (p *Pool) Tools(ctx context.Context, workflowHash string, s workflow.MCPServer) ([]Tool, error) {
	k := key{workflowHash, s.Name, ""}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	l, ok := p.listed[k]
	if !ok {
		l = &listing{done: make(chan struct{})}
		p.listed[k] = l
	}
	p.mu.Unlock()
	if ok {
		select {
		case <-l.done:
			return l.tools, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l.tools, l.err = p.list(ctx, workflowHash, s)
	if l.err != nil {
		p.mu.Lock()
		delete(p.listed, k)
		p.mu.Unlock()
	}
	close(l.done)
	return l.tools, l.err
}

func (p *Pool) list(ctx context.Context, workflowHash string, s workflow.MCPServer) ([]Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	srv := pending(Target{Workflow: workflowHash, Server: s})
	err := srv.start(ctx, p.cfg)
	srv.fail(err)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	var out []Tool
	for t, err := range srv.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, srv.describe(fmt.Errorf("list tools: %w", err))
		}
		tool := Tool{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(`{"type":"object"}`)}
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("MCP server %s: tool %s: input schema: %w", s.Name, t.Name, err)
			}
			tool.InputSchema = b
		}
		out = append(out, tool)
	}
	return out, nil
}

// Call calls tool (its name on the server) with args, a JSON object (empty
// means none), on the target's process, starting it if it is not running.
//
// An error means the call did not produce a result: the server could not
// start, refused the call (an unknown tool, invalid arguments), exited during
// it or timed out, or ctx ended. A server that exited is started again on the
// next call; a call is never repeated on its own, since the server may have
// acted on it.
func (p *Pool) Call(ctx context.Context, t Target, tool string, args json.RawMessage) (Result, error) {
	params := &sdk.CallToolParams{Name: tool}
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && string(trimmed) != "null" {
		// Passed on as they are: decoding would turn large integers into
		// floats.
		if trimmed[0] != '{' || !json.Valid(trimmed) {
			return Result{}, fmt.Errorf("MCP tool %s.%s: arguments must be a JSON object", t.Server.Name, tool)
		}
		params.Arguments = json.RawMessage(trimmed)
	}
	srv, err := p.server(ctx, t)
	if err != nil {
		return Result{}, err
	}
	srv.begin()
	defer srv.end()
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	res, err := srv.cs.CallTool(cctx, params)
	switch {
	case err != nil && ctx.Err() != nil:
		return Result{}, ctx.Err()
	case err != nil && cctx.Err() != nil:
		return Result{}, fmt.Errorf("MCP tool %s.%s: no result within %v", t.Server.Name, tool, p.cfg.CallTimeout)
	case err != nil && srv.died(err):
		p.evict(srv)
		return Result{}, srv.describe(fmt.Errorf("tool %s: the server exited during the call (it is started again on the next call): %w", tool, err))
	case err != nil:
		return Result{}, fmt.Errorf("MCP tool %s.%s: %w", t.Server.Name, tool, err)
	}
	return Result{Text: render(res), IsError: res.IsError}, nil
}

// server returns the target's running process, starting one if there is
// none, or if the one there died. Concurrent callers share one start.
func (p *Pool) server(ctx context.Context, t Target) (*server, error) {
	k := t.key()
	for restarts := 0; ; {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		srv, ok := p.servers[k]
		if ok && srv.ready() && (srv.exited() || srv.target.Dir != t.Dir) {
			// Died, or its session's workspace moved: start afresh.
			delete(p.servers, k)
			p.mu.Unlock()
			srv.close()
			continue
		}
		if !ok {
			srv = pending(t)
			p.servers[k] = srv
			p.mu.Unlock()
			p.launch(ctx, srv)
		} else {
			p.mu.Unlock()
		}
		select {
		case <-srv.started:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch {
		case srv.err != nil:
			return nil, srv.err
		case !srv.exited():
			return srv, nil
		case restarts == 1:
			return nil, srv.describe(errors.New("exited right after it started, twice"))
		}
		restarts++
	}
}

// launch starts a pending server. The start is not bound to ctx beyond the
// start timeout: the process outlives the call that started it.
func (p *Pool) launch(ctx context.Context, srv *server) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.StartTimeout)
	defer cancel()
	if err := srv.start(sctx, p.cfg); err != nil {
		p.mu.Lock()
		if p.servers[srv.target.key()] == srv {
			delete(p.servers, srv.target.key())
		}
		p.mu.Unlock()
		srv.fail(err)
		return
	}
	srv.fail(nil)
	p.log.Info("MCP server started", "server", srv.target.Server.Name, "session", srv.target.Session, "pid", srv.cmd.Process.Pid, "dir", srv.target.Dir)
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		srv.close()
	}
}

// evict stops a server whose process died.
func (p *Pool) evict(srv *server) {
	p.mu.Lock()
	if p.servers[srv.target.key()] == srv {
		delete(p.servers, srv.target.key())
	}
	p.mu.Unlock()
	srv.close()
}

// CloseSession stops the processes serving a session.
func (p *Pool) CloseSession(session string) {
	p.closeWhere(func(k key, _ *server) bool { return k.session == session })
}

// reap stops processes idle for longer than Config.Idle.
func (p *Pool) reap() {
	defer close(p.done)
	if p.cfg.Idle <= 0 {
		<-p.stop
		return
	}
	t := time.NewTicker(max(p.cfg.Idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.closeWhere(func(_ key, s *server) bool { return s.idleSince(now) > p.cfg.Idle })
		}
	}
}

func (p *Pool) closeWhere(match func(key, *server) bool) {
	var stop []*server
	p.mu.Lock()
	for k, s := range p.servers {
		if s.ready() && match(k, s) {
			delete(p.servers, k)
			stop = append(stop, s)
		}
	}
	p.mu.Unlock()
	closeAll(stop)
}

// Close stops every process and waits for them to exit. Calls in progress
// fail; later calls return ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var stop []*server
	for k, s := range p.servers {
		delete(p.servers, k)
		if s.ready() {
			stop = append(stop, s)
		}
		// A server still starting is closed by launch, which sees closed.
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	closeAll(stop)
	return nil
}

func closeAll(servers []*server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(s.close)
	}
	wg.Wait()
}
