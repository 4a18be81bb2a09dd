package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// terminateAfter is how long a server has to exit once its stdin is closed,
// and again after SIGTERM, before it is killed.
const terminateAfter = 2 * time.Second

// stderrTail bounds what is kept of a server's stderr, for error messages.
const stderrTail = 2 << 10

// server is one server process and its MCP session.
type server struct {
	target Target
	// started is closed once the start ended; err is its failure.
	started chan struct{}
	err     error

	cmd     *exec.Cmd
	cs      *sdk.ClientSession
	scratch string // HOME, and the working directory of a listing
	stderr  *tail
	// gone is closed when the connection ended: the process exited, or
	// close closed it.
	gone      chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	inflight int
	last     time.Time
}

func pending(t Target) *server {
	return &server{target: t, started: make(chan struct{}), gone: make(chan struct{}), stderr: &tail{}}
}

// start starts the process and makes the MCP handshake; fail must follow.
// ctx bounds the start only: the process outlives it.
func (s *server) start(ctx context.Context, cfg Config) (err error) {
	spec := s.target.Server
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return fmt.Errorf("MCP server %s: no command", spec.Name)
	}
	if s.scratch, err = os.MkdirTemp(cfg.Scratch, "rath-mcp-"+spec.Name+"-"); err != nil {
		return fmt.Errorf("MCP server %s: %w", spec.Name, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(s.scratch)
		}
	}()
	home, dir := filepath.Join(s.scratch, "home"), s.target.Dir
	if dir == "" {
		dir = filepath.Join(s.scratch, "work")
	}
	for _, d := range []string{home, dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("MCP server %s: %w", spec.Name, err)
		}
	}
	path, err := lookPath(spec.Command[0], cfg.Path, dir)
	if err != nil {
		return fmt.Errorf("MCP server %s: %w", spec.Name, err)
	}
	s.cmd = &exec.Cmd{
		Path:   path,
		Args:   slices.Clone(spec.Command),
		Dir:    dir,
		Env:    environ(cfg.Path, home, spec.Env),
		Stderr: s.stderr,
		// Its own process group, so that close can stop what it started.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		// Bounds the wait for a stderr held open by a process it left behind.
		WaitDelay: terminateAfter,
	}
	contain := s.target.Contain
	if contain == nil {
		contain = cfg.Contain
	}
	if contain != nil {
		if err := contain(s.cmd); err != nil {
			return fmt.Errorf("MCP server %s: %w", spec.Name, err)
		}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "rath-tool-runner", Version: "1"}, nil)
	if s.target.Dir != "" {
		c.AddRoots(&sdk.Root{URI: (&url.URL{Scheme: "file", Path: s.target.Dir}).String(), Name: "workspace"})
	}
	s.cs, err = c.Connect(ctx, &sdk.CommandTransport{Command: s.cmd, TerminateDuration: terminateAfter}, nil)
	if err != nil {
		if s.cmd.Process != nil {
			killGroup(s.cmd.Process.Pid)
		}
		return s.describe(fmt.Errorf("start %s: %w", strings.Join(spec.Command, " "), err))
	}
	go func() {
		_ = s.cs.Wait()
		close(s.gone)
	}()
	s.last = time.Now()
	return nil
}

// fail ends a start, with err (nil: it succeeded).
func (s *server) fail(err error) {
	s.err = err
	close(s.started)
}

// ready reports whether the start ended well.
func (s *server) ready() bool {
	select {
	case <-s.started:
		return s.err == nil
	default:
		return false
	}
}

// exited reports whether the connection ended.
func (s *server) exited() bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}

// died reports whether a call failed because the connection ended. The
// connection notices the end of the process's output a moment after a call
// does: died waits for it, so the next call starts a new process.
func (s *server) died(err error) bool {
	if !errors.Is(err, io.EOF) && !errors.Is(err, sdk.ErrConnectionClosed) {
		return s.exited()
	}
	select {
	case <-s.gone:
	case <-time.After(terminateAfter):
	}
	return true
}

func (s *server) begin() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

func (s *server) end() {
	s.mu.Lock()
	s.inflight--
	s.last = time.Now()
	s.mu.Unlock()
}

// idleSince returns how long the server has had no call in progress; a
// server whose process exited is idle forever.
func (s *server) idleSince(now time.Time) time.Duration {
	if s.exited() {
		return time.Duration(1<<63 - 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight > 0 {
		return 0
	}
	return now.Sub(s.last)
}

// close ends the session, which closes the server's stdin and waits for it
// to exit (then SIGTERM, then SIGKILL), kills what is left of its process
// group and removes its scratch directory. It is safe to call twice.
func (s *server) close() {
	s.closeOnce.Do(func() {
		_ = s.cs.Close()
		killGroup(s.cmd.Process.Pid)
		os.RemoveAll(s.scratch)
	})
}

// describe adds the server's name and the end of its stderr to err.
func (s *server) describe(err error) error {
	msg := strings.TrimSpace(s.stderr.String())
	if msg == "" {
		return fmt.Errorf("MCP server %s: %w", s.target.Server.Name, err)
	}
	return fmt.Errorf("MCP server %s: %w (stderr: %s)", s.target.Server.Name, err, msg)
}

// environ is a server's whole environment: PATH and a HOME of its own, then
// what the workflow lists, which may override them. Nothing of the runner's
// environment (API keys included) reaches a server.
func environ(path, home string, extra map[string]string) []string {
	env := map[string]string{"PATH": path, "HOME": home}
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// lookPath finds a command as the server's own PATH would: a name with a
// slash is taken relative to dir, a bare name is looked up in path.
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if err := executable(name); err != nil {
			return "", err
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue // never the working directory
		}
		if p := filepath.Join(d, name); executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %s", name, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// killGroup kills a process group; ESRCH (nothing left) is the usual
// outcome.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD")
}
