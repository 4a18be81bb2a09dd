package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
)

// Bundle is a workflow file together with the script files its agents name:
// everything a worker on another machine needs to run the workflow. It is
// stored as one content-addressed blob, and a session records its reference
// (rath.session.started workflow_ref) next to the workflow file's hash.
type Bundle struct {
	// Path is the workflow file's name as given, for messages.
	Path string `json:"path"`
	// Spec is the workflow file's exact bytes.
	Spec []byte `json:"spec"`
	// Files holds each script by the path written in the spec.
	Files map[string][]byte `json:"files,omitempty"`
	// Tools holds each agent's tools (Agent.Tools) by the agent's name, so
	// that a custom tool server (pkg/toolserver) checks a call against the
	// requesting agent's list without parsing the spec: YAML and CEL stay
	// out of it. A bundle without it (written by an older rath start, or a
	// program that leaves it out) still opens; OpenBundle refuses one that
	// disagrees with its spec.
	Tools map[string][]string `json:"tools,omitempty"`
}

// NewBundle reads the scripts a parsed workflow names.
func NewBundle(w *Workflow) (Bundle, error) {
	b := Bundle{Path: w.path, Spec: w.source, Files: map[string][]byte{}, Tools: tools(w)}
	for _, a := range w.Agents {
		if a.Script == "" {
			continue
		}
		data, err := os.ReadFile(a.ScriptPath)
		if err != nil {
			return Bundle{}, fmt.Errorf("bundle %s: agent %s: %w", w.path, a.Name, err)
		}
		b.Files[a.Script] = data
	}
	return b, nil
}

// Marshal encodes the bundle for storage.
func (b Bundle) Marshal() ([]byte, error) { return json.Marshal(b) }

// OpenBundle decodes a stored bundle and parses its workflow. Its network
// entries must be well formed but may name any destination: the client that
// stored it checked them where it could (AllowNet), and the tool runner
// decides with its operator's allowlist, which the other services do not
// know.
func OpenBundle(data []byte) (*Workflow, Bundle, error) {
	var b Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, Bundle{}, fmt.Errorf("open workflow bundle: %w", err)
	}
	w, err := Parse(b.Spec, b.Path, netUnchecked)
	if err != nil {
		return nil, Bundle{}, err
	}
	for _, a := range w.Agents {
		if _, ok := b.Files[a.Script]; a.Script != "" && !ok {
			return nil, Bundle{}, fmt.Errorf("workflow bundle %s: agent %s: script %s missing", b.Path, a.Name, a.Script)
		}
	}
	if b.Tools != nil && !maps.EqualFunc(b.Tools, tools(w), slices.Equal) {
		return nil, Bundle{}, fmt.Errorf("workflow bundle %s: its tools table differs from the agents' tools in its spec", b.Path)
	}
	return w, b, nil
}

// tools is the bundle's table of each agent's tools ([] for none, so that
// every agent is named).
func tools(w *Workflow) map[string][]string {
	out := make(map[string][]string, len(w.Agents))
	for _, a := range w.Agents {
		out[a.Name] = append([]string{}, a.Tools...)
	}
	return out
}

// Loaded is a workflow opened from a bundle.
type Loaded struct {
	Workflow *Workflow
	Bundle   Bundle
}

// Library opens workflow bundles by reference once and keeps them: a bundle
// never changes under its content hash.
type Library struct {
	fetch func(ctx context.Context, ref string) ([]byte, error)
	mu    sync.Mutex
	byRef map[string]*Loaded
}

// NewLibrary returns a library that reads bundles with fetch (the blob store).
func NewLibrary(fetch func(ctx context.Context, ref string) ([]byte, error)) *Library {
	return &Library{fetch: fetch, byRef: map[string]*Loaded{}}
}

// ErrInvalidBundle marks Library.Get's error for a bundle that was read but
// does not open: reading it again cannot help, unlike a read that failed (a
// timeout while a NATS node is lost), which Get returns unmarked.
var ErrInvalidBundle = errors.New("invalid workflow bundle")

// Get returns the workflow of a bundle reference. A bundle that does not
// open is an error wrapping ErrInvalidBundle; a missing one wraps the
// fetch's not-found error (eventstore.ErrNotFound).
func (l *Library) Get(ctx context.Context, ref string) (*Loaded, error) {
	l.mu.Lock()
	got, ok := l.byRef[ref]
	l.mu.Unlock()
	if ok {
		return got, nil
	}
	data, err := l.fetch(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", ref, err)
	}
	w, b, err := OpenBundle(data)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w: %w", ref, ErrInvalidBundle, err)
	}
	got = &Loaded{Workflow: w, Bundle: b}
	l.mu.Lock()
	l.byRef[ref] = got
	l.mu.Unlock()
	return got, nil
}

// ErrBundle marks an error of Store in reading the workflow's scripts (the
// user's files), as opposed to storing the bundle.
var ErrBundle = errors.New("cannot bundle the workflow")

// Store bundles w (its file and the scripts it names) and stores the bundle
// with put (a client's PutBlob, or the event store's), returning the
// reference a session starts with as its workflow_ref. A script that cannot
// be read is an error wrapping ErrBundle.
func Store(ctx context.Context, w *Workflow, put func(context.Context, []byte) (string, error)) (string, error) {
	b, err := NewBundle(w)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBundle, err)
	}
	raw, err := b.Marshal()
	if err != nil {
		return "", fmt.Errorf("bundle %s: %w", w.path, err)
	}
	ref, err := put(ctx, raw)
	if err != nil {
		return "", fmt.Errorf("store workflow %s: %w", w.path, err)
	}
	return ref, nil
}
