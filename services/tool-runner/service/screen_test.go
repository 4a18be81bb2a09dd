package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/pkg/toolserver"
	"github.com/openrath/rath/services/tool-runner/service"
)

// screenedWorkflow gates every run, and the custom tool word_count when it
// counts a secret (a CEL condition, which a tool server cannot evaluate).
const screenedWorkflow = `name: screened
agents:
  - name: coder
    provider: scripted
    script: a.yaml
    tools: [run, list_files, word_count]
gates:
  - name: runs
    tools: [run]
    agents: [coder]
    approver: leads
  - name: secrets
    tools: [word_count]
    when: event.data.?arguments.?text.orValue("") == "secret"
    approver: leads
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`

// tenants is a deployment as rath up makes it, with approver roles: the
// ledger, the tool runner and a custom tool server (word_count), a tenant's
// user without a role (mallory), one holding "leads" (lead), and the agent
// worker's identity.
type tenants struct {
	mallory, lead, worker *client.Client
	store                 *eventstore.Store
	wf                    *workflow.Workflow
	ref, url              string
	counted               atomic.Int32
	restart               func(t *testing.T)
}

func setupTenants(t *testing.T) *tenants {
	t.Helper()
	dir := t.TempDir()
	wfFile := filepath.Join(dir, "w.yaml")
	write(t, wfFile, screenedWorkflow)
	write(t, filepath.Join(dir, "a.yaml"), "- content: hi\n")
	wf, err := workflow.Load(wfFile)
	if err != nil {
		t.Fatal(err)
	}
	ns, nc := natstest.Start(t)
	url := ns.ClientURL()
	// Users first: adding one reloads the server (natstest.ConnectUser).
	as := func(p events.Principal) *client.Client {
		c, err := client.New(natstest.ConnectUser(t, url, p), client.As(p), client.WithRetryFor(0))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tn := &tenants{mallory: as(events.Principal{Tenant: "default", User: "mallory"}), lead: as(events.Principal{Tenant: "default", User: "lead"}), wf: wf, url: url}
	tn.worker, err = client.New(natstest.ConnectAs(t, url, auth.RoleAgentWorker), client.As(events.Service("agent-worker")))
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.AddApproverRoles(natstest.CredsDir(t, url), events.Principal{Tenant: "default", User: "lead"}, "leads"); err != nil {
		t.Fatal(err)
	}
	testrig.Ledger(t, url)
	cfg := service.DefaultConfig()
	cfg.Backend = "local"
	cfg.Sandbox.Root = filepath.Join(dir, "workspaces")
	cfg.Sandbox.Path = os.Getenv("PATH")
	cfg.MCP.Scratch = t.TempDir()
	tnc := natstest.ConnectAs(t, url, auth.RoleToolRunner)
	run := func() *testrig.Service {
		return testrig.Run(t, "tool runner", func(ctx context.Context) error { return service.Run(ctx, tnc, cfg, quiet) })
	}
	runner := run()
	tn.restart = func(t *testing.T) {
		t.Helper()
		if err := runner.Stop(); err != nil {
			t.Fatalf("stop the tool runner: %v", err)
		}
		runner = run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if tn.store, err = eventstore.AttachWait(ctx, nc); err != nil {
		t.Fatal(err)
	}
	tn.ref = testrig.Bundle(t, tn.store, wf)
	snc := natstest.ConnectAs(t, url, auth.RoleToolRunner)
	testrig.Run(t, "word_count server", func(ctx context.Context) error {
		return toolserver.Serve(ctx, snc, toolserver.Tool{
			Name: "word_count", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Handle: func(ctx context.Context, args json.RawMessage) (string, error) {
				tn.counted.Add(1)
				var in struct{ Text string }
				err := json.Unmarshal(args, &in)
				return strings.Repeat("word ", len(strings.Fields(in.Text))), err
			},
		}, toolserver.WithLogger(quiet))
	})
	testrig.Eventually(t, time.Minute, "word_count registered", func() (bool, string) {
		_, err := tn.store.Tool(context.Background(), "word_count")
		return err == nil, "not yet"
	})
	return tn
}

func (tn *tenants) start(t *testing.T, id string) {
	t.Helper()
	if _, err := tn.mallory.Start(context.Background(), id, events.SessionStarted{Workflow: tn.wf.Name, WorkflowHash: tn.wf.Hash(), WorkflowRef: tn.ref}); err != nil {
		t.Fatal(err)
	}
}

// emit appends a call as c would: mallory with rath emit, a tool server
// with its client.
func (tn *tenants) emit(t *testing.T, c *client.Client, id, callID, tool, args string) {
	t.Helper()
	if _, err := c.Emit(context.Background(), id, &events.ToolRequested{CallID: callID, Tool: tool, Agent: "coder", Arguments: json.RawMessage(args)}); err != nil {
		t.Fatal(err)
	}
}

// approvalOf waits for the approval request of the call and returns it.
func (tn *tenants) approvalOf(t *testing.T, id, callID string) events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got events.Stored
	found := errors.New("found")
	err := tn.lead.Watch(ctx, id, func(ev events.Stored) error {
		if d, err := ev.Decode(); err == nil && ev.Type == events.TypeApprovalRequested && d.(*events.ApprovalRequested).CallID == callID {
			got = ev
			return found
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("no approval asked for %s in %s: %v", callID, id, err)
	}
	return got
}

// finish waits for the call's end and returns its events.
func (tn *tenants) finish(t *testing.T, id, callID string) []any {
	t.Helper()
	r := &rig{c: tn.lead}
	return of(t, r.finish(t, id, callID), callID)
}

// count counts the session's events of type typ about the call.
func (tn *tenants) count(t *testing.T, id, typ, callID string) int {
	t.Helper()
	log, err := tn.lead.Log(context.Background(), id, client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range log {
		var d struct {
			CallID string `json:"call_id"`
		}
		if ev.Type == typ && json.Unmarshal(ev.Data, &d) == nil && d.CallID == callID {
			n++
		}
	}
	return n
}

func (tn *tenants) status(t *testing.T, id, callID string) string {
	t.Helper()
	st, err := tn.lead.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Tools[callID]; c != nil {
		return c.Status
	}
	return ""
}

func wantRefused(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	if api.CodeOf(err) != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

// Issue 29: a tenant's user without the approver role appends a gated run
// call itself. It does not run: the tool runner decides its gate where it
// runs and asks for the approval (the same request as the agent worker's),
// which holds across a restart of the runner and in a fork; nothing the
// user appends unlocks it; a lead's grant runs it once; and a call no gate
// holds runs at once.
func TestGatesHoldAUsersCall(t *testing.T) {
	tn := setupTenants(t)
	ctx := context.Background()
	tn.start(t, "s")
	tn.emit(t, tn.mallory, "s", "g1", "run", `{"command":["sh","-c","echo RAN"]}`)

	ev := tn.approvalOf(t, "s", "g1")
	d, _ := ev.Decode()
	ask := d.(*events.ApprovalRequested)
	if ev.Actor != session.Screener || ask.Approver != "leads" || ask.Gate != "runs" || ask.Tool != "run" || !strings.HasPrefix(ask.ApprovalID, "ap-") {
		t.Fatalf("approval request %+v by %s", ask, ev.Actor)
	}

	// What mallory can append does not unlock the call.
	_, err := tn.mallory.Approve(ctx, "s", ask.ApprovalID, "")
	wantRefused(t, "mallory approves", err, api.CodeNotApprover)
	_, err = tn.mallory.Emit(ctx, "s", &events.ApprovalGranted{ApprovalID: ask.ApprovalID, By: "lead"})
	wantRefused(t, "mallory appends a grant", err, api.CodeNotApprover)
	_, err = tn.mallory.Emit(ctx, "s", &events.ApprovalRequested{ApprovalID: ask.ApprovalID, Action: "run call", CallID: "g1", Tool: "run"})
	wantRefused(t, "mallory asks the approval again, of nobody", err, api.CodeTransition)
	_, err = tn.mallory.Emit(ctx, "s", &events.ToolCleared{CallID: "g1", Tool: "run"})
	wantRefused(t, "mallory clears the call", err, api.CodeTransition)
	if _, err := tn.mallory.Emit(ctx, "s", &events.ApprovalRequested{ApprovalID: "ap-mine", Action: "run call", CallID: "g1", Tool: "run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.mallory.Approve(ctx, "s", "ap-mine", "fine by me"); err != nil {
		t.Fatal(err) // accepted (it asks no role), and gates nothing
	}

	// A call no gate holds runs at once; the runner handled everything
	// before it by then (one session, in order).
	tn.emit(t, tn.mallory, "s", "free", "list_files", `{}`)
	if got := tn.finish(t, "s", "free"); len(got) == 0 {
		t.Fatal("no events of the ungated call")
	} else if _, ok := got[len(got)-1].(*events.ToolCompleted); !ok {
		t.Fatalf("ungated call: %#v", got)
	}
	if n := tn.count(t, "s", events.TypeToolCleared, "free"); n != 1 {
		t.Errorf("%d clearances of the ungated call, want 1", n)
	}

	tn.restart(t)
	tn.emit(t, tn.mallory, "s", "free2", "list_files", `{}`)
	tn.finish(t, "s", "free2")
	if s := tn.status(t, "s", "g1"); s != session.ToolRequested {
		t.Fatalf("the gated call is %s before the grant, after a restart", s)
	}

	// A fork taken now inherits the pending approval; granted there, the
	// call runs in the fork only.
	if _, err := tn.mallory.Fork(ctx, api.ForkRequest{Parent: "s", ID: "s-fork"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.lead.Approve(ctx, "s-fork", ask.ApprovalID, "in the fork"); err != nil {
		t.Fatal(err)
	}
	if got := tn.finish(t, "s-fork", "g1"); !strings.Contains(got[len(got)-1].(*events.ToolCompleted).Result, "RAN") {
		t.Fatalf("granted call in the fork: %#v", got)
	}
	if s := tn.status(t, "s", "g1"); s != session.ToolRequested {
		t.Fatalf("the fork's grant ran the parent's call: %s", s)
	}

	if _, err := tn.lead.Approve(ctx, "s", ask.ApprovalID, "reviewed"); err != nil {
		t.Fatal(err)
	}
	got := tn.finish(t, "s", "g1")
	if done, ok := got[len(got)-1].(*events.ToolCompleted); !ok || !strings.Contains(done.Result, "RAN") {
		t.Fatalf("granted call: %#v", got)
	}
	tn.emit(t, tn.mallory, "s", "free3", "list_files", `{}`)
	tn.finish(t, "s", "free3")
	if n := tn.count(t, "s", events.TypeToolStarted, "g1"); n != 1 {
		t.Errorf("the granted call started %d times, want once", n)
	}
	if n := tn.count(t, "s", events.TypeApprovalRequested, "g1"); n != 2 {
		t.Errorf("%d approval requests for g1, want the runner's and mallory's own", n)
	}
}

// The same through a custom tool server, which evaluates no workflow: the
// tool runner decides the gate of a user's call of word_count (a CEL
// condition), the server runs a cleared call at once and a gated one only
// after the grant; a call a tool server proposes is held the same way.
func TestGatesHoldACustomToolsCall(t *testing.T) {
	tn := setupTenants(t)
	ctx := context.Background()
	tn.start(t, "c")
	tn.emit(t, tn.mallory, "c", "secret", "word_count", `{"text":"secret"}`)
	tn.emit(t, tn.mallory, "c", "plain", "word_count", `{"text":"a b"}`)
	if got := tn.finish(t, "c", "plain"); got[len(got)-1].(*events.ToolCompleted).Result != "word word " {
		t.Fatalf("cleared custom call: %#v", got)
	}
	ask := tn.approvalOf(t, "c", "secret")
	if s := tn.status(t, "c", "secret"); s != session.ToolRequested || tn.counted.Load() != 1 {
		t.Fatalf("the gated custom call is %s after %d runs", s, tn.counted.Load())
	}

	// A tool server's own proposal (as rath/tool-runner, custom tool
	// servers' default identity) is screened too.
	server, err := client.New(natstest.ConnectAs(t, tn.url, auth.RoleToolRunner), client.As(events.Service("tool-runner")))
	if err != nil {
		t.Fatal(err)
	}
	tn.emit(t, server, "c", "by-server", "run", `{"command":["true"]}`)
	tn.approvalOf(t, "c", "by-server")

	d, _ := ask.Decode()
	if _, err := tn.lead.Approve(ctx, "c", d.(*events.ApprovalRequested).ApprovalID, ""); err != nil {
		t.Fatal(err)
	}
	if got := tn.finish(t, "c", "secret"); got[len(got)-1].(*events.ToolCompleted).Result != "word " {
		t.Fatalf("granted custom call: %#v", got)
	}
	if n := tn.counted.Load(); n != 2 {
		t.Errorf("word_count ran %d times, want 2", n)
	}
	if s := tn.status(t, "c", "by-server"); s != session.ToolRequested {
		t.Errorf("the tool server's gated call is %s", s)
	}
}

// A call the model asked for is gated exactly once: the agent worker
// records it after its approval request (as workflow.CallEvents does), and
// the tool runner, which trusts the agent worker's decision, asks nothing
// more; the grant runs it.
func TestAModelsGatedCallIsAskedOnce(t *testing.T) {
	tn := setupTenants(t)
	ctx := context.Background()
	tn.start(t, "m")
	st, err := tn.lead.State(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	calls := []workflow.Call{
		{ID: "m1", Tool: "run", Arguments: json.RawMessage(`{"command":["sh","-c","echo MODEL"]}`)},
		{ID: "m2", Tool: "list_files", Arguments: json.RawMessage(`{}`)},
	}
	var evs []event.Event
	for _, rec := range tn.wf.CallEvents(st, "m", "turn-1", "coder", calls, time.Now(), nil) {
		ev, err := events.New("m", rec.Data)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if _, err := tn.worker.AppendAtomic(ctx, evs); err != nil {
		t.Fatal(err)
	}
	tn.finish(t, "m", "m2")
	ask := tn.approvalOf(t, "m", "m1")
	if ask.Actor != session.GateKeeper {
		t.Fatalf("the approval was asked by %s", ask.Actor)
	}
	d, _ := ask.Decode()
	if _, err := tn.lead.Approve(ctx, "m", d.(*events.ApprovalRequested).ApprovalID, ""); err != nil {
		t.Fatal(err)
	}
	if got := tn.finish(t, "m", "m1"); !strings.Contains(got[len(got)-1].(*events.ToolCompleted).Result, "MODEL") {
		t.Fatalf("granted model call: %#v", got)
	}
	for _, c := range []string{"m1", "m2"} {
		if n := tn.count(t, "m", events.TypeToolCleared, c); n != 0 {
			t.Errorf("the runner cleared the agent worker's call %s", c)
		}
	}
	if n := tn.count(t, "m", events.TypeApprovalRequested, "m1"); n != 1 {
		t.Errorf("%d approval requests for the model's call, want 1", n)
	}
}
