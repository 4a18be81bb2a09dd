package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// BackendLocal is the name of the local backend.
const BackendLocal = "local"

// Limits bound each command a workspace runs.
type Limits struct {
	// Timeout is the wall-clock limit of a Cmd without its own.
	Timeout time.Duration
	// MaxTimeout caps a Cmd's own timeout.
	MaxTimeout time.Duration
	// CPU is RLIMIT_CPU (rounded up to seconds); zero leaves it unlimited.
	CPU time.Duration
	// Memory is RLIMIT_AS, the address space in bytes; zero leaves it
	// unlimited. Address space is not resident memory: runtimes that reserve
	// large ranges up front (the Go race detector, some JVMs) need it off.
	Memory int64
	// OpenFiles is RLIMIT_NOFILE; zero leaves it as inherited.
	OpenFiles int64
	// FileSize is RLIMIT_FSIZE, the largest file a command may write, in
	// bytes; zero leaves it unlimited.
	FileSize int64
	// Output caps what is kept of stdout and of stderr, in bytes each. The
	// rest is read and counted, never buffered.
	Output int64

	// CallMemory, CallProcesses and CallCPU bound all of a command's
	// processes together, through a control group of the call's own
	// (cgroup.go), where the host has one for the runner: memory in bytes
	// (resident, page cache and swap), processes at once, CPU time. Zero
	// leaves one unlimited. Without cgroups they do not hold, and only the
	// per-process limits above do: Result.Limits says which.
	CallMemory    int64
	CallProcesses int64
	CallCPU       time.Duration
}

// Config configures the local backend.
type Config struct {
	// Root holds one workspace per session, named by the session ID, and the
	// backend's scratch directories (names starting with a dot).
	Root string
	// Host is reported as the workspaces' host; empty means os.Hostname.
	Host string
	// Path is the PATH commands see.
	Path string
	// Env adds KEY=VALUE entries to every command's environment, after the
	// defaults (PATH, HOME, TMPDIR, LANG), which they may override. Nothing
	// else of the runner's environment reaches a command: pass GOCACHE,
	// GOPATH, GOFLAGS, GOPROXY=off and the like here.
	Env []string
	// Git is the git binary the backend itself uses; empty means "git" in
	// the runner's PATH.
	Git string
	// Helper is the spawn helper commands start as (package spawn) on the
	// isolating backend, and on the local one where it cannot trace its
	// commands (trace.go): the binary services/tool-runner/rath-sandbox-exec
	// builds. Empty means
	// HelperName beside the runner's executable when it is there, else the
	// runner's own binary (/proc/self/exe), which works as the helper too
	// but whose size costs each command its start: ~20–30 ms of CPU for
	// rath, against ~10 ms for the helper (docs/benchmarks.md).
	Helper string
	// NoTrace makes the local backend set a command's limits through the
	// helper even where the kernel lets the runner trace its commands,
	// which saves each command the helper's start (trace.go).
	NoTrace bool
	// NoCgroup runs commands without a control group of their own even
	// where the host has one for the runner: the call's limits as a whole
	// (Limits.CallMemory, CallProcesses, CallCPU) do not hold then.
	NoCgroup bool
	// Limits bound every command.
	Limits Limits
	// Net is what the operator lets commands reach beyond public
	// destinations, when their workflow names it (network.go).
	Net Net
}

// DefaultConfig returns the defaults; Root must still be set.
func DefaultConfig() Config {
	return Config{
		Path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		Limits: Limits{
			Timeout:    2 * time.Minute,
			MaxTimeout: 30 * time.Minute,
			CPU:        10 * time.Minute,
			Memory:     8 << 30,
			OpenFiles:  4096,
			FileSize:   1 << 30,
			Output:     1 << 20,

			CallMemory:    4 << 30,
			CallProcesses: 1024,
			CallCPU:       30 * time.Minute,
		},
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("sandbox root directory is required"))
	}
	if c.Path == "" {
		errs = append(errs, errors.New("sandbox PATH is required"))
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("sandbox environment entry %q is not KEY=VALUE", kv))
		}
	}
	l := c.Limits
	if l.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("default timeout must be positive, got %v", l.Timeout))
	}
	if l.MaxTimeout < l.Timeout {
		errs = append(errs, fmt.Errorf("maximum timeout %v is below the default timeout %v", l.MaxTimeout, l.Timeout))
	}
	if l.CPU < 0 || l.Memory < 0 || l.OpenFiles < 0 || l.FileSize < 0 || l.CallMemory < 0 || l.CallProcesses < 0 || l.CallCPU < 0 {
		errs = append(errs, errors.New("resource limits must not be negative"))
	}
	if l.Output <= 0 {
		errs = append(errs, fmt.Errorf("output cap must be positive, got %d", l.Output))
	}
	return errors.Join(errs...)
}

// Local is the backend that keeps workspaces in directories of this host.
type Local struct {
	name    string     // BackendLocal or BackendBwrap
	iso     *isolation // nil for the local backend
	remote  *remote    // non-nil for the remote backend (remote.go)
	cfg     Config
	root    string // cfg.Root, absolute and free of symbolic links
	host    string
	git     string
	helper  string       // the spawn helper's path (Config.Helper)
	gitHome string       // empty HOME of the backend's own git commands
	runs    string       // parent of per-run temporary directories
	staging string       // where Place builds a workspace before renaming it in
	gitRuns atomic.Int64 // git processes run, for tests

	traceOnce sync.Once // probes whether commands can start traced (trace.go)
	traceErr  error     // why not, or nil
	// traceRefused is set when a traced start was refused after the probe
	// allowed it: commands go through the helper from then on.
	traceRefused atomic.Bool
}

// Location is where this backend keeps workspaces: its host and root.
func (l *Local) Location() (host, root string) { return l.host, l.root }

// Holds reports whether a workspace directory (as recorded in a placement)
// is one of this backend's, on this host.
func (l *Local) Holds(host, dir string) bool {
	return host == l.host && filepath.Dir(filepath.Clean(dir)) == l.root
}

// NewLocal prepares the root directory.
func NewLocal(cfg Config) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox root: %w", err)
	}
	root, err := filepath.Abs(cfg.Root)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox root: %w", err)
	}
	l := &Local{
		name:    BackendLocal,
		cfg:     cfg,
		root:    root,
		host:    cfg.Host,
		gitHome: filepath.Join(root, ".git-home"),
		runs:    filepath.Join(root, ".runs"),
		staging: filepath.Join(root, ".staging"),
	}
	for _, d := range []string{l.gitHome, l.runs, l.staging, filepath.Join(root, ".tenants")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox root: %w", err)
		}
	}
	if l.host == "" {
		if l.host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("sandbox host: %w", err)
		}
	}
	l.git = cfg.Git
	if l.git == "" {
		l.git = "git"
	}
	if l.git, err = exec.LookPath(l.git); err != nil {
		return nil, fmt.Errorf("sandbox git: %w", err)
	}
	if l.helper, err = helperPath(cfg.Helper); err != nil {
		return nil, err
	}
	return l, nil
}

// HelperName is the spawn helper's binary, looked for beside the runner's.
const HelperName = "rath-sandbox-exec"

// selfExe is the runner's own binary, the helper when no other is found.
const selfExe = "/proc/self/exe"

// helperPath resolves Config.Helper: a path given must be an executable
// file; none given, HelperName beside this executable, else selfExe.
func helperPath(given string) (string, error) {
	if given != "" {
		abs, err := filepath.Abs(given)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(abs); err == nil && !executable(fi) {
				err = errors.New("not an executable file")
			}
		}
		if err != nil {
			return "", fmt.Errorf("sandbox helper %s: %w", given, err)
		}
		return abs, nil
	}
	self, err := os.Executable()
	if err != nil {
		return selfExe, nil
	}
	beside := filepath.Join(filepath.Dir(self), HelperName)
	if fi, err := os.Stat(beside); err == nil && executable(fi) {
		return beside, nil
	}
	return selfExe, nil
}

func executable(fi os.FileInfo) bool { return fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 }

// Helper is the spawn helper this backend starts commands as where it
// does not trace them (LimitsBy).
func (l *Local) Helper() string { return l.helper }

// Place implements Backend. The workspace is built in a staging directory
// and renamed into place, so a crash never leaves a half-made workspace
// behind a session's name, and two racing Places of one session cannot both
// succeed.
func (l *Local) Place(ctx context.Context, sessionID string, from *Seed) (Workspace, error) {
	if err := events.ValidateSessionID(sessionID); err != nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	if from == nil {
		from = &Seed{}
	}
	dir := filepath.Join(l.root, sessionID)
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, ErrExists)
	}
	stage, err := os.MkdirTemp(l.staging, sessionID+"-")
	if err != nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	defer os.RemoveAll(stage)
	if err := os.Chmod(stage, 0o755); err != nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	if err := l.seed(ctx, stage, from); err != nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	if err := os.WriteFile(l.tenantFile(sessionID), []byte(events.TenantOrDefault(from.Tenant)), 0o644); err != nil {
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	if err := os.Rename(stage, dir); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil, fmt.Errorf("place %s: %w", sessionID, ErrExists)
		}
		return nil, fmt.Errorf("place %s: %w", sessionID, err)
	}
	return l.workspace(sessionID, dir), nil
}

// Open returns the workspace a previous Place made, for example after the
// runner restarted. It returns ErrNotFound if there is none.
func (l *Local) Open(sessionID string) (Workspace, error) {
	if err := events.ValidateSessionID(sessionID); err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", sessionID, err)
	}
	dir := filepath.Join(l.root, sessionID)
	if fi, err := os.Stat(filepath.Join(dir, ".git")); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("open workspace %s: %w", sessionID, ErrNotFound)
	}
	return l.workspace(sessionID, dir), nil
}

func (l *Local) workspace(sessionID, dir string) *localWorkspace {
	return &localWorkspace{l: l, id: l.name + "-" + sessionID, dir: dir, tenant: l.tenantOf(sessionID)}
}

// branch is the one branch of every workspace.
const branch = "session"

// seed fills the empty directory dir as from says.
func (l *Local) seed(ctx context.Context, dir string, from *Seed) error {
	switch {
	case (from.Dir != "" || from.Archive != nil) && (from.Parent != nil || from.Commit != "" || from.Bundle != nil),
		from.Dir != "" && from.Archive != nil, from.Parent != nil && from.Bundle != nil:
		return errors.New("seed: a directory, an archive, a parent and a bundle are exclusive")
	case from.Bundle != nil:
		return l.fromBundle(ctx, dir, from.Bundle, from.Commit)
	case from.Parent != nil:
		return l.fork(ctx, dir, from.Parent, from.Commit)
	case from.Commit != "":
		return errors.New("seed: a commit needs a parent workspace or a bundle")
	}
	msg := "empty workspace"
	if from.Dir != "" {
		if err := copyTree(from.Dir, dir); err != nil {
			return fmt.Errorf("seed from %s: %w", from.Dir, err)
		}
		msg = "seed from " + filepath.Base(from.Dir)
	}
	if from.Archive != nil {
		if err := unpack(from.Archive, dir); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		msg = "seed"
	}
	// Written in process (gitinit.go), unless the tree needs git's rules.
	if _, err := writeRepo(dir, branch, msg, time.Now()); !errors.Is(err, errNeedsGit) {
		return err
	}
	if _, err := l.runGit(ctx, dir, "init", "--quiet", "--initial-branch="+branch); err != nil {
		return err
	}
	if _, err := l.runGit(ctx, dir, "add", "--all"); err != nil {
		return err
	}
	_, err := l.runGit(ctx, dir, "commit", "--quiet", "--no-verify", "--allow-empty", "--message", msg)
	return err
}

// fork makes dir a repository holding the parent's history up to commit and
// nothing after it: fetching one commit transfers only what it reaches, so
// the parent's later commits, branches and tags never exist in the fork.
func (l *Local) fork(ctx context.Context, dir string, parent Workspace, commit string) error {
	if _, ok := parent.(*localWorkspace); !ok {
		return fmt.Errorf("seed: cannot fork a %s workspace on this host", parent.Backend())
	}
	if err := checkCommit(commit); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	full, err := l.runGit(ctx, parent.Dir(), "rev-parse", "--verify", "--quiet", "--end-of-options", commit+"^{commit}")
	if err != nil {
		return fmt.Errorf("seed: commit %s of %s: %w", commit, parent.ID(), err)
	}
	full = strings.TrimSpace(full)
	if _, err := l.runGit(ctx, dir, "init", "--quiet", "--initial-branch="+branch); err != nil {
		return err
	}
	if _, err := l.runGit(ctx, dir, "fetch", "--quiet", "--no-tags", "--end-of-options", parent.Dir(), full); err != nil {
		return err
	}
	_, err = l.runGit(ctx, dir, "checkout", "--quiet", "-B", branch, full)
	return err
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{4,64}$`)

// checkCommit admits commit hashes only, so that a caller's string is never
// read by git as an option or a revision expression.
func checkCommit(c string) error {
	if !commitRE.MatchString(c) {
		return fmt.Errorf("%q is not a commit hash", c)
	}
	return nil
}

// gitConfig pins every setting the backend's own git commands depend on and
// disables what a command run in the workspace could plant in .git/config
// to have the runner execute it: hooks, fsmonitor, external diff drivers.
var gitConfig = []string{
	"-c", "user.name=rath",
	"-c", "user.email=rath@localhost",
	"-c", "commit.gpgsign=false",
	"-c", "tag.gpgsign=false",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.autocrlf=false",
	"-c", "init.templateDir=",
	"-c", "advice.detachedHead=false",
	// A commit would start `git maintenance run --auto`: one process more
	// per call, for repositories that live as long as a session.
	"-c", "maintenance.auto=false",
	"-c", "gc.auto=0",
	// The isolating backend hands workspaces to a sandbox user; the
	// runner's git must still work in them.
	"-c", "safe.directory=*",
}

// runGit runs the backend's git in dir and returns its stdout. The
// environment is built from nothing: no global or system configuration, a
// HOME without dotfiles, no prompts.
func (l *Local) runGit(ctx context.Context, dir string, args ...string) (string, error) {
	l.gitRuns.Add(1)
	cmd := exec.CommandContext(ctx, l.git, append(append([]string{}, gitConfig...), args...)...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + l.cfg.Path,
		"HOME=" + l.gitHome,
		"LANG=C",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return stdout.String(), nil
}

// localWorkspace is a workspace of the local backend.
type localWorkspace struct {
	l      *Local
	id     string
	dir    string
	tenant string     // the tenant Place recorded for the session
	mu     sync.Mutex // serialises git commands that take the index lock
	// seen is what Head last saw: the commit, the tree's fingerprint and
	// the entries it read by content. A Commit that finds the same
	// fingerprint knows nothing changed and runs no git (see tree.go).
	seen struct {
		commit, tree string
		racy         map[string]bool
	}
}

func (w *localWorkspace) ID() string      { return w.id }
func (w *localWorkspace) Backend() string { return w.l.name }

// tenantOf is the tenant Place recorded for a session's workspace.
func (l *Local) tenantOf(sessionID string) string {
	b, err := os.ReadFile(l.tenantFile(sessionID))
	if err != nil || events.ValidateTenant(string(b)) != nil {
		return events.TenantOrDefault("")
	}
	return string(b)
}
func (w *localWorkspace) Host() string { return w.l.host }
func (w *localWorkspace) Dir() string  { return w.dir }

// Head returns the commit the workspace is at, and remembers it with the
// tree's fingerprint for the next Commit.
func (w *localWorkspace) Head(ctx context.Context) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	head, err := w.head(ctx)
	if err != nil {
		return "", err
	}
	tree, racy, err := fingerprint(w.dir, nil)
	if err != nil {
		tree = "" // Commit asks git
	}
	w.seen.commit, w.seen.tree, w.seen.racy = head, tree, racy
	return head, nil
}

// head reads HEAD from .git, or asks git when the files cannot tell. The
// caller holds w.mu.
func (w *localWorkspace) head(ctx context.Context) (string, error) {
	if commit, ok := readHead(filepath.Join(w.dir, ".git")); ok {
		return commit, nil
	}
	out, err := w.l.runGit(ctx, w.dir, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", fmt.Errorf("head of %s: %w", w.id, err)
	}
	return strings.TrimSpace(out), nil
}

func (w *localWorkspace) Commit(ctx context.Context, message string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.TrimSpace(message) == "" {
		message = "checkpoint"
	}
	if w.seen.tree != "" {
		// Nothing changed since Head (same files, same times, same HEAD):
		// nothing to stage, nothing to commit.
		tree, _, err := fingerprint(w.dir, w.seen.racy)
		head, ok := readHead(filepath.Join(w.dir, ".git"))
		if err == nil && ok && tree == w.seen.tree && head == w.seen.commit {
			return head, nil
		}
	}
	w.seen.commit, w.seen.tree, w.seen.racy = "", "", nil
	if _, err := w.l.runGit(ctx, w.dir, "add", "--all"); err != nil {
		return "", fmt.Errorf("commit %s: %w", w.id, err)
	}
	// Committing only when the index differs from HEAD keeps "nothing
	// changed" a no-op instead of an empty commit per call.
	staged, err := w.l.runGit(ctx, w.dir, "diff", "--cached", "--name-only", "--no-ext-diff")
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", w.id, err)
	}
	if staged != "" {
		if _, err := w.l.runGit(ctx, w.dir, "commit", "--quiet", "--no-verify", "--message", message); err != nil {
			return "", fmt.Errorf("commit %s: %w", w.id, err)
		}
	}
	return w.head(ctx)
}

func (w *localWorkspace) Diff(ctx context.Context, from, to string) (string, error) {
	if err := checkCommit(from); err != nil {
		return "", fmt.Errorf("diff %s: %w", w.id, err)
	}
	if err := checkCommit(to); err != nil {
		return "", fmt.Errorf("diff %s: %w", w.id, err)
	}
	out, err := w.l.runGit(ctx, w.dir, "diff", "--no-color", "--no-ext-diff", "--no-textconv", from, to, "--")
	if err != nil {
		return "", fmt.Errorf("diff %s: %w", w.id, err)
	}
	return out, nil
}

func (w *localWorkspace) Resolve(rel string) (string, error) {
	return resolve(w.dir, rel)
}
