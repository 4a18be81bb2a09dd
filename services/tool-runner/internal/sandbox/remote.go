package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// BackendRemote is the name of the backend that runs commands in a sandbox
// of a remote sandbox service speaking OpenSandbox's lifecycle and execd
// APIs (ADR 0041).
const BackendRemote = "remote"

// Remote configures the remote backend, on top of Config: the workspace's
// git repository stays on the runner, under Config.Root, and a sandbox of
// the service holds a copy of its files in which commands run.
type Remote struct {
	// URL is the service's base URL: the lifecycle API is under URL/v1.
	// It must be https, or http on a loopback address (a test or a local
	// service), and carry no user information.
	URL string
	// Key is the service's API key, sent as the OPEN-SANDBOX-API-KEY header
	// of every request, to URL's host only. It never appears in an error,
	// a log line or an event.
	Key string
	// Image is the container image of the sandboxes.
	Image string
	// Entrypoint is the sandbox's main process, which only has to keep it
	// alive.
	Entrypoint []string
	// Resources are the sandbox's resource limits as the service spells
	// them ("cpu": "1", "memory": "2Gi").
	Resources map[string]string
	// WorkDir is the absolute directory of the sandbox that holds the copy
	// of the workspace and in which commands run.
	WorkDir string
	// TTL is the sandbox's time to live, which the service counts from its
	// creation: a sandbox the runner forgets (a crash, a session that
	// ends) is deleted by the service when it expires. An expired sandbox
	// is created again, from the workspace, before the next command.
	TTL time.Duration
	// ExecdPort is the port of the sandbox's execution daemon, whose
	// endpoint the lifecycle API tells.
	ExecdPort int
	// StartTimeout bounds the wait for a new sandbox to be running.
	StartTimeout time.Duration
	// RequestTimeout bounds every request but a command's (which its own
	// timeout bounds): a service that stops answering fails the call
	// instead of holding it.
	RequestTimeout time.Duration
	// MaxFileBytes bounds one file the runner downloads, MaxBytes the bytes
	// downloaded after one command, MaxEntries the files a listing names.
	MaxFileBytes, MaxBytes int64
	MaxEntries             int
	// MaxStdin bounds a command's standard input, which travels inside the
	// command (execd's command has none).
	MaxStdin int
	// Transport carries the requests; nil is http.DefaultTransport. Tests
	// set it to trust their server's certificate.
	Transport http.RoundTripper
}

// DefaultRemote returns the defaults; URL and Image must still be set.
func DefaultRemote() Remote {
	return Remote{
		Entrypoint:     []string{"tail", "-f", "/dev/null"},
		Resources:      map[string]string{"cpu": "1", "memory": "2Gi"},
		WorkDir:        "/workspace",
		TTL:            time.Hour,
		ExecdPort:      44772,
		StartTimeout:   2 * time.Minute,
		RequestTimeout: 5 * time.Minute,
		MaxFileBytes:   64 << 20,
		MaxBytes:       256 << 20,
		MaxEntries:     20_000,
		MaxStdin:       64 << 10,
	}
}

// Validate reports every problem at once. Its errors name the URL without
// its query, and never the key.
func (r Remote) Validate() error {
	var errs []error
	u, err := url.Parse(r.URL)
	switch {
	case r.URL == "":
		errs = append(errs, errors.New("remote sandbox service URL is required"))
	case err != nil:
		errs = append(errs, errors.New("remote sandbox service URL does not parse"))
	case u.User != nil:
		errs = append(errs, errors.New("remote sandbox service URL must not carry user information: pass the key in the environment"))
	case u.Scheme == "https" && u.Host != "":
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
	default:
		errs = append(errs, fmt.Errorf("remote sandbox service URL %s://%s: want https (http only on a loopback address)", u.Scheme, u.Host))
	}
	if r.Image == "" {
		errs = append(errs, errors.New("remote sandbox image is required"))
	}
	if len(r.Entrypoint) == 0 {
		errs = append(errs, errors.New("remote sandbox entrypoint is required"))
	}
	if !strings.HasPrefix(r.WorkDir, "/") || cleanSlash(r.WorkDir) != r.WorkDir || r.WorkDir == "/" {
		errs = append(errs, fmt.Errorf("remote sandbox directory %q: want a clean absolute path below /", r.WorkDir))
	}
	if r.TTL < time.Minute {
		errs = append(errs, fmt.Errorf("remote sandbox time to live %v: want at least a minute", r.TTL))
	}
	if r.ExecdPort <= 0 || r.ExecdPort > 65535 {
		errs = append(errs, fmt.Errorf("remote sandbox execd port %d is out of range", r.ExecdPort))
	}
	if r.StartTimeout <= 0 || r.RequestTimeout <= 0 || r.MaxFileBytes <= 0 || r.MaxBytes <= 0 || r.MaxEntries <= 0 || r.MaxStdin <= 0 {
		errs = append(errs, errors.New("remote sandbox timeouts and size limits must be positive"))
	}
	return errors.Join(errs...)
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// NewRemote returns the remote backend. It keeps workspaces as Local does,
// in cfg.Root, and runs every command in a sandbox of the service rc names,
// one per session, made on the session's first command (remote_sync.go).
// Probe tells whether the service answers and accepts the key.
func NewRemote(cfg Config, rc Remote) (*Local, error) {
	if err := errors.Join(cfg.Validate(), rc.Validate()); err != nil {
		return nil, err
	}
	l, err := NewLocal(cfg)
	if err != nil {
		return nil, err
	}
	base, _ := url.Parse(strings.TrimSuffix(rc.URL, "/"))
	transport := rc.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	l.remote = &remote{
		cfg:  rc,
		base: base,
		http: &http.Client{
			Transport: transport,
			// A redirect could carry the key's requests elsewhere: none is
			// followed, and a 3xx is an error like any other status.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		boxes: map[string]*box{},
	}
	l.name = BackendRemote
	return l, nil
}

// remote is the remote backend's state, beside its Local.
type remote struct {
	cfg  Remote
	base *url.URL
	http *http.Client
	mu   sync.Mutex
	// boxes are the sandboxes of the workspaces, by workspace ID. A
	// workspace without one (the first command, a restarted runner, an
	// expired or discarded sandbox) gets a new one, filled from the
	// workspace.
	boxes map[string]*box
}

// box is one session's remote sandbox and what the runner knows it holds.
type box struct {
	mu   sync.Mutex // one command, and its syncs, at a time
	id   string     // the service's sandbox ID; empty until created
	exec *url.URL   // its execd endpoint
	// sent is what the runner last put in the sandbox or took from it, by
	// path relative to the workspace: the local file's identity then, to
	// tell a local change without reading the file.
	sent map[string]localFile
	// listed is the sandbox's files as its last listing named them, to
	// tell what a command changed.
	listed map[string]remoteFile
	// listedAt is when that listing was taken, by the service's clock
	// where it said (its Date header).
	listedAt time.Time
}

// boxOf returns the box of a workspace, made empty if it has none.
func (r *remote) boxOf(id string) *box {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.boxes[id]
	if b == nil {
		b = &box{}
		r.boxes[id] = b
	}
	return b
}

// Discard deletes the remote sandbox of a session's workspace, if this
// runner knows of one, and forgets it; the workspace itself stays, and a
// later command gets a new sandbox. It does nothing on other backends.
// The runner calls it when a session closes; a sandbox no runner discards
// is deleted by the service when its time to live ends.
func (l *Local) Discard(ctx context.Context, sessionID string) error {
	if l.remote == nil {
		return nil
	}
	id := l.name + "-" + sessionID
	l.remote.mu.Lock()
	b := l.remote.boxes[id]
	delete(l.remote.boxes, id)
	l.remote.mu.Unlock()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return l.remote.discard(ctx, b)
}

// Probe of the remote backend: GET /v1/sandboxes?pageSize=1 answers 200
// only for a service that is up and accepts the key.
func (r *remote) probe(ctx context.Context) error {
	var list struct {
		Items []any `json:"items"`
	}
	if err := r.call(ctx, r.lifecycle("sandboxes"), http.MethodGet, url.Values{"pageSize": {"1"}}, nil, "", &list, maxJSON); err != nil {
		return fmt.Errorf("probe %s: %w", BackendRemote, err)
	}
	return nil
}

// describe says where the backend runs commands, for Result.Limits and
// placements: the service's host, never its key.
func (r *remote) describe() string {
	return fmt.Sprintf("remote sandbox service %s (image %s); the service sets and enforces the limits", r.base.Host, r.cfg.Image)
}

// RemoteIsolation describes a placement on the remote backend; it is empty
// on other backends.
func (l *Local) RemoteIsolation() string {
	if l.remote == nil {
		return ""
	}
	return "remote: commands run in a sandbox of the service at " + l.remote.base.Host + ", isolated as the service isolates them (image " + l.remote.cfg.Image + "); the workspace's git repository and its evidence stay on the tool runner, which copies files to the sandbox before each command and takes back what the command changed"
}
