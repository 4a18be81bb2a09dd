package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Tool runners serve pools (ADR 0042): a runner started with --pool gpu is
// one of the pool gpu, on its own host, with its own workspaces root. A
// session moves to another pool on request (rath.sandbox.requested with a
// pool): the runner holding its workspace bundles it at its head commit,
// stores the bundle in the object store, and asks the pool, on a subject
// its runners share as a queue group, to take it. One runner of the pool
// places the workspace from the bundle (the same commits) and records the
// placement, with its pool and itself as the runner. From then on the
// session's calls are handed over to that runner wherever they are
// delivered (handover.go). While no runner of the pool answers, the move
// waits, and so do the session's later calls: the session's state shows the
// move (Moving) until it is answered.

// poolTimeout bounds a pool runner's taking of a workspace: fetching a
// bundle of a large workspace and placing it.
const poolTimeout = 5 * time.Minute

// CheckPool admits a pool's name (events.CheckPool).
func CheckPool(pool string) error { return events.CheckPool(pool) }

func poolSubject(pool string) string { return handoverPrefix + "pool." + pool }

// recorded is how a pool is written in events: "" for the default pool.
func recorded(pool string) string {
	if pool == events.PoolDefault {
		return ""
	}
	return pool
}

// SetPool makes the runner one of pool (events.PoolDefault unless set).
func (r *Runner) SetPool(pool string) error {
	if err := CheckPool(pool); err != nil {
		return err
	}
	r.pool = pool
	return nil
}

// Pool is the runner's pool.
func (r *Runner) Pool() string { return events.PoolOf(r.pool) }

// runnerOf names the runner holding ws: its pool, host and root, as the
// hand-over subject does.
func (r *Runner) runnerOf(ws sandbox.Workspace) string {
	return fmt.Sprintf("%s/%s:%s", r.Pool(), ws.Host(), filepath.Dir(ws.Dir()))
}

// arrival asks a runner of a pool to take a session: a move to the pool
// (Bundle and Commit: the workspace to take; none: place it from the
// session's seed), or a call whose runner is gone (TakeOver).
type arrival struct {
	// Event is the stored event: the rath.sandbox.requested, or the call
	// taken over.
	Event    json.RawMessage `json:"event"`
	Bundle   string          `json:"bundle,omitempty"`
	Commit   string          `json:"commit,omitempty"`
	From     *events.Sandbox `json:"from,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	TakeOver bool            `json:"take_over,omitempty"`
}

// arrived is a pool runner's answer: nothing (done and recorded), a
// refusal of the move, or an error to try again on.
type arrived struct {
	Refused string `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
	Waiting bool   `json:"waiting,omitempty"`
}

// ask sends a to a runner of pool and returns its refusal, if any.
func (r *Runner) ask(ctx context.Context, pool string, a arrival) (string, error) {
	msg, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	timeout := poolTimeout
	if a.TakeOver {
		timeout = handoverWait // the pool's runner runs the call
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := r.c.Conn().RequestWithContext(ctx, poolSubject(pool), msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return "", consume.Waiting(fmt.Errorf("%w: no tool runner of pool %s is connected: waiting for one", errPoolEmpty, pool))
	}
	if err != nil {
		return "", fmt.Errorf("ask pool %s: %w", pool, err)
	}
	var out arrived
	if err := json.Unmarshal(reply.Data, &out); err != nil {
		return "", fmt.Errorf("pool %s answered %q: %w", pool, reply.Data, err)
	}
	switch {
	case out.Error != "" && out.Waiting:
		return "", consume.Waiting(fmt.Errorf("pool %s: %s", pool, out.Error))
	case out.Error != "":
		return "", fmt.Errorf("pool %s: %s", pool, out.Error)
	}
	return out.Refused, nil
}

// send moves the session to a runner of pool, as req asks, and returns why
// not if it does not. It runs on the runner holding the session's
// workspace (or any, for a session not placed yet).
func (r *Runner) send(ctx context.Context, st *session.State, ev events.Stored, req *events.SandboxRequested, pool string, takeOver bool) (string, error) {
	a := arrival{Event: ev.Raw}
	p := st.Sandbox
	switch {
	case p != nil && p.Session == st.ID:
		b, why, err := r.held(p, takeOver)
		if why != "" || err != nil {
			return why, err
		}
		bundle, head, err := b.Bundle(ctx, st.ID)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			// Placed by a runner that crashed before the workspace
			// existed: the pool places it from the seed.
			a.Reason = fmt.Sprintf("moved from %s (%s), whose workspace was never made", p.Backend, p.SandboxID)
		case err != nil:
			return "", fmt.Errorf("move %s to pool %s: %w", st.ID, pool, err)
		default:
			ref, err := r.store.PutBlob(ctx, bundle)
			if err != nil {
				return "", fmt.Errorf("move %s to pool %s: store the workspace: %w", st.ID, pool, err)
			}
			a.Bundle, a.Commit = ref, head
			a.Reason = fmt.Sprintf("moved from %s (%s) of pool %s at commit %s", p.Backend, p.SandboxID, r.Pool(), head)
		}
		a.From = &events.Sandbox{Backend: p.Backend, SandboxID: p.SandboxID, Pool: recorded(r.Pool())}
	case p != nil && p.Session != "":
		return fmt.Sprintf("a fork not placed yet stays with its parent's workspace (%s, pool %s): it moves to another pool after its first tool call", p.SandboxID, events.PoolOf(p.Pool)), nil
	default:
		a.Reason = "on request before the first tool call"
	}
	if req.Reason != "" {
		a.Reason += ": " + req.Reason
	}
	r.log.Info("moving a session to another pool", "session", st.ID, "pool", pool, "commit", a.Commit, "bundle", a.Bundle)
	return r.ask(ctx, pool, a)
}

// ServePool takes sessions moved to the runner's pool, and calls whose
// runner in the pool is gone, until ctx ends.
func (r *Runner) ServePool(ctx context.Context) error {
	sub, err := r.c.Conn().QueueSubscribe(poolSubject(r.Pool()), "pool", func(m *nats.Msg) {
		go func() {
			out, _ := json.Marshal(r.arrive(context.WithoutCancel(ctx), m.Data))
			_ = m.Respond(out)
		}()
	})
	if err != nil {
		return fmt.Errorf("serve pool %s: %w", r.Pool(), err)
	}
	<-ctx.Done()
	return sub.Drain()
}

// arrive takes one session sent to the pool.
func (r *Runner) arrive(ctx context.Context, data []byte) arrived {
	var a arrival
	if err := json.Unmarshal(data, &a); err != nil {
		return arrived{Error: fmt.Sprintf("malformed request: %v", err)}
	}
	ev, err := events.ParseStored(a.Event)
	if err != nil {
		return arrived{Error: fmt.Sprintf("malformed event: %v", err)}
	}
	if a.TakeOver {
		return failure(r.handle(ctx, ev, true))
	}
	if ev.Type != events.TypeSandboxRequested {
		return arrived{Error: fmt.Sprintf("event %s is a %s, not a move", ev.ID, ev.Type)}
	}
	d, err := ev.Decode()
	if err != nil {
		return arrived{Error: err.Error()}
	}
	mu := &r.locks[fnvHash(ev.Session)%uint32(len(r.locks))]
	mu.Lock()
	defer mu.Unlock()
	why, err := r.take(ctx, ev, d.(*events.SandboxRequested), a)
	if err != nil {
		return failure(err)
	}
	return arrived{Refused: why}
}

func failure(err error) arrived {
	if err == nil {
		return arrived{}
	}
	return arrived{Error: err.Error(), Waiting: consume.IsWaiting(err)}
}

// take places the session sent by a on this runner and records the
// placement, or returns why it does not.
func (r *Runner) take(ctx context.Context, ev events.Stored, req *events.SandboxRequested, a arrival) (string, error) {
	st, err := r.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return "", err
	}
	if st.Status.Ended() {
		return "", nil
	}
	if done, err := r.answered(ctx, ev); done || err != nil {
		return "", err
	}
	target, err := r.backends.Get(req.Backend)
	if err != nil {
		return fmt.Sprintf("pool %s: %v", r.Pool(), err), nil
	}
	var seed *sandbox.Seed
	var bundle []byte
	switch {
	case a.Bundle != "":
		if bundle, err = r.store.GetBlob(ctx, a.Bundle); err != nil {
			return "", fmt.Errorf("the workspace bundle %s: %w", a.Bundle, err)
		}
		seed = &sandbox.Seed{Bundle: bundle, Commit: a.Commit}
	case st.Labels[LabelWorkspace] != "":
		if seed, err = r.labelSeed(ctx, st); err != nil {
			return refusal(err)
		}
	}
	ws, err := r.make(ctx, target, st, seed)
	if err != nil {
		return refusal(err)
	}
	if bundle != nil {
		// The session was here before: bring its workspace forward.
		head, err := ws.Head(ctx)
		if err != nil {
			return "", err
		}
		if head != a.Commit {
			err := target.Advance(ctx, st.ID, bundle, a.Commit)
			if errors.Is(err, sandbox.ErrDiverged) {
				return fmt.Sprintf("the session's workspace on %s from before it left (%s) changed since: %v", r.runnerOf(ws), ws.ID(), err), nil
			}
			if err != nil {
				return "", err
			}
		}
	}
	placed, err := r.placed(ctx, target, st, ws, a.Reason)
	if err != nil {
		return "", err
	}
	placed.From = a.From
	if _, err := answer.To(ev, Durable, Source).Emit(ctx, r.c, placed, "moved"); err != nil && !errors.Is(err, api.ErrClosed) {
		return "", err
	}
	r.log.Info("session moved here", "session", st.ID, "from", a.From, "to", ws.ID(), "pool", r.Pool(), "commit", placed.Commit)
	return "", nil
}

// waitForMove holds a call or a move of a session that is moving: it runs
// where the move takes the session, once it has.
func waitForMove(st *session.State, ev events.Stored) error {
	m := st.Moving
	if m == nil || m.Session != st.ID || m.Seq >= ev.Seq {
		return nil
	}
	return consume.Waiting(fmt.Errorf("session %s is moving to %s (requested at seq %d): its later calls wait for the move", st.ID, where(m.Pool, m.Backend), m.Seq))
}

// where names a backend of a pool as a move request does: "pool/backend",
// or the backend alone for the pool the session is on.
func where(pool, backend string) string {
	if pool == "" {
		return backend
	}
	return pool + "/" + backend
}

// errPoolEmpty is (wrapped) ask's error when no runner of the pool is
// connected.
var errPoolEmpty = errors.New("empty pool")

// startInDefault hands the first call of a session placed nowhere to a
// runner of the default pool: a session starts there (runners of other
// pools share the tool calls' consumer, and would otherwise place whatever
// session they are handed first). Where the default pool has no runner,
// it returns false and the session is placed here.
func (r *Runner) startInDefault(ctx context.Context, ev events.Stored) (bool, error) {
	why, err := r.ask(ctx, events.PoolDefault, arrival{Event: ev.Raw, TakeOver: true})
	switch {
	case errors.Is(err, errPoolEmpty):
		return false, nil
	case err != nil:
		return false, err
	case why != "":
		return false, &placeError{why}
	}
	return true, nil
}

// errHandedOver ends a call that a runner of another pool ran.
var errHandedOver = errors.New("handed over to the session's pool")

// takeOverIn hands a call whose runner is gone to another runner of the
// session's pool, which places the session again there and runs it; with
// none, the call fails saying so.
func (r *Runner) takeOverIn(ctx context.Context, p *session.Placement, ev events.Stored) error {
	pool := events.PoolOf(p.Pool)
	why, err := r.ask(ctx, pool, arrival{Event: ev.Raw, TakeOver: true})
	switch {
	case consume.IsWaiting(err):
		return &placeError{fmt.Sprintf("the session's tool runner %s did not answer, and no other tool runner of pool %s does: %v", cmp.Or(p.Runner, p.Host+":"+p.Workspace), pool, err)}
	case err != nil:
		return err
	case why != "":
		return &placeError{why}
	}
	return errHandedOver
}
