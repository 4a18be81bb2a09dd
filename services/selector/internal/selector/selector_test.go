package selector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A decision's route string is all a redelivered trigger has to follow it:
// every plan must survive the trip through it.
func TestPlanRouteRoundTrip(t *testing.T) {
	tests := []struct {
		p     plan
		route string
	}{
		{plan{kind: workflow.RouteAgent, agent: "coder"}, "agent:coder"},
		{plan{kind: workflow.RouteClose, detail: "succeeded"}, "close:succeeded"},
		{plan{kind: workflow.RouteClose, detail: workflow.OutcomeBudget}, "close:budget_exceeded"},
		{plan{kind: workflow.RouteClose, detail: "a:b"}, "close:a:b"},
		{plan{kind: workflow.RouteFork, agent: "coder", at: 14}, "fork:coder@14"},
		{plan{kind: workflow.RouteFork, at: 3}, "fork:@3"},
		{plan{kind: workflow.RouteApproval, detail: "deploy"}, "approval:deploy"},
		{plan{kind: workflow.RouteMemory, detail: "project:demo"}, "memory:project:demo"},
	}
	for _, tt := range tests {
		t.Run(tt.route, func(t *testing.T) {
			if got := tt.p.route(); got != tt.route {
				t.Fatalf("route() = %q, want %q", got, tt.route)
			}
			got, err := parsePlan(tt.route)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.p {
				t.Fatalf("parsePlan(%q) = %+v, want %+v", tt.route, got, tt.p)
			}
		})
	}
}

func TestParsePlanRefusesWhatNoDecisionRecords(t *testing.T) {
	for _, route := range []string{"", "bogus:x", "fork:coder", "fork:coder@", "fork:coder@x", "fork:coder@-1"} {
		if p, err := parsePlan(route); err == nil {
			t.Errorf("parsePlan(%q) = %+v, want an error", route, p)
		}
	}
	// Only the kind is checked: "agent" parses as an agent route naming no
	// agent (route never writes it).
	if p, err := parsePlan("agent"); err != nil || p.kind != workflow.RouteAgent || p.agent != "" {
		t.Errorf(`parsePlan("agent") = %+v, %v`, p, err)
	}
	if got := (plan{}).route(); got != "" {
		t.Errorf("the zero plan routes %q", got)
	}
}

// folded returns the state after the events and the last of them, the
// trigger, as stored.
func folded(t *testing.T, data ...any) (*session.State, events.Stored) {
	t.Helper()
	st := &session.State{}
	var last events.Stored
	for i, d := range data {
		k, ok := events.KindOf(d)
		if !ok {
			t.Fatalf("%T is not an event kind", d)
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		last = events.Stored{ID: "e" + strconv.FormatUint(seq, 10), Type: k.Type, Session: "s", Seq: seq, Data: raw}
		session.Apply(st, last)
	}
	return st, last
}

var (
	started   = &events.SessionStarted{Workflow: "wf"}
	requested = &events.TurnRequested{TurnID: "t1", Agent: "coder"}
	completed = &events.TurnCompleted{TurnID: "t1", Agent: "coder", ToolCalls: 1}
	callRun   = &events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder"}
	runStart  = &events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 1}
	runDone   = &events.ToolCompleted{CallID: "c1", Tool: "run"}
	runFailed = &events.ToolFailed{CallID: "c1", Tool: "run", Error: "exit 1", ExitCode: 1}
)

func TestPendingTools(t *testing.T) {
	tests := []struct {
		name  string
		given []any
		want  bool
	}{
		{"no tools", []any{started}, false},
		{"requested", []any{started, requested, callRun}, true},
		{"running", []any{started, requested, callRun, runStart}, true},
		{"running after its turn ended", []any{started, requested, callRun, completed, runStart}, true},
		{"completed", []any{started, requested, callRun, completed, runStart, runDone}, false},
		{"failed", []any{started, requested, callRun, completed, runFailed}, false},
		{"one of two still requested", []any{started, requested, callRun,
			&events.ToolRequested{CallID: "c2", Tool: "run", Agent: "coder"}, completed, runDone}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := folded(t, tt.given...)
			if got := pendingTools(st); got != tt.want {
				t.Fatalf("pendingTools = %v, want %v (tools %+v)", got, tt.want, st.Tools)
			}
		})
	}
}

func TestContinues(t *testing.T) {
	tests := []struct {
		name  string
		given []any // the last is the trigger
		want  bool
	}{
		{"tool completed after the turn ended", []any{started, requested, callRun, completed, runDone}, true},
		{"tool failed after the turn ended", []any{started, requested, callRun, completed, runFailed}, true},
		{"tool completed while the turn is in flight", []any{started, requested, callRun, runDone}, false},
		{"tool completed with no turn ever ended", []any{started, callRun, runDone}, false},
		{"tool completed while a new turn is in flight", []any{started, requested, callRun, completed,
			&events.TurnRequested{TurnID: "t2", Agent: "researcher"}, runDone}, false},
		{"a turn ended without tool calls", []any{started, requested, &events.TurnCompleted{TurnID: "t1", Agent: "coder"}}, false},
		{"a turn ended after its tool results", []any{started, requested, callRun, runDone, completed}, true},
		{"a chunk after a turn", []any{started, requested, completed, &events.ChunkAppended{Role: events.RoleUser, Content: "hi"}}, false},
		{"tool started", []any{started, requested, callRun, completed, runStart}, false},
		{"a failed turn continues too", []any{started, requested, callRun,
			&events.TurnFailed{TurnID: "t1", Agent: "coder", Error: "x"}, runDone}, true},
		// Paused sessions are routed nothing: the resume is the routing point
		// for results that came in meanwhile.
		{"resumed after results came in while paused", []any{started, requested, callRun, completed,
			&events.SessionPaused{}, runDone, &events.SessionResumed{}}, true},
		{"resumed with nothing new", []any{started, requested, completed, &events.SessionPaused{}, &events.SessionResumed{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, trigger := folded(t, tt.given...)
			if got := continues(st, trigger); got != tt.want {
				t.Fatalf("continues = %v, want %v (turn %+v, last agent %q)", got, tt.want, st.Turn, st.LastAgent)
			}
		})
	}
}

// A person's correction resumes the agent of the last turn: a user chunk
// marked correction, between turns, after one.
func TestCorrects(t *testing.T) {
	said := &events.ChunkAppended{Role: events.RoleUser, Content: "use blue", Correction: true}
	tests := []struct {
		name  string
		given []any // the last is the trigger
		want  bool
	}{
		{"a correction after a turn", []any{started, requested, &events.TurnCompleted{TurnID: "t1", Agent: "coder"}, said}, true},
		{"a user message not marked", []any{started, requested, &events.TurnCompleted{TurnID: "t1", Agent: "coder"},
			&events.ChunkAppended{Role: events.RoleUser, Content: "hi"}}, false},
		{"marked, but not a user's", []any{started, requested, &events.TurnCompleted{TurnID: "t1", Agent: "coder"},
			&events.ChunkAppended{Role: events.RoleTool, Content: "ok", ToolCallID: "c1", Correction: true}}, false},
		{"while a turn is in flight", []any{started, requested, said}, false},
		{"before any turn", []any{started, said}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, trigger := folded(t, tt.given...)
			if got := corrects(st, trigger); got != tt.want {
				t.Fatalf("corrects = %v, want %v (turn %+v, last agent %q)", got, tt.want, st.Turn, st.LastAgent)
			}
		})
	}
}

// A decision that routes the session stops a late continue; a memory
// decision, which writes an item and routes nothing, does not.
func TestDecidedSince(t *testing.T) {
	memory := &events.SelectorDecided{Rule: "record", Route: "memory:project:x"}
	agent := &events.SelectorDecided{Rule: "next", Route: "agent:coder", Agent: "coder", TurnID: "t2"}
	for _, tc := range []struct {
		name  string
		given []any
		want  bool
	}{
		{"nothing decided", []any{started, requested, callRun, completed, runDone}, false},
		{"a memory decision after the result", []any{started, requested, callRun, completed, runDone, memory}, false},
		{"an agent decision after the result", []any{started, requested, callRun, completed, runDone, agent}, true},
		{"an agent decision before a memory one", []any{started, requested, callRun, completed, runDone, agent, memory}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := folded(t, tc.given...)
			if got := decidedSince(st, 5); got != tc.want {
				t.Fatalf("decidedSince(5) = %v, want %v (decisions %+v)", got, tc.want, st.Decisions)
			}
		})
	}
}

// rig is a ledger on a real embedded JetStream and a selector whose Handle
// the tests call directly, as the consumer runner would, redeliveries and
// concurrency included.
type rig struct {
	c     *client.Client
	sc    *client.Client // the selector's
	s     *Selector
	store *eventstore.Store
	wf    *workflow.Workflow
	ref   string
}

func setup(t *testing.T) *rig {
	t.Helper()
	_, nc := natstest.Start(t)
	return setupWith(t, nc, "testdata/chatty.yaml")
}

// setupWith runs the ledger on nc and a selector of the workflow file.
func setupWith(t *testing.T, nc *nats.Conn, path string) *rig {
	t.Helper()
	testrig.Ledger(t, nc.ConnectedUrl())
	ctx := context.Background()
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ref := testrig.Bundle(t, store, wf)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := client.New(nc, client.WithSource(Source))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, sc: sc, s: New(sc, fold.NewCache(store, fold.CacheConfig{}), workflow.NewLibrary(store.GetBlob), nil, quiet), store: store, wf: wf, ref: ref}
}

func (r *rig) start(t *testing.T, id string) events.Stored {
	t.Helper()
	a, err := r.c.Start(context.Background(), id, events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref})
	if err != nil {
		t.Fatal(err)
	}
	return r.at(t, id, a.Seq)
}

func (r *rig) emit(t *testing.T, id string, data any) events.Stored {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, data)
	if err != nil {
		t.Fatal(err)
	}
	return r.at(t, id, a.Seq)
}

func (r *rig) at(t *testing.T, id string, seq uint64) events.Stored {
	t.Helper()
	page, err := r.c.Log(context.Background(), id, client.Range{From: seq, To: seq})
	if err != nil || len(page) != 1 {
		t.Fatalf("read %s at %d: %v", id, seq, err)
	}
	return page[0]
}

func (r *rig) log(t *testing.T, id string) []events.Stored {
	t.Helper()
	page, err := r.c.Log(context.Background(), id, client.Range{From: 1, Limit: api.MaxLogPage})
	if err != nil {
		t.Fatal(err)
	}
	return page
}

func ofType(log []events.Stored, typ string) []events.Stored {
	var out []events.Stored
	for _, ev := range log {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// A workflow whose read fails (a NATS node lost mid-read: the cluster test
// saw a session never routed so) is asked again, not given up: the
// trigger's error is transient, and once the read works the session is
// routed. A workflow that is not stored is given up.
func TestWorkflowReadFailureIsAskedAgain(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	var failing atomic.Bool
	failing.Store(true)
	lib := workflow.NewLibrary(func(ctx context.Context, ref string) ([]byte, error) {
		if failing.Load() {
			return nil, fmt.Errorf("get blob %s: %w", ref, context.DeadlineExceeded)
		}
		return r.store.GetBlob(ctx, ref)
	})
	s := New(r.sc, fold.NewCache(r.store, fold.CacheConfig{}), lib, nil, quiet)
	trigger := r.start(t, "s1")
	if err := s.Handle(ctx, trigger); err == nil || consume.IsPermanent(err) {
		t.Fatalf("a failed read of the workflow: %v, want a transient error", err)
	}
	failing.Store(false)
	if err := s.Handle(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	if n := len(ofType(r.log(t, "s1"), events.TypeSelectorDecided)); n != 1 {
		t.Fatalf("%d decisions once the read works, want 1", n)
	}

	a, err := r.c.Start(ctx, "s2", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: "sha256:" + strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(ctx, r.at(t, "s2", a.Seq)); !consume.IsPermanent(err) {
		t.Fatalf("a workflow that is not stored: %v, want a permanent error", err)
	}
}

// A trigger handled again (a redelivery), one after the other or at the same
// time, records one decision and one request, with IDs derived from it.
func TestRedeliveredTriggerDecidesOnce(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			r := setup(t)
			ctx := context.Background()
			trigger := r.start(t, "s1")
			const deliveries = 4
			errs := make(chan error, deliveries)
			var wg sync.WaitGroup
			for range deliveries {
				if !concurrent {
					errs <- r.s.Handle(ctx, trigger)
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- r.s.Handle(ctx, trigger)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("handle: %v", err)
				}
			}
			log := r.log(t, "s1")
			decided, requests := ofType(log, events.TypeSelectorDecided), ofType(log, events.TypeTurnRequested)
			if len(log) != 3 || len(decided) != 1 || len(requests) != 1 {
				t.Fatalf("log of %d events: %d decisions, %d requests", len(log), len(decided), len(requests))
			}
			if decided[0].ID != events.DerivedID(Durable, trigger.ID, "decided") || requests[0].ID != events.DerivedID(Durable, trigger.ID, "request") {
				t.Fatalf("ids %s, %s not derived from the trigger", decided[0].ID, requests[0].ID)
			}
			for _, ev := range []events.Stored{decided[0], requests[0]} {
				if ev.Causation != trigger.ID || ev.Source != Source {
					t.Fatalf("%s: causation %s source %s", ev.Type, ev.Causation, ev.Source)
				}
			}
			st, err := r.c.State(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			if st.Turn == nil || st.Turn.Agent != "researcher" || len(st.Decisions) != 1 || st.Decisions[0].Cause != trigger.ID {
				t.Fatalf("turn %+v decisions %+v", st.Turn, st.Decisions)
			}
			// The selector's own events never route.
			if err := r.s.Handle(ctx, decided[0]); err != nil {
				t.Fatal(err)
			}
			if n := len(r.log(t, "s1")); n != 3 {
				t.Fatalf("handling the selector's own decision appended %d events", n-3)
			}
		})
	}
}

// A trigger redelivered after its decision's turn has ended routes nothing:
// the decision was followed already. The ledger forgets event IDs after its
// dedupe window (eventstore.Config.DedupeWindow, 10 minutes by default; a
// selector down that long after appending but before acking redelivers then),
// The test stands in for an expired window by storing the original request
// under a fresh ID, so the ledger does not recognise the follow-up's.
func TestLateRedeliveryDoesNotRequestAnEndedTurnAgain(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	trigger := r.start(t, "s1")
	turnID := "turn-" + events.DerivedID(trigger.ID, "turn")[:8]
	if _, err := r.c.Emit(ctx, "s1", &events.SelectorDecided{Rule: "start", Route: "agent:researcher", Agent: "researcher", TurnID: turnID},
		events.WithID(events.DerivedID(Durable, trigger.ID, "decided")), events.WithSource(Source), events.WithCausation(trigger.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Emit(ctx, "s1", &events.TurnRequested{TurnID: turnID, Agent: "researcher", Rule: "start"},
		events.WithSource(Source), events.WithCausation(trigger.ID)); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "s1", &events.TurnCompleted{TurnID: turnID, Agent: "researcher"})
	before := len(r.log(t, "s1"))

	if err := r.s.Handle(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	log := r.log(t, "s1")
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != before || st.Turn != nil {
		t.Fatalf("the redelivered trigger appended %d events; turn in flight %+v", len(log)-before, st.Turn)
	}
}

// Many triggers decided at once, for one session, never leave two turns in
// flight: each agent decision is taken with no turn in flight and is
// followed by its own request, whether or not turns end meanwhile.
func TestConcurrentTriggersNeverOverlapTurns(t *testing.T) {
	for _, turnsEnd := range []bool{false, true} {
		t.Run(fmt.Sprintf("turns end=%v", turnsEnd), func(t *testing.T) {
			r := setup(t)
			ctx := context.Background()
			triggers := []events.Stored{r.start(t, "s1")}
			for i := range 12 {
				triggers = append(triggers, r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleUser, Content: fmt.Sprintf("chunk %d", i)}))
			}

			// The agent worker's part, when turns end: every request is
			// answered with the turn's end.
			wctx, stop := context.WithCancel(ctx)
			watched := make(chan error, 1)
			if turnsEnd {
				go func() {
					watched <- r.c.Watch(wctx, "s1", func(ev events.Stored) error {
						if ev.Type != events.TypeTurnRequested {
							return nil
						}
						d, err := ev.Decode()
						if err != nil {
							return err
						}
						req := d.(*events.TurnRequested)
						_, err = r.c.Emit(wctx, "s1", &events.TurnCompleted{TurnID: req.TurnID, Agent: req.Agent},
							events.WithID(events.DerivedID("test-worker", ev.ID)), events.WithCausation(ev.ID))
						return err
					})
				}()
			} else {
				watched <- context.Canceled
			}

			// Every trigger delivered again and again (a trigger that found
			// a turn in flight decided nothing and may route once it ended),
			// all triggers at once.
			const deliveries = 4
			var wg sync.WaitGroup
			errs := make(chan error, deliveries*len(triggers))
			for _, ev := range triggers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range deliveries {
						if err := r.s.Handle(ctx, ev); err != nil {
							errs <- fmt.Errorf("trigger %d (%s): %w", ev.Seq, ev.Type, err)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			stop()
			if err := <-watched; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("worker: %v", err)
			}

			log := r.log(t, "s1")
			st := &session.State{}
			causes := map[string]bool{}
			turns := 0
			for _, ev := range log {
				d, err := ev.Decode()
				if err != nil {
					t.Fatal(err)
				}
				switch d := d.(type) {
				case *events.SelectorDecided:
					if causes[ev.Causation] {
						t.Errorf("trigger %s decided twice (at %d)", ev.Causation, ev.Seq)
					}
					causes[ev.Causation] = true
					if d.TurnID != "" && st.Turn != nil {
						t.Errorf("turn %s decided at %d while turn %s is in flight", d.TurnID, ev.Seq, st.Turn.ID)
					}
				case *events.TurnRequested:
					turns++
					if st.Turn == nil || st.Turn.ID != d.TurnID {
						t.Errorf("turn %s requested at %d, but the turn in flight is %+v", d.TurnID, ev.Seq, st.Turn)
					}
				}
				session.Apply(st, ev)
			}
			if !turnsEnd && turns != 1 {
				t.Fatalf("%d turns requested with none ending, want 1", turns)
			}
			if turns == 0 || len(ofType(log, events.TypeTurnRequested)) != len(ofType(log, events.TypeSelectorDecided)) {
				t.Fatalf("%d requests for %d decisions", turns, len(ofType(log, events.TypeSelectorDecided)))
			}
			t.Logf("%d turns over %d events", turns, len(log))
		})
	}
}

// A turn that failed (the agent worker gave up: a tool nobody offers) with
// no rule routing the failure closes its session as failed, naming the
// turn and why, once however often the failure is delivered.
func TestUnroutedFailedTurnClosesTheSession(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	trigger := r.start(t, "s1")
	if err := r.s.Handle(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	st, err := r.c.State(ctx, "s1")
	if err != nil || st.Turn == nil {
		t.Fatalf("no turn requested: %+v, %v", st, err)
	}
	// The agent worker ends the turn it gave up on.
	worker, err := client.New(r.sc.Conn(), client.As(events.Service("agent-worker")))
	if err != nil {
		t.Fatal(err)
	}
	a, err := worker.Emit(ctx, "s1", &events.TurnFailed{TurnID: st.Turn.ID, Agent: st.Turn.Agent, Error: "tool run_tests of agent researcher is not registered"})
	if err != nil {
		t.Fatal(err)
	}
	failed := r.at(t, "s1", a.Seq)
	for range 2 { // redelivered
		if err := r.s.Handle(ctx, failed); err != nil {
			t.Fatal(err)
		}
	}
	st, err = r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "closed" || st.Outcome != OutcomeTurnFailed || !strings.Contains(st.CloseReason, "turn "+failedTurnID(t, failed)+" of researcher failed") || !strings.Contains(st.CloseReason, "run_tests") {
		t.Fatalf("after the failed turn: %s (%s: %s)", st.Status, st.Outcome, st.CloseReason)
	}
	if n := len(ofType(r.log(t, "s1"), events.TypeSessionClosed)); n != 1 {
		t.Fatalf("%d closes", n)
	}
}

func failedTurnID(t *testing.T, ev events.Stored) string {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return d.(*events.TurnFailed).TurnID
}
