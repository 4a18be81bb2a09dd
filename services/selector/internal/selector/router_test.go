package selector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/routerapi"
	"github.com/openrath/rath/pkg/session"
)

// serveRouter answers the questions to router triage with answer, as a
// program in any language would: a queue subscription and a JSON reply.
// It returns how many questions it answered and the last it was asked.
func serveRouter(t *testing.T, nc *nats.Conn, answer func(routerapi.Request) any) (*atomic.Int32, func() routerapi.Request) {
	t.Helper()
	var (
		n    atomic.Int32
		mu   sync.Mutex
		last routerapi.Request
	)
	sub, err := nc.QueueSubscribe(routerapi.Filter("triage"), routerapi.Queue("triage"), func(m *nats.Msg) {
		var req routerapi.Request
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("question %s: %v", m.Data, err)
			return
		}
		mu.Lock()
		last = req
		mu.Unlock()
		n.Add(1)
		body, _ := json.Marshal(answer(req))
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n, func() routerapi.Request { mu.Lock(); defer mu.Unlock(); return last }
}

func setupRouted(t *testing.T) *rig {
	t.Helper()
	_, nc := natstest.Start(t)
	return setupWith(t, nc, "testdata/routed.yaml")
}

// The router's answer is the selector's decision: one decision, recorded by
// the selector, naming the router and its reason, and the turn it routed.
// The router was asked what the rule's expression reads.
func TestRouterChoosesTheRoute(t *testing.T) {
	r := setupRouted(t)
	ctx := context.Background()
	asked, last := serveRouter(t, r.sc.Conn(), func(routerapi.Request) any {
		return routerapi.Answer{Agent: "planner", Reason: "a plan comes first"}
	})
	trigger := r.start(t, "s1")
	if err := r.s.Handle(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	log := r.log(t, "s1")
	decided, requests := ofType(log, events.TypeSelectorDecided), ofType(log, events.TypeTurnRequested)
	if len(decided) != 1 || len(requests) != 1 || asked.Load() != 1 {
		t.Fatalf("%d decisions, %d requests, asked %d times", len(decided), len(requests), asked.Load())
	}
	d, _ := decided[0].Decode()
	dec := d.(*events.SelectorDecided)
	if dec.Rule != "triage" || dec.Route != "agent:planner" || dec.Router != "triage" || dec.Reason != "a plan comes first" ||
		dec.Agent != "planner" || decided[0].Source != Source || decided[0].ID != decisionID(trigger) {
		t.Fatalf("decision %+v from %s", dec, decided[0].Source)
	}
	q := last()
	if q.Router != "triage" || q.Session != "s1" || q.Tenant != events.DefaultTenant || q.Workflow != "routed" || q.Rule != "triage" ||
		!reflect.DeepEqual(q.Agents, []string{"planner", "reviewer"}) || q.Event.ID != trigger.ID || q.Event.Seq != trigger.Seq ||
		q.Event.Type != events.TypeSessionStarted || q.State.Seq != int64(trigger.Seq) || q.State.Status != "active" {
		t.Fatalf("question %+v", q)
	}
}

// A redelivered trigger follows the decision stored for it and asks the
// router nothing: one decision, one request, however often it comes, one
// after the other or at once.
func TestRoutedTriggerDecidesOnce(t *testing.T) {
	r := setupRouted(t)
	ctx := context.Background()
	var flip atomic.Int32
	asked, _ := serveRouter(t, r.sc.Conn(), func(routerapi.Request) any {
		// A router that answers differently each time: only one answer
		// may ever be recorded.
		if flip.Add(1)%2 == 0 {
			return routerapi.Answer{Agent: "reviewer"}
		}
		return routerapi.Answer{Agent: "planner"}
	})
	trigger := r.start(t, "s1")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- r.s.Handle(ctx, trigger) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	before := asked.Load()
	for range 3 {
		if err := r.s.Handle(ctx, trigger); err != nil {
			t.Fatal(err)
		}
	}
	if asked.Load() != before {
		t.Fatalf("a redelivery after the decision asked the router again (%d, then %d)", before, asked.Load())
	}
	log := r.log(t, "s1")
	decided, requests := ofType(log, events.TypeSelectorDecided), ofType(log, events.TypeTurnRequested)
	if len(decided) != 1 || len(requests) != 1 {
		t.Fatalf("%d decisions, %d requests", len(decided), len(requests))
	}
	d, _ := decided[0].Decode()
	q, _ := requests[0].Decode()
	if d.(*events.SelectorDecided).Agent != q.(*events.TurnRequested).Agent {
		t.Fatalf("decided %+v, requested %+v", d, q)
	}
}

// logged is a slog handler that signals each record whose message is msg.
type logged struct {
	msg string
	ch  chan slog.Record
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		select {
		case l.ch <- r:
		default:
		}
	}
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// No program serves the router: the trigger waits, retried by the consume
// runner past its attempts, and is routed once a router appears. Nothing is
// given up or recorded as failed meanwhile.
func TestNoRouterWaitsForOne(t *testing.T) {
	r := setupRouted(t)
	nc := r.sc.Conn()
	waiting := &logged{msg: "handler waiting; retrying", ch: make(chan slog.Record, 1)}
	testrig.Run(t, "selector", func(ctx context.Context) error {
		h := r.s.Handler()
		h.MaxAttempts = 2
		return consume.Run(ctx, nc, h, consume.RecordInSession(r.sc), slog.New(waiting))
	})
	r.start(t, "s1")
	for range 3 { // past MaxAttempts
		rec := <-waiting.ch
		var why string
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				why = a.Value.String()
			}
			return true
		})
		if !strings.Contains(why, "router triage: no program serves it") {
			t.Fatalf("waiting because %q", why)
		}
	}
	if n := len(ofType(r.log(t, "s1"), events.TypeSelectorDecided)); n != 0 {
		t.Fatalf("%d decisions without a router", n)
	}
	serveRouter(t, nc, func(routerapi.Request) any { return routerapi.Answer{Agent: "reviewer"} })
	ev := testrig.WaitFor(t, r.c, "s1", events.TypeTurnRequested)
	d, _ := ev.Decode()
	if d.(*events.TurnRequested).Agent != "reviewer" {
		t.Fatalf("requested %+v", d)
	}
	if n := len(ofType(r.log(t, "s1"), events.TypeHandlerFailed)); n != 0 {
		t.Fatalf("%d failures recorded while waiting for a router", n)
	}
}

// An answer the workflow refuses (an agent it does not define) is refused:
// no decision is stored, the trigger is given up and the refusal recorded
// in the session (rath.handler.failed, and the dead letter), and the session
// goes on: its next trigger is routed as usual.
func TestRefusedAnswerIsRecordedAndTheSessionGoesOn(t *testing.T) {
	r := setupRouted(t)
	nc := r.sc.Conn()
	serveRouter(t, nc, func(q routerapi.Request) any {
		if q.Event.Type == events.TypeSessionStarted {
			return routerapi.Answer{Agent: "ghost"}
		}
		return routerapi.Answer{Agent: "reviewer", Reason: "the user asked"}
	})
	trigger := r.start(t, "s1")
	err := r.s.Handle(context.Background(), trigger)
	var refused *RefusedError
	if !consume.IsPermanent(err) || !errors.As(err, &refused) || refused.Router != "triage" ||
		!strings.Contains(err.Error(), `"ghost" is not an agent of workflow routed (agents: planner, reviewer)`) {
		t.Fatalf("handle: %v, want a permanent refusal naming the agent", err)
	}
	testrig.Run(t, "selector", func(ctx context.Context) error {
		return consume.Run(ctx, nc, r.s.Handler(), consume.RecordInSession(r.sc), quiet)
	})
	failed := testrig.WaitFor(t, r.c, "s1", events.TypeHandlerFailed)
	d, _ := failed.Decode()
	if f := d.(*events.HandlerFailed); f.Handler != Durable || f.EventID != trigger.ID || !strings.Contains(f.Error, `"ghost" is not an agent`) {
		t.Fatalf("recorded %+v", f)
	}
	if n := len(ofType(r.log(t, "s1"), events.TypeSelectorDecided)); n != 0 {
		t.Fatalf("%d decisions stored for a refused answer", n)
	}
	r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleUser, Content: "please review"})
	ev := testrig.WaitFor(t, r.c, "s1", events.TypeTurnRequested)
	if q, _ := ev.Decode(); q.(*events.TurnRequested).Agent != "reviewer" {
		t.Fatalf("requested %+v", q)
	}
}

// With a fallback in the rule, whatever keeps the router from answering
// validly (none serving, an error answer, a malformed one) decides the
// fallback at once, recorded with why, and names no router: it did not
// choose.
func TestFallbackWhenTheRouterCannotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer any // nil: no router
		why    string
	}{
		{"no router", nil, "no program serves it"},
		{"error answer", routerapi.Answer{Error: "the oracle is out"}, "the router answered an error: the oracle is out"},
		{"malformed answer", map[string]any{"agent": "reviewer", "priority": 1}, `not an answer (json: unknown field "priority")`},
		{"two routes", routerapi.Answer{Agent: "reviewer", Close: &routerapi.Close{Outcome: "done"}}, "the answer names 2 routes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := setupRouted(t)
			ctx := context.Background()
			if tc.answer != nil {
				serveRouter(t, r.sc.Conn(), func(q routerapi.Request) any {
					if q.Rule == "triage" {
						return routerapi.Answer{Agent: "planner"}
					}
					return tc.answer
				})
			}
			r.start(t, "s1")
			trigger := r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleUser, Content: "anyone?"})
			if err := r.s.Handle(ctx, trigger); err != nil {
				t.Fatal(err)
			}
			decided := ofType(r.log(t, "s1"), events.TypeSelectorDecided)
			if len(decided) != 1 {
				t.Fatalf("%d decisions", len(decided))
			}
			d, _ := decided[0].Decode()
			dec := d.(*events.SelectorDecided)
			if dec.Rule != "again" || dec.Route != "close:unrouted" || dec.Router != "" ||
				!strings.HasPrefix(dec.Reason, "nobody routes it (fallback of rule again: ") || !strings.Contains(dec.Reason, tc.why) {
				t.Fatalf("decision %+v", dec)
			}
			st, err := r.c.State(ctx, "s1")
			if err != nil || st.Outcome != "unrouted" {
				t.Fatalf("state %+v %v", st, err)
			}
		})
	}
}

// answerPlan refuses what a workflow file would refuse in a route.
func TestAnswerPlan(t *testing.T) {
	wf, err := workflow.Load("testdata/routed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	at := &session.State{Seq: 7}
	tests := []struct {
		ans  routerapi.Answer
		want plan
		err  string
	}{
		{routerapi.Answer{Agent: "planner"}, plan{kind: workflow.RouteAgent, agent: "planner"}, ""},
		{routerapi.Answer{Close: &routerapi.Close{Outcome: "done"}}, plan{kind: workflow.RouteClose, detail: "done"}, ""},
		{routerapi.Answer{Fork: &routerapi.Fork{Agent: "reviewer"}}, plan{kind: workflow.RouteFork, agent: "reviewer", at: 7}, ""},
		{routerapi.Answer{Fork: &routerapi.Fork{At: 3}}, plan{kind: workflow.RouteFork, at: 3}, ""},
		{routerapi.Answer{}, plan{}, "the answer names no route"},
		{routerapi.Answer{Agent: "ghost"}, plan{}, `"ghost" is not an agent`},
		{routerapi.Answer{Close: &routerapi.Close{}}, plan{}, "the answer closes the session without an outcome"},
		{routerapi.Answer{Fork: &routerapi.Fork{At: 8}}, plan{}, "fork at 8 is past the trigger's sequence 7"},
		{routerapi.Answer{Fork: &routerapi.Fork{Agent: "ghost"}}, plan{}, `"ghost" is not an agent`},
		{routerapi.Answer{Agent: "planner", Error: "no"}, plan{}, "the router answered an error: no"},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, err := answerPlan(wf, at, tc.ans)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("answerPlan(%+v) = %+v, %v; want error %q", tc.ans, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("answerPlan(%+v) = %+v, %v; want %+v", tc.ans, got, err, tc.want)
			}
		})
	}
}

// The state a router is asked with is the activation's state, field for
// field: routerapi.State decodes it strictly and encodes it back unchanged,
// so a field added to the activation fails here until the contract has it.
func TestRouterStateIsTheActivationState(t *testing.T) {
	st, ev := folded(t, &events.SessionStarted{Workflow: "wf", Task: "t", Labels: map[string]string{"team": "core"}},
		&events.WorkPending{WorkID: "w1", Kind: "todo", Description: "d"},
		&events.SelectorDecided{Rule: "r", Route: "agent:coder", Agent: "coder", TurnID: "t1"},
		&events.TurnRequested{TurnID: "t1", Agent: "coder"},
		&events.ExperimentRecorded{Name: "poly5", CallID: "c1", Agent: "coder", Config: json.RawMessage(`{"degree":5,"lr":0.5}`),
			Metrics: map[string]float64{"val_r2": 0.97}, Commit: "abc"},
		&events.ExperimentRecorded{Name: "poly7", CallID: "c2", Agent: "coder", ExitCode: 1, Problem: "diverged"},
		&events.TurnCompleted{TurnID: "t1", Agent: "coder"})
	act, err := workflow.Activation(st, ev)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(act["state"])
	if err != nil {
		t.Fatal(err)
	}
	var rs routerapi.State
	dec := json.NewDecoder(strings.NewReader(string(want)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rs); err != nil {
		t.Fatalf("the activation's state is not a routerapi.State: %v", err)
	}
	got, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal(want, &a)
	_ = json.Unmarshal(got, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("state\n got %s\nwant %s", got, want)
	}
	if len(rs.Experiments) != 2 || rs.Experiments[0].Metrics["val_r2"] != 0.97 || rs.Experiments[0].Config["degree"] != 5.0 || rs.Experiments[1].OK || rs.Experiments[1].Problem != "diverged" {
		t.Errorf("experiments %+v", rs.Experiments)
	}
}
