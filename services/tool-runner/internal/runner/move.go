package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A rath.sandbox.requested moves a session to another backend between tool
// calls: the runner consumes it in the session's order with the tool calls
// (so the calls before it have finished and the calls after it run on the
// new backend), places a new workspace on the target backend seeded from the
// current one at its head commit, and records a rath.sandbox.placed whose
// From is the placement it left. The old workspace stays: forks taken
// before the move are materialised from it. A request the runner does not
// carry out is answered with rath.sandbox.refused. Both answers have the
// request as their causation and an ID derived from it.

// errAnswered stops the scan for a request's answer.
var errAnswered = errors.New("answered")

// move answers one rath.sandbox.requested.
func (r *Runner) move(ctx context.Context, ev events.Stored, takeOver bool) error {
	d, err := ev.Decode()
	if err != nil {
		return consume.Permanent(err)
	}
	req := d.(*events.SandboxRequested)
	st, err := r.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return err
	}
	if st.Status.Ended() {
		return nil // the ledger takes no answer any more
	}
	// A redelivered request may have been answered already, and the state
	// it changed would now give another answer.
	if done, err := r.answered(ctx, ev); done || err != nil {
		return err
	}
	if err := waitForMove(st, ev); err != nil {
		return err
	}
	why, err := r.carry(ctx, st, ev, req, takeOver)
	if err != nil || why == "" {
		return err
	}
	return r.refuse(ctx, ev, req.Backend, why)
}

// answered reports whether the move request ev has its answer in the log.
func (r *Runner) answered(ctx context.Context, ev events.Stored) (bool, error) {
	err := r.c.Events(ctx, ev.Session, client.Range{From: ev.Seq + 1}, func(e events.Stored) error {
		if e.Causation == ev.ID && (e.Type == events.TypeSandboxPlaced || e.Type == events.TypeSandboxRefused) {
			return errAnswered
		}
		return nil
	})
	if errors.Is(err, errAnswered) {
		return true, nil
	}
	return false, err
}

// held returns the backend holding the session's own workspace p here;
// else elsewhere (the runner holding it moves it) or, taking over from a
// runner that is gone, why the move cannot be made.
func (r *Runner) held(p *session.Placement, takeOver bool) (Backend, string, error) {
	b, err := r.backends.Get(p.Backend)
	if err == nil && b.Holds(p.Host, p.Workspace) {
		return b, "", nil
	}
	if !takeOver {
		return Backend{}, "", &elsewhere{host: p.Host, root: filepath.Dir(p.Workspace)}
	}
	return Backend{}, fmt.Sprintf("the session's workspace on %s:%s did not answer: its tool runner is gone, and its changes with it", p.Host, p.Workspace), nil
}

// refuse records that a move request was not carried out, and why.
func (r *Runner) refuse(ctx context.Context, ev events.Stored, backend, why string) error {
	r.log.Info("sandbox move refused", "session", ev.Session, "backend", backend, "why", why)
	_, err := answer.To(ev, Durable, Source).Emit(ctx, r.c, &events.SandboxRefused{Backend: backend, Reason: why}, "refused")
	if errors.Is(err, api.ErrClosed) {
		return nil
	}
	return err
}

// carry moves the session as req asks and records the new placement, or
// returns why it does not.
func (r *Runner) carry(ctx context.Context, st *session.State, ev events.Stored, req *events.SandboxRequested, takeOver bool) (string, error) {
	p := st.Sandbox
	on := r.Pool() // the pool the session is on
	if p != nil {
		on = events.PoolOf(p.Pool)
	}
	pool := on
	if req.Pool != "" {
		pool = req.Pool
	}
	if p != nil && p.Backend == req.Backend && pool == on {
		return fmt.Sprintf("the session is on %s already (%s)", where(recorded(on), p.Backend), p.SandboxID), nil
	}
	if pool != r.Pool() {
		return r.send(ctx, st, ev, req, pool, takeOver)
	}
	target, err := r.backends.Get(req.Backend)
	if err != nil {
		return err.Error(), nil
	}
	var (
		seed   *sandbox.Seed
		from   *events.Sandbox
		reason string
	)
	switch {
	case p != nil && p.Session == st.ID:
		b, why, err := r.held(p, takeOver)
		if why != "" || err != nil {
			return why, err
		}
		from = &events.Sandbox{Backend: p.Backend, SandboxID: p.SandboxID}
		ws, err := b.Open(st.ID)
		if errors.Is(err, sandbox.ErrNotFound) {
			// Placed by a runner that crashed before the workspace existed:
			// no tool call ran in it, so the seed is all it would hold.
			if st.Labels[LabelWorkspace] != "" {
				if seed, err = r.labelSeed(ctx, st); err != nil {
					return refusal(err)
				}
			}
			reason = fmt.Sprintf("moved from %s (%s), whose workspace was never made", p.Backend, p.SandboxID)
			break
		}
		if err != nil {
			return "", fmt.Errorf("move %s: workspace %s: %w", st.ID, p.SandboxID, err)
		}
		head, err := ws.Head(ctx)
		if err != nil {
			return "", fmt.Errorf("move %s: %w", st.ID, err)
		}
		seed = &sandbox.Seed{Parent: ws, Commit: head}
		reason = fmt.Sprintf("moved from %s (%s) at commit %s", p.Backend, p.SandboxID, head)
	case p != nil && p.Session != "":
		// A fork not placed yet leaves its parent's placement, whose
		// workspace stays where it is.
		b, err := r.backends.Get(p.Backend)
		if err != nil {
			return fmt.Sprintf("the fork's parent %s is on %s: %v", p.Session, p.Backend, err), nil
		}
		parent, err := b.Open(p.Session)
		if err != nil {
			return "", fmt.Errorf("move fork %s: parent workspace %s: %w", st.ID, p.Session, err)
		}
		commit := forkCommit(st)
		seed, from = &sandbox.Seed{Parent: parent, Commit: commit}, &events.Sandbox{Backend: p.Backend, SandboxID: p.SandboxID}
		reason = fmt.Sprintf("fork of %s at commit %s, moved from its parent's %s (%s)", p.Session, commit, p.Backend, p.SandboxID)
	case st.Labels[LabelWorkspace] != "":
		if seed, err = r.labelSeed(ctx, st); err != nil {
			return refusal(err)
		}
		reason = seededFrom(st) + ", on request before the first tool call"
	default:
		reason = "on request before the first tool call"
	}
	if req.Reason != "" {
		reason += ": " + req.Reason
	}
	ws, err := r.make(ctx, target, st, seed)
	if err != nil {
		return refusal(err)
	}
	if seed != nil && seed.Parent != nil {
		// The session had a workspace on the target before it left it (or
		// an earlier attempt of this request placed one): it is the
		// session's only if it is at the commit the move carries.
		head, err := ws.Head(ctx)
		if err != nil {
			return "", err
		}
		if head != seed.Commit {
			return fmt.Sprintf("the session's workspace on %s from before it left (%s) is at commit %s, not %s: a session moves back to a backend only while nothing changed since it left", req.Backend, ws.ID(), head, seed.Commit), nil
		}
	}
	placed, err := r.placed(ctx, target, st, ws, reason)
	if err != nil {
		return "", err
	}
	placed.From = from
	if _, err := answer.To(ev, Durable, Source).Emit(ctx, r.c, placed, "moved"); err != nil && !errors.Is(err, api.ErrClosed) {
		return "", err
	}
	r.log.Info("session moved", "session", st.ID, "from", from, "to", ws.ID(), "commit", placed.Commit)
	return "", nil
}
