// Package sandbox places each session's side effects in a workspace of its
// own: a git repository whose commits are the evidence of what a tool changed,
// and in which commands run with a timeout, resource limits, a scrubbed
// environment and capped output.
//
// The local backend (Local) confines file tools to the workspace (Resolve) and
// bounds commands, but it is not an isolation boundary: a command runs as the
// runner's user and can read or write anything that user can. Backends that
// isolate (containers, microVMs) implement the same Backend and Workspace.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Backend places workspaces.
type Backend interface {
	// Place creates the workspace of a session, empty, from a directory or as
	// a fork of another workspace at one of its commits (see Seed). It
	// returns ErrExists if the session already has a workspace.
	Place(ctx context.Context, sessionID string, from *Seed) (Workspace, error)
}

// Workspace is one session's sandbox. Its methods may be called from several
// goroutines, but a session's tool calls are meant to run one at a time: a
// command running while Commit stages files makes the commit's content
// depend on timing.
type Workspace interface {
	// ID names the sandbox within its backend (sandbox_id in events).
	ID() string
	// Backend names the backend, for example "local".
	Backend() string
	// Host is the host that runs the sandbox.
	Host() string
	// Dir is the workspace directory: absolute, free of symbolic links, and
	// the root of a git repository whose .git directory is inside it.
	Dir() string

	// Head returns the commit the workspace is at.
	Head(ctx context.Context) (string, error)
	// Commit stages every change (honouring .gitignore) and commits it if
	// anything changed. It returns HEAD either way.
	Commit(ctx context.Context, message string) (string, error)
	// Diff returns the unified diff between two commits.
	Diff(ctx context.Context, from, to string) (string, error)
	// Run runs a command in the workspace directory. A command that fails,
	// times out or is killed is a Result, not an error; errors are the
	// sandbox's own failures and a cancelled ctx.
	Run(ctx context.Context, c Cmd) (Result, error)
	// Resolve maps a path relative to the workspace to an absolute path
	// under Dir, for file tools. It returns an error wrapping ErrEscape for an
	// absolute path, a path leaving the workspace lexically or through a
	// symbolic link, and a path inside .git.
	Resolve(rel string) (string, error)
}

// Seed says what a new workspace starts from. The zero Seed (or a nil *Seed)
// is an empty workspace with one empty commit, so that Head always names a
// commit.
type Seed struct {
	// Archive is a seed archive (a tar stream, gzip-compressed or not, as
	// client.PackWorkspace makes it) unpacked and committed as the first
	// commit. A session's seed is always one: it travels from the client
	// as content, and the runner reads no path a session names (ADR 0031).
	Archive []byte
	// Dir is a directory of the runner's host whose files are copied in
	// (without any .git) and committed as the first commit: for the
	// runner's own tests and probes, never from a session.
	Dir string
	// Parent and Commit fork: the workspace starts at Commit of Parent's
	// history and holds nothing later, so the two never see each other's
	// side effects.
	Parent Workspace
	Commit string
	// Bundle and Commit move a workspace from another host: the
	// workspace holds the bundle's history (Local.Bundle) at Commit.
	Bundle []byte
	// Tenant is the tenant of the session: the isolating backend runs its
	// commands as the tenant's user, with the tenant's caches. Empty is
	// the default tenant.
	Tenant string
}

// Cmd is one command to run.
type Cmd struct {
	// Args is the argv; Args[0] is looked up in the sandbox's PATH. No shell
	// is involved unless Args asks for one, as in {"sh", "-c", script}.
	Args []string
	// Stdin is the command's standard input; nil is empty.
	Stdin io.Reader
	// Timeout bounds the run's wall-clock time; zero means the backend's
	// default, and a timeout above the backend's maximum is lowered to it.
	Timeout time.Duration
	// Hosts are the destinations the command may reach on the isolating
	// backend, through its proxy (see ParseHosts): none means no network.
	// The local backend does not restrict the network and ignores them.
	Hosts []string
}

// Result is the outcome of a command.
type Result struct {
	// ExitCode is the exit status, or 128+signal for a command killed by a
	// signal (the shell convention), or 127 when the command could not be
	// started (not found, not executable).
	ExitCode int
	// Stdout and Stderr hold at most the backend's output cap each.
	Stdout, Stderr string
	// StdoutBytes and StderrBytes count everything the command wrote.
	StdoutBytes, StderrBytes int64
	// Truncated is true if either stream was longer than the cap.
	Truncated bool
	// TimedOut is true if the timeout expired and the sandbox killed the
	// command's process group.
	TimedOut bool
	// Killed is true if the command ended by a signal: the sandbox's kill on
	// timeout or cancellation, or a resource limit (SIGXCPU, SIGXFSZ).
	Killed bool
	// Duration is the wall-clock time of the run.
	Duration time.Duration
	// Stopped names the limit that ended the command, when its outcome
	// says so for certain ("wall-time limit 2m0s", "CPU-time limit 10m0s
	// of a process", "CPU-time limit 30m0s of the call …", "memory limit
	// … of the call …", "process limit … of the call …", "file-size
	// limit"), or the signal that killed it; empty otherwise.
	Stopped string
	// Limits describes the limits the command ran under, including any that
	// could not be applied.
	Limits string
	// Network is what the sandbox's proxy allowed and refused, one entry a
	// connection ("CONNECT example.com:443 refused"), on the isolating
	// backend with Hosts.
	Network []string
}

// ErrEscape is wrapped by Resolve's errors (see PathError) for paths file
// tools must not touch.
var ErrEscape = errors.New("path escapes the workspace")

// ErrExists is returned by Place for a session that already has a workspace.
var ErrExists = errors.New("workspace already exists")

// ErrNotFound is returned by Open for a session without a workspace.
var ErrNotFound = errors.New("workspace not found")

// PathError is a path file tools may not use, and why. It wraps ErrEscape.
type PathError struct {
	Path   string
	Reason string
}

// Error names the path and the reason.
func (e *PathError) Error() string { return fmt.Sprintf("path %q: %s", e.Path, e.Reason) }

// Unwrap returns ErrEscape.
func (e *PathError) Unwrap() error { return ErrEscape }
