package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A session's placement is state: the last rath.sandbox.placed of its
// logical log says on which backend, host and directory its workspace is.
// The backend is chosen once, at the first placement (place): the sandbox of
// the agent whose tool call it is, else the workflow's, else the runner's
// default; a fork takes its parent's. After that only a move (move.go)
// changes it.

// placeError is a placement the runner will not make: the tool call fails
// with it, naming the backend and why.
type placeError struct{ why string }

func (e *placeError) Error() string { return e.why }

// refusal is a move's answer to err: a placement the runner will not make
// is refused with its reason; any other error is returned to be retried.
func refusal(err error) (why string, _ error) {
	var refused *placeError
	if errors.As(err, &refused) {
		return refused.why, nil
	}
	return "", err
}

// placeAttempts bounds how often place decides again after the session's
// head moved under it; the handler is then retried.
const placeAttempts = 8

// place returns the session's workspace, placing it on first use: a fresh
// workspace from the session's seed, or, for a fork that inherited its
// parent's placement, a workspace of its own on the parent's backend,
// materialised at the commit the parent's workspace had at the fork point.
// The placement is an event, appended expecting the head st was read at:
// the session shows one placement even when an earlier attempt of the call
// placed it and the ledger stored that placement after st was read (a call
// retried under overload, redelivered to another runner while the first
// runner's append was still in flight). On a stale head the state is read
// again and the decision made again: it then finds the placement recorded,
// its own workspace or another runner's, which the call is handed over to.
func (r *Runner) place(ctx context.Context, st *session.State, ev events.Stored, req *events.ToolRequested, takeOver bool) (sandbox.Workspace, error) {
	for attempt := 1; ; attempt++ {
		ws, err := r.placeAt(ctx, st, ev, req, takeOver)
		if !errors.Is(err, api.ErrStale) || attempt == placeAttempts {
			return ws, err
		}
		if st, err = r.states.StateSince(ctx, ev.Session, ev.Seq); err != nil {
			return nil, err
		}
	}
}

// placeAt is one attempt of place, decided on st.
func (r *Runner) placeAt(ctx context.Context, st *session.State, ev events.Stored, req *events.ToolRequested, takeOver bool) (sandbox.Workspace, error) {
	lost := ""
	p := st.Sandbox
	own := p != nil && p.Session == st.ID
	if own {
		b, err := r.backends.Get(p.Backend)
		switch {
		case err == nil && b.Holds(p.Host, p.Workspace):
			ws, err := b.Open(st.ID)
			if err == nil {
				return ws, nil
			}
			if !errors.Is(err, sandbox.ErrNotFound) {
				return nil, err
			}
			// Placed by a runner that crashed before the workspace existed:
			// place again below.
		case !takeOver:
			// Placing it again here would lose the workspace's changes:
			// the runner holding it runs the call.
			return nil, &elsewhere{host: p.Host, root: filepath.Dir(p.Workspace)}
		case events.PoolOf(p.Pool) != r.Pool():
			// That runner is gone; another of its pool places it again.
			return nil, r.takeOverIn(ctx, p, ev)
		case err != nil:
			return nil, &placeError{fmt.Sprintf("the session's workspace on %s:%s did not answer, and this tool runner cannot place it again: %v", p.Host, p.Workspace, err)}
		default:
			// That runner is gone. Place again below, and say what was lost.
			r.log.Warn("taking over a session whose runner is gone", "session", st.ID, "host", p.Host, "workspace", p.Workspace)
			lost = fmt.Sprintf("; the workspace on %s:%s did not answer, its changes since commit %s are lost", p.Host, p.Workspace, p.Commit)
		}
	}
	var (
		name, by string
		err      error
	)
	switch {
	case own:
		name, by = p.Backend, "where the session was placed"
	case p != nil && p.Session != "":
		name, by = p.Backend, "the parent's"
	default:
		if p == nil && r.Pool() != events.PoolDefault {
			if handed, err := r.startInDefault(ctx, ev); handed || err != nil {
				if err == nil {
					err = errHandedOver
				}
				return nil, err
			}
		}
		if name, by, err = r.choose(ctx, st, req.Agent); err != nil {
			return nil, err
		}
	}
	b, err := r.backends.Get(name)
	if err != nil {
		return nil, &placeError{fmt.Sprintf("cannot place the session on %s (%s): %v", name, by, err)}
	}
	var (
		seed   *sandbox.Seed
		reason = "first tool call"
	)
	switch {
	case !own && p != nil && p.Session != "":
		parent, err := b.Open(p.Session)
		if err != nil {
			return nil, fmt.Errorf("fork %s: parent workspace %s: %w", st.ID, p.Session, err)
		}
		commit := forkCommit(st)
		seed, reason = &sandbox.Seed{Parent: parent, Commit: commit}, fmt.Sprintf("fork of %s at commit %s", p.Session, commit)
	case st.Labels[LabelWorkspace] != "":
		if seed, err = r.labelSeed(ctx, st); err != nil {
			return nil, err
		}
		reason = seededFrom(st)
	}
	ws, err := r.make(ctx, b, st, seed)
	if err != nil {
		return nil, err
	}
	placed, err := r.placed(ctx, b, st, ws, fmt.Sprintf("%s, on %s (%s)%s", reason, name, by, lost))
	if err != nil {
		return nil, err
	}
	// Recorded once per workspace, whichever call placed it: the ID is
	// derived from the session and the workspace, not from the call; and
	// once per session, whichever runner placed it: the append expects the
	// head the placement was decided on.
	if _, err := r.c.Emit(ctx, st.ID, placed, append(answer.To(ev, Durable, Source).Links(),
		events.WithID(events.DerivedID(Durable, st.ID, "placed", ws.Host(), ws.Dir())), events.WithExpectedSeq(st.Seq))...); err != nil {
		return nil, err
	}
	return ws, nil
}

// choose is the backend of a session's first placement, and who asked for
// it: the sandbox of the agent whose tool call places it, else the
// workflow's, else the runner's default.
func (r *Runner) choose(ctx context.Context, st *session.State, agent string) (name, by string, err error) {
	if st.WorkflowRef != "" {
		wf, err := r.workflows.Get(ctx, st.WorkflowRef)
		if err != nil {
			return "", "", err
		}
		if name, by := wf.Workflow.SandboxFor(agent); name != "" {
			return name, "asked by " + by, nil
		}
	}
	return r.backends.Default(), "the tool runner's default", nil
}

// make places the session's workspace on b, or opens the one an earlier
// attempt placed there.
func (r *Runner) make(ctx context.Context, b Backend, st *session.State, seed *sandbox.Seed) (sandbox.Workspace, error) {
	if seed == nil {
		seed = &sandbox.Seed{}
	}
	seed.Tenant = st.Tenant
	ws, err := b.Place(ctx, st.ID, seed)
	if errors.Is(err, sandbox.ErrExists) {
		ws, err = b.Open(st.ID)
	}
	if errors.Is(err, sandbox.ErrBadSeed) {
		return nil, &placeError{fmt.Sprintf("workspace seed %s: %v", st.Labels[LabelWorkspace], err)}
	}
	if err != nil {
		return nil, fmt.Errorf("place %s: %w", st.ID, err)
	}
	return ws, nil
}

// placed is the event that records ws as the session's placement.
func (r *Runner) placed(ctx context.Context, b Backend, st *session.State, ws sandbox.Workspace, reason string) (*events.SandboxPlaced, error) {
	head, err := ws.Head(ctx)
	if err != nil {
		return nil, err
	}
	return &events.SandboxPlaced{Backend: ws.Backend(), SandboxID: ws.ID(), Host: ws.Host(), Workspace: ws.Dir(), Commit: head,
		Reason: reason, Isolation: b.Isolation(events.TenantOrDefault(st.Tenant)), Pool: recorded(r.Pool()), Runner: r.runnerOf(ws)}, nil
}

// labelSeed is the workspace seed a session's start labels name: a blob
// reference, read from the blob store. No path a session names is read
// (ADR 0031). A seed that is missing or not a reference fails the call,
// naming the label, as a malformed one does (make).
func (r *Runner) labelSeed(ctx context.Context, st *session.State) (*sandbox.Seed, error) {
	ref := st.Labels[LabelWorkspace]
	if !strings.HasPrefix(ref, "sha256:") {
		return nil, &placeError{fmt.Sprintf("workspace seed %q is not a seed reference (sha256:<hex>): seeds travel as content, packed by the client (rath start --workspace DIR; client.PutWorkspace), and the tool runner reads no path a session names", ref)}
	}
	archive, err := r.store.GetBlob(ctx, ref)
	if errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, eventstore.ErrBadRef) {
		return nil, &placeError{fmt.Sprintf("workspace seed %s: %v", ref, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("workspace seed %s: %w", ref, err)
	}
	return &sandbox.Seed{Archive: archive}, nil
}

// seededFrom says where a session's seed came from, for a placement's
// reason: the directory the client packed, as it says, and the reference.
func seededFrom(st *session.State) string {
	ref := st.Labels[LabelWorkspace]
	if from := st.Labels[client.LabelWorkspaceFrom]; from != "" {
		return fmt.Sprintf("seeded from %s (%s)", from, ref)
	}
	return "seeded from " + ref
}

// forkCommit is the workspace commit a fork inherits: the last commit a tool
// call of its history left, or the placement's own.
func forkCommit(st *session.State) string {
	commit, at := st.Sandbox.Commit, st.Sandbox.Seq
	for _, t := range st.Tools {
		if t.CommitAfter != "" && len(t.Seqs) > 0 && t.Seqs[len(t.Seqs)-1] > at {
			commit, at = t.CommitAfter, t.Seqs[len(t.Seqs)-1]
		}
	}
	return commit
}
