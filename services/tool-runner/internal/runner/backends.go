package runner

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Backend is one sandbox backend the runner places workspaces with.
type Backend struct {
	*sandbox.Local
	// Isolation says what a placement on the backend isolates for the
	// sessions of a tenant; it is recorded in rath.sandbox.placed.
	Isolation func(tenant string) string
}

// Backends are the sandbox backends of one runner, by name: those it can
// run here, and the known ones it cannot, with why. Each keeps its
// workspaces under a root of its own, so a placement's directory names the
// backend that holds it.
type Backends struct {
	def    string
	ready  map[string]Backend
	broken map[string]error
}

// NewBackends returns the backends; def, the backend of a session whose
// workflow names none, must be one of ready.
func NewBackends(def string, ready map[string]Backend, broken map[string]error) (*Backends, error) {
	if _, ok := ready[def]; !ok {
		return nil, fmt.Errorf("default sandbox backend %s: %w", def, (&Backends{ready: ready, broken: broken}).why(def))
	}
	roots := map[string]string{}
	for name, b := range ready {
		_, root := b.Location()
		if other, ok := roots[root]; ok {
			return nil, fmt.Errorf("sandbox backends %s and %s share the root %s", other, name, root)
		}
		roots[root] = name
	}
	return &Backends{def: def, ready: ready, broken: broken}, nil
}

// Default is the backend of a session whose workflow and agent name none.
func (b *Backends) Default() string { return b.def }

// Get returns a backend the runner can run, or an error saying why it
// cannot: a name Rath does not know, or why the backend does not work here.
func (b *Backends) Get(name string) (Backend, error) {
	if be, ok := b.ready[name]; ok {
		return be, nil
	}
	return Backend{}, b.why(name)
}

func (b *Backends) why(name string) error {
	if err, ok := b.broken[name]; ok {
		var denied *NotAllowedError
		if errors.As(err, &denied) {
			return denied // it works; the operator keeps sessions off it
		}
		return &UnavailableError{Backend: name, Err: err}
	}
	if !slices.Contains(events.Backends(), name) {
		return fmt.Errorf("unknown sandbox backend %q (backends: %s)", name, strings.Join(events.Backends(), ", "))
	}
	return &UnavailableError{Backend: name, Err: errors.New("this tool runner was not configured with it")}
}

// all lists the backends the runner can run, by name.
func (b *Backends) all() []Backend {
	out := make([]Backend, 0, len(b.ready))
	for _, name := range slices.Sorted(maps.Keys(b.ready)) {
		out = append(out, b.ready[name])
	}
	return out
}

// UnavailableError is a sandbox backend the runner cannot place a session
// on, and why.
type UnavailableError struct {
	Backend string
	Err     error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sandbox backend %s does not work on this tool runner: %v", e.Backend, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// NotAllowedError is a backend that works here but that the runner's
// operator does not let sessions use: local, while the default isolates
// and the runner was not started with --sandbox-allow-local.
type NotAllowedError struct {
	Backend string
	// Default is the runner's default backend, which isolates.
	Default string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("sandbox backend %s is not allowed on this tool runner: its default, %s, isolates, and its operator has not let sessions leave isolation (start rath up, or the tool runner, with --sandbox-allow-local to allow it)", e.Backend, e.Default)
}
