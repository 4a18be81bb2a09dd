package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/service"
)

const gatedWorkflow = `name: gated
agents:
  - name: a
    provider: scripted
    script: a.yaml
    tools: [write_file, list_files]
gates:
  - name: writes
    tools: [write_file]
    approver: maintainers
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`

// requestGated records a gated call as the agent worker does, as the agent
// worker: the approval request and the call naming it, in one atomic
// append. (A call anyone else proposes is screened by the runner, which
// asks for an approval of its own: TestGatesHoldAUsersCall.)
func (r *rig) requestGated(t *testing.T, id, callID, approvalID, args string) {
	t.Helper()
	req := &events.ToolRequested{CallID: callID, Tool: "write_file", Agent: "a", Arguments: json.RawMessage(args), ApprovalID: approvalID}
	var evs []event.Event
	for _, d := range []any{
		&events.ApprovalRequested{ApprovalID: approvalID, Action: "write_file call", Approver: "maintainers", CallID: callID, Tool: "write_file", Gate: "writes"},
		req,
	} {
		ev, err := events.New(id, d)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	worker, err := client.New(r.c.Conn(), client.As(events.Service("agent-worker")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.AppendAtomic(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// barrier runs an ungated call after everything appended so far and waits
// for it: the runner handles a session's events in order, so every earlier
// event has been handled when it is done.
func (r *rig) barrier(t *testing.T, id, callID string) {
	t.Helper()
	r.request(t, id, callID, "list_files", `{}`)
	r.finish(t, id, callID)
}

func (r *rig) toolCall(t *testing.T, id, callID string) *session.Tool {
	t.Helper()
	st, err := r.c.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Tools[callID]
}

// A gated call is not executed while its approval is pending, across a
// restart of the tool runner and a redelivery of the request; the grant
// wakes the runner, which runs the call in answer to the grant.
func TestGatedCallWaitsForTheGrant(t *testing.T) {
	r := setupWith(t, gatedWorkflow, localBackend)
	r.start(t, "g1")
	r.requestGated(t, "g1", "w1", "ap-1", `{"path":"pushed.txt","content":"hi"}`)
	r.barrier(t, "g1", "b1")
	if c := r.toolCall(t, "g1", "w1"); c == nil || c.Status != session.ToolRequested || len(c.Seqs) != 1 {
		t.Fatalf("gated call before the grant: %+v", c)
	}

	r.restart(t)
	r.barrier(t, "g1", "b2")
	if c := r.toolCall(t, "g1", "w1"); c.Status != session.ToolRequested || len(c.Seqs) != 1 {
		t.Fatalf("gated call after a restart: %+v", c)
	}

	grant, err := r.c.Approve(context.Background(), "g1", "ap-1", "fine")
	if err != nil {
		t.Fatal(err)
	}
	log := r.finish(t, "g1", "w1")
	got := of(t, log, "w1")
	if done, ok := got[len(got)-1].(*events.ToolCompleted); !ok || done.ExitCode != 0 {
		t.Fatalf("granted call: %#v", got)
	}
	for _, ev := range log {
		if ev.Type == events.TypeToolStarted && ev.Seq > grant.Seq && ev.Causation != grant.ID {
			t.Errorf("the call ran in answer to %s, not to the grant %s", ev.Causation, grant.ID)
		}
	}
}

func localBackend(c *service.Config) { c.Backend = "local" }

// A rejected call fails with the reason and the rejecter, as its result,
// without running.
func TestRejectedCallFailsWithTheReason(t *testing.T) {
	r := setupWith(t, gatedWorkflow, localBackend)
	r.start(t, "g2")
	r.requestGated(t, "g2", "w1", "ap-1", `{"path":"pushed.txt","content":"hi"}`)
	if _, err := r.c.Reject(context.Background(), "g2", "ap-1", "not on Friday"); err != nil {
		t.Fatal(err)
	}
	got := of(t, r.finish(t, "g2", "w1"), "w1")
	var chunk *events.ChunkAppended
	for _, d := range got {
		switch d := d.(type) {
		case *events.ToolStarted, *events.ToolCompleted:
			t.Fatalf("a rejected call ran: %#v", got)
		case *events.ChunkAppended:
			chunk = d
		}
	}
	failed, ok := got[len(got)-1].(*events.ToolFailed)
	if !ok || !strings.Contains(failed.Error, "not on Friday") || !strings.Contains(failed.Error, events.DefaultClient.String()) {
		t.Fatalf("rejected call: %#v", got)
	}
	if chunk == nil || chunk.Role != events.RoleTool || !strings.Contains(chunk.Content, "not on Friday") {
		t.Fatalf("the agent does not read the rejection: %#v", chunk)
	}
}
