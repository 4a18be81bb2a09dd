// Package mcpproxy is Rath's MCP proxy: it relays the messages between an
// MCP host and an MCP server untouched, and records every tools/call it
// sees (arguments, result or error, duration, the server's name and
// version) as tool evidence in a session, as calls their caller ran
// (events.RunnerCaller).
//
// The relay never waits for the record: what a message means is noted in
// memory as it passes, and one goroutine appends the records in order
// behind it. A record that fails is logged and the relay goes on. Two
// transports share the recorder: stdio (RunStdio) and streamable HTTP
// (Handler).
package mcpproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Source is the CloudEvents source of the events the proxy records.
const Source = "rath/mcp-proxy"

// Label is the label of a session the proxy started: the server's name.
const Label = "rath.mcp-proxy"

// Backend is the events.Sandbox backend of a call the proxy recorded: the
// sandbox a caller reports is the MCP server that ran the call, named
// "<name>@<version>" by its initialize answer.
const Backend = "mcp"

const (
	// maxQueue bounds the records waiting to be appended; beyond it a
	// record is dropped (and said so in the log) rather than hold the relay.
	maxQueue = 10000
	// maxOpen bounds the calls waiting for their answer.
	maxOpen = 4096
	// maxArguments bounds the arguments kept in a request; longer ones are
	// kept in a blob, and the request holds a note naming it.
	maxArguments = evidence.InlineLimit
	// maxToolName bounds a tool's name (the MCP specification suggests
	// 128 characters).
	maxToolName = 128
	// maxIdentity bounds a server's name and version as recorded.
	maxIdentity = 128
)

// validName is the form of a server's name: an MCP server name of a
// workflow (no dot: "<server>.<tool>" names a tool).
var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// ValidateName reports whether name can name a server's tools.
func ValidateName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("invalid server name %q: want 1-64 letters, digits, _ and -, starting with a letter or _ (the tools are recorded as <name>.<tool>)", name)
	}
	return nil
}

// Config configures a recorder.
type Config struct {
	// Client appends the records, as the caller whose credentials it has.
	Client *client.Client
	// Session is the session the calls are recorded in, started on first
	// use with the label Label.
	Session string
	// Name is the server's name: its tools are recorded as <Name>.<tool>.
	Name string
	// Drain bounds how long Close waits for the records still queued
	// (default 10s).
	Drain time.Duration
	// Log receives the records that failed.
	Log *slog.Logger
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("no client to record with"))
	}
	if err := events.ValidateSessionID(c.Session); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateName(c.Name); err != nil {
		errs = append(errs, err)
	}
	if c.Drain < 0 {
		errs = append(errs, fmt.Errorf("drain time must not be negative, got %s", c.Drain))
	}
	return errors.Join(errs...)
}

// Recorder notes the tools/call requests and answers that pass through the
// proxy and records them in the session, in order, off the relay's path.
type Recorder struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	server   string        // "<name>@<version>" of the initialize answer
	open     map[key]*call // calls waiting for their answer
	inits    map[key]bool  // initialize requests waiting for theirs
	queue    []func(context.Context) error
	wake     chan struct{}   // a record was queued
	closing  bool            // Close was called: take no more records
	done     chan struct{}   // the worker stopped
	ctx      context.Context // the worker's, cancelled when Close gives up
	cancel   context.CancelFunc
	dropped  int
	failures int
}

// key names one JSON-RPC request: the conversation it belongs to (the
// MCP session of the streamable HTTP transport; "" on stdio) and its id,
// canonical (a string id and a number id never match).
type key struct {
	conv string
	id   string
}

// call is a tools/call waiting for its answer.
type call struct {
	id    string // the call's ID in the session
	tool  string
	start time.Time
}

// New returns a recorder; Close stops it.
func New(cfg Config) (*Recorder, error) {
	if cfg.Drain == 0 {
		cfg.Drain = 10 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{cfg: cfg, log: log, now: time.Now, open: map[key]*call{}, inits: map[key]bool{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	go r.work()
	return r, nil
}

// Open makes sure the session exists and takes calls, starting it (as the
// client's user) on first use. A proxy that cannot record should say so
// before it relays anything.
func (r *Recorder) Open(ctx context.Context) error {
	c, id := r.cfg.Client, r.cfg.Session
	st, err := c.State(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		_, err = c.Start(ctx, id, events.SessionStarted{Labels: map[string]string{Label: r.cfg.Name}}, events.WithSource(Source))
		if err != nil && !errors.Is(err, api.ErrExists) {
			return fmt.Errorf("start session %s: %w", id, err)
		}
		st, err = c.State(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("read session %s: %w", id, err)
	}
	if st.Status.Ended() {
		return fmt.Errorf("session %s is %s: it records no more calls; name another with --session", id, st.Status)
	}
	return nil
}

// Close fails the calls still waiting for an answer, with why, then waits
// up to Config.Drain for the queued records, and stops. It returns how
// many records were lost, if any.
func (r *Recorder) Close(why string) error {
	r.FailOpen("", why)
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.signal()
	t := time.NewTimer(r.cfg.Drain)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		r.cancel()
		<-r.done
	}
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	lost := r.dropped + r.failures + len(r.queue)
	if lost > 0 {
		return fmt.Errorf("%d records of session %s are lost (the log says why)", lost, r.cfg.Session)
	}
	return nil
}

// FailOpen records the calls of conversation conv still waiting for an
// answer ("" names them all) as failed, with why: the server will not
// answer them (it exited, or the proxy stops).
func (r *Recorder) FailOpen(conv, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.open {
		if conv == "" || k.conv == conv {
			delete(r.open, k)
			r.failLocked(c, why, r.now())
		}
	}
}

// work appends the queued records one at a time, in order.
func (r *Recorder) work() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for len(r.queue) == 0 {
			if r.closing {
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			select {
			case <-r.wake:
			case <-r.ctx.Done():
				return
			}
			r.mu.Lock()
		}
		task := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.mu.Unlock()
		if r.ctx.Err() != nil {
			r.mu.Lock()
			r.failures++
			r.mu.Unlock()
			continue
		}
		if err := task(r.ctx); err != nil {
			r.mu.Lock()
			r.failures++
			r.mu.Unlock()
			r.log.Error("mcp-proxy: a record failed; the relay goes on", "session", r.cfg.Session, "err", err)
		}
	}
}

func (r *Recorder) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// enqueueLocked queues a record; r.mu is held.
func (r *Recorder) enqueueLocked(task func(context.Context) error) {
	if r.closing {
		r.dropped++
		return
	}
	if len(r.queue) >= maxQueue {
		r.dropped++
		r.log.Error("mcp-proxy: too many records waiting; one is dropped", "session", r.cfg.Session, "waiting", len(r.queue))
		return
	}
	r.queue = append(r.queue, task)
	r.signal()
}

// sandbox names the server that runs the calls, as a caller reports it.
func (r *Recorder) sandboxLocked() *events.Sandbox {
	id := r.server
	if id == "" {
		id = r.cfg.Name
	}
	return &events.Sandbox{Backend: Backend, SandboxID: id}
}

// requestedLocked records that the host called tool with args.
func (r *Recorder) requestedLocked(c *call, args []byte) {
	sb := r.sandboxLocked()
	r.enqueueLocked(func(ctx context.Context) error {
		arguments, err := r.arguments(ctx, args)
		if err != nil {
			return fmt.Errorf("call %s (%s): %w", c.id, c.tool, err)
		}
		var evs []event.Event
		for _, data := range []any{
			&events.ToolRequested{CallID: c.id, Tool: c.tool, Arguments: arguments, Runner: events.RunnerCaller},
			&events.ToolStarted{CallID: c.id, Tool: c.tool, Attempt: 1, Sandbox: sb},
		} {
			ev, err := events.New(r.cfg.Session, data, events.WithSource(Source))
			if err != nil {
				return fmt.Errorf("call %s (%s): %w", c.id, c.tool, err)
			}
			evs = append(evs, ev)
		}
		if _, err := r.cfg.Client.AppendAtomic(ctx, evs); err != nil {
			return fmt.Errorf("record call %s (%s): %w", c.id, c.tool, err)
		}
		return nil
	})
}

// arguments returns a call's arguments as its request keeps them: as
// sent, up to maxArguments bytes; a longer one as a JSON string that names
// the blob holding them.
func (r *Recorder) arguments(ctx context.Context, args []byte) ([]byte, error) {
	if len(args) == 0 {
		return nil, nil
	}
	if len(args) <= maxArguments {
		return args, nil
	}
	ref, err := r.cfg.Client.PutBlob(ctx, args)
	if err != nil {
		return nil, fmt.Errorf("store %d bytes of arguments: %w", len(args), err)
	}
	return fmt.Appendf(nil, "%q", fmt.Sprintf("[arguments: %d bytes in all: %s]", len(args), ref)), nil
}

// completedLocked records the call's result, text for a reader as the tool
// runner renders an MCP result.
func (r *Recorder) completedLocked(c *call, result string, at time.Time) {
	sb, dur := r.sandboxLocked(), at.Sub(c.start)
	r.enqueueLocked(func(ctx context.Context) error {
		done := &events.ToolCompleted{CallID: c.id, Tool: c.tool, Attempt: 1, DurationMS: dur.Milliseconds(), Sandbox: sb}
		var err error
		if done.Result, done.ResultRef, err = evidence.Keep(ctx, r.cfg.Client, strings.ToValidUTF8(result, "\uFFFD")); err != nil {
			return fmt.Errorf("call %s (%s): result: %w", c.id, c.tool, err)
		}
		if _, err := r.cfg.Client.Emit(ctx, r.cfg.Session, done, events.WithSource(Source)); err != nil {
			return fmt.Errorf("record the result of call %s (%s): %w", c.id, c.tool, err)
		}
		return nil
	})
}

// failLocked records the call's failure.
func (r *Recorder) failLocked(c *call, why string, at time.Time) {
	sb, dur := r.sandboxLocked(), at.Sub(c.start)
	why = evidence.Reason(why)
	r.enqueueLocked(func(ctx context.Context) error {
		f := &events.ToolFailed{CallID: c.id, Tool: c.tool, Attempt: 1, Error: why, DurationMS: dur.Milliseconds(), Sandbox: sb}
		if _, err := r.cfg.Client.Emit(ctx, r.cfg.Session, f, events.WithSource(Source)); err != nil {
			return fmt.Errorf("record the failure of call %s (%s): %w", c.id, c.tool, err)
		}
		return nil
	})
}

// newCallID returns a call ID no other call of the session has.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// identity is "<name>@<version>" bounded and printable, or "" when name
// is empty.
func identity(name, version string) string {
	clean := func(s string) string {
		s = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == utf8.RuneError {
				return -1
			}
			return r
		}, strings.ToValidUTF8(s, ""))
		return evidence.Prefix(strings.TrimSpace(s), maxIdentity/2)
	}
	name, version = clean(name), clean(version)
	switch {
	case name == "":
		return ""
	case version == "":
		return name
	}
	return name + "@" + version
}

// Session is the session the recorder records in.
func (r *Recorder) Session() string { return r.cfg.Session }
