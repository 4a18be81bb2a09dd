package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	memorysvc "github.com/openrath/rath/services/memory-svc/service"
)

// A trigger is decided the same way whenever its delivery comes: handled as
// soon as it is stored, or after later events of other producers are stored
// too (a loaded selector, a redelivery). A decision reads the trigger and the
// session folded up to it, not whatever the log holds when the delivery
// comes, so the same log gives the same decisions with the same inputs.
//
// Each scenario ends in a race: events that other producers append one
// right after the other. "as stored" delivers each of them before the next
// is appended; "late" appends them all, then delivers them in order, as
// the consumer does.
func TestDecisionDoesNotDependOnWhenTheTriggerIsDelivered(t *testing.T) {
	type decision struct {
		Trigger    string // the type of the event it records and is caused by
		Rule       string
		Route      string
		Candidates []string
		Inputs     string // JSON, event.seq left out once checked against the trigger
	}
	continued := func(trigger, agent string) decision {
		return decision{Trigger: trigger, Rule: RuleContinue, Route: "agent:" + agent, Inputs: `{"event.type":"` + trigger + `"}`}
	}
	started := func(agent string) decision {
		return decision{Trigger: events.TypeSessionStarted, Rule: "start", Route: "agent:" + agent, Candidates: []string{"start"}, Inputs: `{"event.type":"rath.session.started"}`}
	}
	for _, tc := range []struct {
		name     string
		workflow string
		memory   bool // runs the memory service
		agent    string
		// prefix follows the start and is delivered event by event.
		prefix []any
		// race is appended after the prefix; turn is the ID of the turn
		// the start routed.
		race func(turn string) []any
		want []decision
	}{{
		// The demo's divergence: the turn's end is no routing point while
		// its tool call runs; the result that completes the call is.
		name: "turn ends, then its tool result", workflow: "testdata/chatty.yaml", agent: "researcher",
		prefix: []any{&events.ToolRequested{CallID: "c1", Tool: "run", Agent: "researcher"}},
		race: func(turn string) []any {
			return []any{&events.TurnCompleted{TurnID: turn, Agent: "researcher", ToolCalls: 1}, &events.ToolCompleted{CallID: "c1", Tool: "run"}}
		},
		want: []decision{started("researcher"), continued(events.TypeToolCompleted, "researcher")},
	}, {
		name: "tool result, then the turn's end", workflow: "testdata/chatty.yaml", agent: "researcher",
		prefix: []any{&events.ToolRequested{CallID: "c1", Tool: "run", Agent: "researcher"}},
		race: func(turn string) []any {
			return []any{&events.ToolCompleted{CallID: "c1", Tool: "run"}, &events.TurnCompleted{TurnID: turn, Agent: "researcher", ToolCalls: 1}}
		},
		want: []decision{started("researcher"), continued(events.TypeTurnCompleted, "researcher")},
	}, {
		// A verdict arrives while its call runs: only memory is decided on
		// it, and that decision is not lost when the call's end and the
		// turn's end are stored before it is delivered.
		name: "verdict, its call's end and the turn's end", workflow: "testdata/memory.yaml", memory: true, agent: "coder",
		prefix: []any{&events.ToolRequested{CallID: "c1", Tool: "validate", Agent: "coder"}, &events.ToolStarted{CallID: "c1", Tool: "validate", Attempt: 1}},
		race: func(turn string) []any {
			return []any{&events.ValidationFailed{Validator: "go test", Reason: "TestMake keeps capitals"},
				&events.ToolCompleted{CallID: "c1", Tool: "validate"},
				&events.TurnCompleted{TurnID: turn, Agent: "coder", ToolCalls: 1}}
		},
		want: []decision{
			started("coder"),
			{Trigger: events.TypeValidationFailed, Rule: "record-failure", Route: "memory:project:demo", Candidates: []string{"record-failure"}, Inputs: `{"event.type":"rath.validation.failed"}`},
			continued(events.TypeTurnCompleted, "coder"),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, late := range []bool{false, true} {
				t.Run(map[bool]string{false: "as stored", true: "late"}[late], func(t *testing.T) {
					ns, nc := natstest.Start(t)
					r := setupWith(t, nc, tc.workflow)
					ctx := context.Background()
					if tc.memory {
						mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
						testrig.Run(t, "memory service", func(ctx context.Context) error {
							return memorysvc.Run(ctx, mnc, memorysvc.DefaultConfig(), quiet)
						})
					}
					const id = "s1"
					d := &deliverer{r: r, id: id, next: 1}
					r.start(t, id)
					d.catchUp(t)
					for _, ev := range tc.prefix {
						r.emit(t, id, ev)
						d.catchUp(t)
					}
					st, err := r.c.State(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if st.Turn == nil || st.Turn.Agent != tc.agent {
						t.Fatalf("after the prefix the turn in flight is %+v, want %s's", st.Turn, tc.agent)
					}
					for _, ev := range tc.race(st.Turn.ID) {
						r.emit(t, id, ev)
						if !late {
							d.catchUp(t)
						}
					}
					d.catchUp(t)

					log := r.log(t, id)
					byID := make(map[string]events.Stored, len(log))
					for _, ev := range log {
						byID[ev.ID] = ev
					}
					var got []decision
					for _, ev := range ofType(log, events.TypeSelectorDecided) {
						data, err := ev.Decode()
						if err != nil {
							t.Fatal(err)
						}
						sd := data.(*events.SelectorDecided)
						trigger, ok := byID[ev.Causation]
						if !ok {
							t.Fatalf("decision at %d: cause %s not in the log", ev.Seq, ev.Causation)
						}
						var inputs map[string]any
						if err := json.Unmarshal(sd.Inputs, &inputs); err != nil {
							t.Fatalf("decision at %d: inputs %s: %v", ev.Seq, sd.Inputs, err)
						}
						if seq, ok := inputs["event.seq"]; ok {
							if seq != float64(trigger.Seq) {
								t.Errorf("decision at %d records event.seq %v, but its trigger is at %d", ev.Seq, seq, trigger.Seq)
							}
							delete(inputs, "event.seq")
						}
						in, _ := json.Marshal(inputs)
						got = append(got, decision{Trigger: trigger.Type, Rule: sd.Rule, Route: sd.Route, Candidates: sd.Candidates, Inputs: string(in)})
					}
					if !reflect.DeepEqual(got, tc.want) {
						t.Errorf("decisions:\n%s\nwant:\n%s\nlog:\n%s", fmtDecisions(got), fmtDecisions(tc.want), fmtLog(log))
					}
				})
			}
		})
	}
}

// deliverer hands a session's events to the selector in log order, each
// once, as the selector's consumer does.
type deliverer struct {
	r    *rig
	id   string
	next uint64
}

// catchUp delivers every event stored since the last call, the selector's
// own included (it ignores them), until none is left.
func (d *deliverer) catchUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for {
		page, err := d.r.c.Log(ctx, d.id, client.Range{From: d.next, Limit: api.MaxLogPage})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return
		}
		for _, ev := range page {
			if err := d.r.s.Handle(ctx, ev); err != nil {
				t.Fatalf("handle %d (%s): %v", ev.Seq, ev.Type, err)
			}
			d.next = ev.Seq + 1
		}
	}
}

func fmtDecisions[T any](ds []T) string {
	var s string
	for _, d := range ds {
		s += fmt.Sprintf("  %+v\n", d)
	}
	return s
}

func fmtLog(log []events.Stored) string {
	var s string
	for _, ev := range log {
		s += fmt.Sprintf("  %d %s from %s\n", ev.Seq, ev.Type, ev.Source)
	}
	return s
}

// Wall time is measured from the session's start to the trigger's own time,
// both in the log, not to the moment the selector gets to the trigger: a
// trigger stored ten minutes into a session with half an hour is routed
// however late it is delivered, and one stored forty minutes in closes it.
func TestWallTimeRunsToTheTrigger(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupWith(t, nc, "testdata/budget.yaml")
	ctx := context.Background()
	// The session started two hours ago by the wall clock.
	t0 := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
	if _, err := r.c.Start(ctx, "s1", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref}, events.WithTime(t0)); err != nil {
		t.Fatal(err)
	}
	d := &deliverer{r: r, id: "s1", next: 1}
	for _, at := range []time.Duration{10 * time.Minute, 40 * time.Minute} {
		if _, err := r.c.Emit(ctx, "s1", &events.ChunkAppended{Role: events.RoleUser, Content: "at " + at.String()}, events.WithTime(t0.Add(at))); err != nil {
			t.Fatal(err)
		}
		d.catchUp(t)
	}
	var got []string
	for _, ev := range ofType(r.log(t, "s1"), events.TypeSelectorDecided) {
		data, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		sd := data.(*events.SelectorDecided)
		got = append(got, sd.Rule+" "+sd.Route)
		if sd.Rule == RuleBudget {
			got = append(got, sd.Reason)
		}
	}
	want := []string{
		"on-chunk agent:coder",
		"budget close:budget_exceeded", "budget wall_time=30m0s reached (40m0s elapsed)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decisions %q, want %q", got, want)
	}
}
