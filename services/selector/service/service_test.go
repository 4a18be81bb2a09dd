package service_test

import (
	"context"
	"errors"

	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/selector/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	nc  *nats.Conn
	c   *client.Client
	ref string
	wf  *workflow.Workflow
}

func setup(t *testing.T) *rig {
	t.Helper()
	return setupWith(t, func(*service.Config, *nats.Conn) {})
}

// setupWith runs the selector with the defaults changed by with, which
// gets a connection of the selector's role.
func setupWith(t *testing.T, with func(*service.Config, *nats.Conn)) *rig {
	t.Helper()
	ns, nc := natstest.Start(t)
	// Workers stop before the ledger they write through: it starts first.
	testrig.Ledger(t, ns.ClientURL())
	snc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleSelector)
	cfg := service.DefaultConfig()
	with(&cfg, natstest.ConnectAs(t, ns.ClientURL(), auth.RoleSelector))
	testrig.Run(t, "selector", func(ctx context.Context) error { return service.Run(ctx, snc, cfg, quiet) })
	ctx := context.Background()
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Load("testdata/route.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(nc)
	return &rig{nc: nc, c: c, ref: testrig.Bundle(t, store, wf), wf: wf}
}

// next watches a session from seq until an event of one of the types, and
// returns it.
func (r *rig) next(t *testing.T, id string, from uint64, types ...string) events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got events.Stored
	found := errors.New("found")
	if err := r.c.Watch(ctx, id, func(ev events.Stored) error {
		if slices.Contains(types, ev.Type) {
			got = ev
			return found
		}
		return nil
	}, client.From(from)); !errors.Is(err, found) {
		t.Fatalf("waiting for %v in %s from %d: %v", types, id, from, err)
	}
	return got
}

func (r *rig) emit(t *testing.T, id string, data any) events.Stored {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: a.ID, Seq: a.Seq}
}

func turnOf(t *testing.T, ev events.Stored) *events.TurnRequested {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return d.(*events.TurnRequested)
}

// The selector routes a session through its workflow: every step is a
// decision in the log, followed by the request it routed.
func TestSelectorRoutesByTheWorkflow(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "w1", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref}); err != nil {
		t.Fatal(err)
	}
	req := r.next(t, "w1", 1, events.TypeTurnRequested)
	if tr := turnOf(t, req); tr.Agent != "researcher" || tr.Rule != "start" {
		t.Fatalf("first turn %+v", tr)
	}
	st, _ := r.c.State(ctx, "w1")
	d := st.Decisions[0]
	if d.Rule != "start" || d.Route != "agent:researcher" || d.Cause == "" || st.Turn == nil {
		t.Fatalf("decision %+v turn %+v", d, st.Turn)
	}
	// The worker's side of the turn.
	r.emit(t, "w1", &events.TurnCompleted{TurnID: turnOf(t, req).TurnID, Agent: "researcher"})
	req = r.next(t, "w1", req.Seq+1, events.TypeTurnRequested)
	tr := turnOf(t, req)
	if tr.Agent != "coder" || tr.Rule != "code-after-research" {
		t.Fatalf("second turn %+v", tr)
	}
	// A tool call of the coder's turn: no routing until its result is in,
	// then the coder continues (built-in rule).
	r.emit(t, "w1", &events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder"})
	r.emit(t, "w1", &events.TurnCompleted{TurnID: tr.TurnID, Agent: "coder", ToolCalls: 1})
	done := r.emit(t, "w1", &events.ToolCompleted{CallID: "c1", Tool: "run", ExitCode: 0})
	req = r.next(t, "w1", done.Seq, events.TypeTurnRequested)
	if tr := turnOf(t, req); tr.Agent != "coder" || tr.Rule != "continue" {
		t.Fatalf("continued turn %+v", tr)
	}
	r.emit(t, "w1", &events.TurnCompleted{TurnID: turnOf(t, req).TurnID, Agent: "coder"})
	// Validation fails: fork from before it, first turn of the fork is the
	// coder's, and this session is closed as superseded.
	failed := r.emit(t, "w1", &events.ValidationFailed{Validator: "go test", Reason: "1 failing"})
	closed := r.next(t, "w1", failed.Seq, events.TypeSessionClosed)
	cd, _ := closed.Decode()
	reason := cd.(*events.SessionClosed).Reason
	if cd.(*events.SessionClosed).Outcome != "superseded" || !strings.HasPrefix(reason, "forked to w1-") {
		t.Fatalf("closed %+v", cd)
	}
	child := strings.Fields(strings.TrimPrefix(reason, "forked to "))[0]
	creq := r.next(t, child, failed.Seq, events.TypeTurnRequested) // the fork's own events start there
	if tr := turnOf(t, creq); tr.Agent != "coder" {
		t.Fatalf("fork's first turn %+v", tr)
	}
	cst, _ := r.c.State(ctx, child)
	if cst.Lineage.Parent != "w1" || cst.Lineage.ForkSeq != failed.Seq-1 {
		t.Fatalf("fork lineage %+v", cst.Lineage)
	}
	// Validation passes in the fork: closed as succeeded with the rule's reason.
	r.emit(t, child, &events.TurnCompleted{TurnID: turnOf(t, creq).TurnID, Agent: "coder"})
	r.emit(t, child, &events.ValidationPassed{Validator: "go test"})
	closed = r.next(t, child, creq.Seq, events.TypeSessionClosed)
	cd, _ = closed.Decode()
	if c := cd.(*events.SessionClosed); c.Outcome != "succeeded" || c.Reason != "tests pass" {
		t.Fatalf("fork closed %+v", c)
	}
	for _, id := range []string{"w1", child} {
		if rep, err := r.c.Verify(ctx, id); err != nil || !rep.OK {
			t.Fatalf("verify %s: %+v %v", id, rep, err)
		}
	}
}

// A budget closes the session with the reason recorded.
func TestSelectorEnforcesBudgets(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "b1", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref}); err != nil {
		t.Fatal(err)
	}
	from, turns := uint64(1), 0
	var closed events.Stored
	for closed.ID == "" {
		ev := r.next(t, "b1", from, events.TypeTurnRequested, events.TypeSessionClosed)
		if ev.Type == events.TypeSessionClosed {
			closed = ev
			break
		}
		if turns++; turns > 10 {
			t.Fatal("the budget of 6 turns did not stop the session")
		}
		tr := turnOf(t, ev)
		// Every turn asks for a tool, so the built-in rule keeps going.
		r.emit(t, "b1", &events.ToolRequested{CallID: tr.TurnID, Tool: "run", Agent: tr.Agent})
		done := r.emit(t, "b1", &events.TurnCompleted{TurnID: tr.TurnID, Agent: tr.Agent})
		// The turn that reaches the budget may be closed before its tool's
		// result arrives: the result is then refused, as it should be.
		a, err := r.c.Emit(ctx, "b1", &events.ToolCompleted{CallID: tr.TurnID, Tool: "run"})
		switch {
		case err == nil:
			from = a.Seq
		case errors.Is(err, api.ErrClosed):
			from = done.Seq
		default:
			t.Fatal(err)
		}
	}
	cd, _ := closed.Decode()
	c := cd.(*events.SessionClosed)
	if c.Outcome != workflow.OutcomeBudget || !strings.Contains(c.Reason, "max_turns") || turns != 6 {
		t.Fatalf("closed after %d turns: %+v", turns, c)
	}
	st, _ := r.c.State(ctx, "b1")
	last := st.Decisions[len(st.Decisions)-1]
	if last.Rule != "budget" {
		t.Fatalf("last decision %+v", last)
	}
}

// A selector given its process's cache (Config.Cache) folds into that one:
// the session it routes is held there, fed from its first event.
func TestSelectorUsesTheCacheItIsGiven(t *testing.T) {
	var shared *fold.Cache
	r := setupWith(t, func(cfg *service.Config, nc *nats.Conn) {
		store, err := eventstore.AttachWait(context.Background(), nc)
		if err != nil {
			t.Fatal(err)
		}
		shared = fold.NewCache(store, fold.CacheConfig{Shared: true})
		cfg.Cache = shared
	})
	if _, err := r.c.Start(context.Background(), "w1", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref}); err != nil {
		t.Fatal(err)
	}
	r.next(t, "w1", 1, events.TypeTurnRequested)
	if st := shared.Stats(); st.Sessions != 1 || st.Loads != 0 || st.Refolds != 0 {
		t.Fatalf("the given cache: %+v, want the session held, fed, not loaded or refolded", st)
	}
}
