package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/agentapi"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// servedRig is a ledger, a session running testdata/served.yaml (a served
// planner), the worker answering served agents' requests, and a client
// with the identity served programs run with.
type servedRig struct {
	*rig
	url    string
	agents *client.Agents
	logged *lockedBuffer // the worker's log
}

// lockedBuffer is a log's output, written by the worker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func setupServed(t *testing.T) *servedRig {
	t.Helper()
	ns, nc := natstest.Start(t)
	// Tenants' users are added before any service runs (nats-server
	// reloads race running services).
	natstest.AddUsers(t, ns.ClientURL(), events.Principal{Tenant: "acme", User: "alice"})
	r := setupFile(t, nc, "testdata/served.yaml", "")
	logged := &lockedBuffer{}
	w := r.newWorker(t, worker.Config{}, slog.New(slog.NewTextHandler(logged, nil)))
	wnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker) // closed after the worker stops
	testrig.Run(t, "served", func(ctx context.Context) error { return w.Served(ctx, wnc) })
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker), client.As(worker.ServedBy))
	if err != nil {
		t.Fatal(err)
	}
	return &servedRig{rig: r, url: ns.ClientURL(), agents: c.Agents(), logged: logged}
}

func named(req events.Stored, turnID, agent string) agentapi.Turn {
	return agentapi.Turn{Session: req.Session, Seq: req.Seq, TurnID: turnID, Agent: agent}
}

// A served agent's answer is checked and recorded by the worker with the
// agent's own source, IDs and order; a retry of the same answer gets the
// same reply and records nothing more; another answer to the answered
// turn is refused.
func TestServedAnswerRecordedOnce(t *testing.T) {
	r := setupServed(t)
	ctx := context.Background()
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "planner")
	spec, err := r.agents.Turn(ctx, named(req, "turn-1", "planner"))
	if err != nil || len(spec.Tools) != 1 || spec.Tools[0] != "run" {
		t.Fatalf("turn: %+v, %v", spec, err)
	}
	ans := &agentapi.Answer{Text: "Running.", ToolCalls: []agentapi.ToolCall{{Tool: "run", Arguments: json.RawMessage(`{"command": ["ls"]}`)}}, TokensIn: 3}
	rec := agentapi.RecordRequest{Turn: named(req, "turn-1", "planner"), Answer: ans}
	for range 2 {
		rep, err := r.agents.Record(ctx, rec)
		if err != nil || rep.Outcome != agentapi.OutcomeCompleted {
			t.Fatalf("record: %+v, %v", rep, err)
		}
	}
	got := caused(r.log(t, "s1"), req)
	want := []string{events.TypeChunkAppended, events.TypeToolRequested, events.TypeModelCalled, events.TypeTurnCompleted}
	if types := typesOf(got); strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("recorded %v, want %v", types, want)
	}
	for _, ev := range got {
		if ev.Source != "rath/agent/planner" {
			t.Errorf("%s recorded with source %s", ev.Type, ev.Source)
		}
	}
	other := rec
	other.Answer = &agentapi.Answer{Text: "Something else."}
	if _, err := r.agents.Record(ctx, other); !errors.Is(err, agentapi.ErrNotPending) {
		t.Fatalf("another answer to an answered turn: %v, want %s", err, agentapi.CodeNotPending)
	}
	if _, err := r.agents.Turn(ctx, named(req, "turn-1", "planner")); !errors.Is(err, agentapi.ErrNotPending) {
		t.Fatalf("turn of an answered turn: %v, want %s", err, agentapi.CodeNotPending)
	}
	if n := len(caused(r.log(t, "s1"), req)); n != len(want) {
		t.Fatalf("%d events after the refused answer, want %d", n, len(want))
	}
}

// What a tenant or a misbehaving program would try is refused with a typed
// error naming the problem, and nothing is recorded.
func TestServedRequestsRefused(t *testing.T) {
	r := setupServed(t)
	ctx := context.Background()
	r.start(t, "s1")
	r.start(t, "s2")
	req := r.request(t, "s1", "turn-1", "planner")
	nobody := r.request(t, "s2", "turn-n", "nobody")
	ans := &agentapi.Answer{Text: "mine"}
	for _, c := range []struct {
		name string
		req  agentapi.RecordRequest
		want *api.Error
	}{
		{"another agent's turn", agentapi.RecordRequest{Turn: named(req, "turn-1", "coder"), Answer: ans}, agentapi.ErrNotPending},
		{"another turn ID", agentapi.RecordRequest{Turn: named(req, "turn-9", "planner"), Answer: ans}, agentapi.ErrNotPending},
		{"not a turn request", agentapi.RecordRequest{Turn: agentapi.Turn{Session: "s1", Seq: 1, TurnID: "turn-1", Agent: "planner"}, Answer: ans}, agentapi.ErrNotPending},
		{"beyond the head", agentapi.RecordRequest{Turn: agentapi.Turn{Session: "s1", Seq: 999, TurnID: "turn-1", Agent: "planner"}, Answer: ans}, agentapi.ErrNotPending},
		{"an agent the workflow does not serve", agentapi.RecordRequest{Turn: named(nobody, "turn-n", "nobody"), Answer: ans}, agentapi.ErrNotServed},
		{"unknown session", agentapi.RecordRequest{Turn: agentapi.Turn{Session: "nope", Seq: 2, TurnID: "turn-1", Agent: "planner"}, Answer: ans}, api.ErrNotFound},
		{"no answer nor failure", agentapi.RecordRequest{Turn: named(req, "turn-1", "planner")}, api.ErrMalformed},
		{"both answer and failure", agentapi.RecordRequest{Turn: named(req, "turn-1", "planner"), Answer: ans, Failure: "and failed"}, api.ErrMalformed},
		{"a name no agent has", agentapi.RecordRequest{Turn: named(req, "turn-1", "../planner"), Answer: ans}, api.ErrMalformed},
		{"the reserved name", agentapi.RecordRequest{Turn: named(req, "turn-1", "worker"), Answer: ans}, api.ErrMalformed},
		{"no sequence", agentapi.RecordRequest{Turn: agentapi.Turn{Session: "s1", TurnID: "turn-1", Agent: "planner"}, Answer: ans}, api.ErrMalformed},
		{"negative usage", agentapi.RecordRequest{Turn: named(req, "turn-1", "planner"), Answer: &agentapi.Answer{TokensIn: -1}}, api.ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := r.agents.Record(ctx, c.req); !errors.Is(err, c.want) {
				t.Fatalf("record: %v, want %s", err, c.want.Code)
			}
		})
	}

	// Bodies a client type cannot send: a forged source, trailing data,
	// nothing, too much. The admin connection may publish on the agent
	// worker's subject, as a program with its identity can.
	subject := worker.ServedBy.Agent(agentapi.ReqRecord)
	valid := `{"session":"s1","seq":` + jsonNum(req.Seq) + `,"turn_id":"turn-1","agent":"planner","answer":{"text":"x"}`
	for name, body := range map[string]string{
		"a forged source":         valid + `,"source":"rath/agent-worker"}`,
		"an actor":                valid + `,"actor":"acme/alice"}`,
		"data after the object":   valid + `}{}`,
		"empty":                   ``,
		"not JSON":                `planner says hi`,
		"arguments not an object": `{"session":"s1","seq":` + jsonNum(req.Seq) + `,"turn_id":"turn-1","agent":"planner","answer":{"tool_calls":[{"tool":"run","arguments":"{"}]}}`,
		"too large":               valid + `,"failure":"` + strings.Repeat("x", agentapi.MaxRequestBytes) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			want := api.CodeMalformed
			if name == "too large" {
				want = api.CodeTooLarge
			}
			if got := raw(t, r.nc, subject, body); got != want {
				t.Fatalf("answered %q, want %q", got, want)
			}
		})
	}

	// Another principal's subject: a tenant's user (as an admin can write
	// it) is refused by the worker; the user itself may not even publish.
	if got := raw(t, r.nc, events.Principal{Tenant: "acme", User: "alice"}.Agent(agentapi.ReqRecord), valid+`}`); got != agentapi.CodeForbidden {
		t.Fatalf("a tenant's principal: answered %q, want %q", got, agentapi.CodeForbidden)
	}
	if got := raw(t, r.nc, events.Service("tool-runner").Agent(agentapi.ReqTurn), `{}`); got != agentapi.CodeForbidden {
		t.Fatalf("another service's principal: answered %q, want %q", got, agentapi.CodeForbidden)
	}
	// An operator finds each refusal in the worker's log, with the
	// session and who asked (a refusal is logged before it is answered).
	for _, want := range []string{
		`msg="served agent's request refused" op=record session=s2 principal=rath/agent-worker code=agent_not_served`,
		`msg="served agent's request refused" op=record session="" principal=acme/alice code=forbidden`,
	} {
		if !strings.Contains(r.logged.String(), want) {
			t.Errorf("the worker's log has no %s:\n%s", want, r.logged.String())
		}
	}
	violations := make(chan error, 4)
	alice := natstest.ConnectUser(t, r.url, events.Principal{Tenant: "acme", User: "alice"},
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err := alice.Publish(events.Principal{Tenant: "acme", User: "alice"}.Agent(agentapi.ReqRecord), []byte(valid+`}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-violations; !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("a tenant's user asking: %v, want a permission violation", err)
	}

	if got := caused(r.log(t, "s1"), req); len(got) != 0 {
		t.Fatalf("refused requests recorded %v", typesOf(got))
	}
	// The turn is still the planner's to answer, and its failure is
	// recorded as such.
	failed := agentapi.RecordRequest{Turn: named(req, "turn-1", "planner"), Failure: "no plan"}
	for range 2 { // a retry gets the same reply
		if rep, err := r.agents.Record(ctx, failed); err != nil || rep.Outcome != agentapi.OutcomeFailed {
			t.Fatalf("record a failure: %+v, %v", rep, err)
		}
	}
	failed.Failure = "another reason"
	if _, err := r.agents.Record(ctx, failed); !errors.Is(err, agentapi.ErrNotPending) {
		t.Fatalf("another failure of a failed turn: %v, want %s", err, agentapi.CodeNotPending)
	}
	if got := typesOf(caused(r.log(t, "s1"), req)); len(got) != 1 || got[0] != events.TypeTurnFailed {
		t.Fatalf("recorded %v, want one %s", got, events.TypeTurnFailed)
	}
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// raw sends body on subject and returns the error code of the reply ("" if
// none).
func raw(t *testing.T, nc *nats.Conn, subject, body string) api.Code {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), 30*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return api.Code(m.Header.Get(api.HeaderError))
}
