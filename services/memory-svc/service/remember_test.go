package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/toolserver"
)

const rememberWorkflow = `name: remember-test
memory:
  scope: project:demo
agents:
  - name: coder
    provider: openai
    tools: [remember]
  - name: reviewer
    provider: openai
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: coder}
`

// startWorkflow starts a session running the workflow (its bundle in the
// object store, as rath start --workflow stores it).
func (r *rig) startWorkflow(t *testing.T, id, src string) {
	t.Helper()
	ctx := context.Background()
	store, err := eventstore.AttachWait(ctx, r.nc)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Parse([]byte(src), "workflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ref := testrig.Bundle(t, store, wf)
	if _, err := r.c.Start(ctx, id, events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref, Task: "remember things"}); err != nil {
		t.Fatal(err)
	}
}

// call requests a tool call as an agent's turn would, as the agent worker
// (a call anyone else proposes waits for the tool runner to screen it for
// the workflow's gates, and none runs here), and waits for its end.
func (r *rig) call(t *testing.T, id, callID, agent, args string) (req, end events.Stored) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	worker, err := client.New(r.nc, client.As(events.Service("agent-worker")))
	if err != nil {
		t.Fatal(err)
	}
	a, err := worker.Emit(ctx, id, &events.ToolRequested{CallID: callID, Tool: "remember", Agent: agent, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = r.decodeAt(t, id, a.Seq)
	found := errors.New("found")
	err = r.c.Watch(ctx, id, func(ev events.Stored) error {
		if ev.Causation == req.ID && (ev.Type == events.TypeToolCompleted || ev.Type == events.TypeToolFailed) {
			end = ev
			return found
		}
		return nil
	}, client.From(a.Seq))
	if !errors.Is(err, found) {
		t.Fatalf("call %s did not end: %v", callID, err)
	}
	return req, end
}

// The remember tool, served by the memory service over the bus, writes an
// item whose provenance is the tool call's request event, in the workflow's
// scope by default; its call, result and the write are in the session.
func TestRememberTool(t *testing.T) {
	r := setup(t, 1)
	ctx := context.Background()
	store, err := eventstore.AttachWait(ctx, r.nc)
	if err != nil {
		t.Fatal(err)
	}
	r.startWorkflow(t, "s1", rememberWorkflow)

	req, end := r.call(t, "s1", "call-1", "coder", `{"content":"slug.Make must drop punctuation","tags":["failure-pattern"]}`)
	if end.Type != events.TypeToolCompleted {
		t.Fatalf("call ended with %s: %s", end.Type, end.Data)
	}
	// The tool is in the registry, served by its durable consumer.
	spec, err := store.Tool(ctx, "remember")
	if err != nil || spec.Server != toolserver.Durable("remember") {
		t.Fatalf("registered %+v, %v", spec, err)
	}

	log, err := r.c.Log(ctx, "s1", client.Range{From: 1, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var written []*events.MemoryWritten
	var result string
	for _, ev := range log {
		d, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch d := d.(type) {
		case *events.MemoryWritten:
			if ev.Seq < req.Seq || ev.Seq > end.Seq {
				t.Errorf("memory written at %d, outside the call (%d..%d)", ev.Seq, req.Seq, end.Seq)
			}
			// The agent worker proposed the call: the service writes on
			// its own account, for no one.
			if ev.Actor != "rath/memory-svc" || ev.OnBehalf != "" {
				t.Errorf("memory written by %q for %q, want rath/memory-svc for no one", ev.Actor, ev.OnBehalf)
			}
			written = append(written, d)
		case *events.ChunkAppended:
			if d.ToolCallID == "call-1" {
				result = d.Content
			}
		}
	}
	if len(written) != 1 {
		t.Fatalf("%d memory writes", len(written))
	}
	w := written[0]
	if w.Content != "slug.Make must drop punctuation" || w.Scope != "project:demo" || !slices.Equal(w.Tags, []string{"failure-pattern"}) {
		t.Fatalf("written %+v", w)
	}
	if !provenanceIs(w.Provenance, "s1", req.ID) || w.Provenance.Evidence != memoryapi.EvidenceToolResult {
		t.Fatalf("provenance %+v, want the call's request %s", w.Provenance, req.ID)
	}
	if !strings.Contains(result, w.ItemID) {
		t.Errorf("the tool's result %q does not name the item", result)
	}
	// The item is the session's tenant's (the default client started it).
	if it, err := r.mem.Show(ctx, w.ItemID); err != nil || it.Tenant != "default" || it.Current == nil || it.Current.Actor != "rath/memory-svc" {
		t.Errorf("show %s: %+v %v, want the default tenant's, written by rath/memory-svc", w.ItemID, it, err)
	}

	// What justified the item: the tool call.
	just, err := r.mem.Justify(ctx, memoryapi.JustifyRequest{ItemID: w.ItemID})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(just); !strings.Contains(string(b), req.ID) {
		t.Errorf("justify %s does not name the call %s", b, req.ID)
	}

	// An explicit scope and evidence; an agent without the tool is refused.
	_, end = r.call(t, "s1", "call-2", "coder", `{"content":"ana prefers small patches","scope":"user:ana","evidence":"human_correction"}`)
	if end.Type != events.TypeToolCompleted {
		t.Fatalf("call 2 ended with %s: %s", end.Type, end.Data)
	}
	_, end = r.call(t, "s1", "call-3", "reviewer", `{"content":"not allowed"}`)
	if end.Type != events.TypeToolFailed || !strings.Contains(string(end.Data), "not allowed for agent reviewer") {
		t.Fatalf("call 3 ended with %s: %s", end.Type, end.Data)
	}
	res, err := r.mem.Search(ctx, memoryapi.SearchRequest{Query: "ana patches allowed", Filter: memoryapi.Filter{Scopes: []string{"user:ana", "project:demo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 1 || res.Hits[0].Scope != "user:ana" {
		t.Fatalf("hits %+v", res.Hits)
	}
}

func provenanceIs(p events.Provenance, session, eventID string) bool {
	return p.Session == session && slices.Equal(p.EventIDs, []string{eventID})
}
