package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
	memorysvc "github.com/openrath/rath/services/memory-svc/service"
)

// An agent with a recall gets a rath.memory.recalled event naming its turn
// and holding each item's content before its model call, and its model reads
// the items as a user message marked as recalled memory: the scripted coder
// answers from the branch whose when_contains is that mark.
func TestWorkerRecallsBeforeTheModelCall(t *testing.T) {
	ns, nc := natstest.Start(t)
	r := setupFile(t, nc, "testdata/recall.yaml", "")
	mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
	testrig.Run(t, "memory service", func(ctx context.Context) error { return memorysvc.Run(ctx, mnc, memorysvc.DefaultConfig(), quiet) })
	ctx := context.Background()
	r.run(t, r.newWorker(t, worker.Config{Retry: fastRetry}, quiet), quiet)

	r.start(t, "s1")
	const pattern = "Failure pattern: make TestAdd pass by handling negative numbers, not by changing the test"
	added, err := r.c.Memory().Add(ctx, memoryapi.AddRequest{Session: "s1", Content: pattern, Tags: []string{"failure-pattern"},
		Scope: "project:demo", Evidence: memoryapi.EvidenceFailedAttempt})
	if err != nil {
		t.Fatal(err)
	}
	// Not recalled: another scope, and no failure-pattern tag.
	for _, req := range []memoryapi.AddRequest{
		{Session: "s1", Content: "make TestAdd pass elsewhere", Tags: []string{"failure-pattern"}, Scope: "project:other"},
		{Session: "s1", Content: "TestAdd is in calc_test.go", Scope: "project:demo"},
	} {
		req.Evidence = memoryapi.EvidenceToolResult
		if _, err := r.c.Memory().Add(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	req := r.request(t, "s1", "turn-1", "coder")
	if end := r.end(t, req); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}

	log := r.log(t, "s1")
	var recalled, called, answer events.Stored
	for _, ev := range log {
		switch {
		case ev.Type == events.TypeMemoryRecalled:
			recalled = ev
		case ev.Type == events.TypeModelCalled && ev.Causation == req.ID:
			called = ev
		case ev.Type == events.TypeChunkAppended && ev.Causation == req.ID:
			answer = ev
		}
	}
	if recalled.ID == "" || called.ID == "" || !(req.Seq < recalled.Seq && recalled.Seq < called.Seq) {
		t.Fatalf("recall at %d, model call at %d, request at %d: %s", recalled.Seq, called.Seq, req.Seq, r.types(t, "s1"))
	}
	if recalled.ID != events.DerivedID("memory.recalled", events.DerivedID(worker.Durable, req.ID, "recall")) {
		t.Errorf("recall ID %s not derived from the turn request", recalled.ID)
	}
	rc := decode[events.MemoryRecalled](t, recalled)
	if rc.TurnID != "turn-1" || rc.Agent != "coder" || rc.Query != "make TestAdd pass" ||
		!slices.Equal(rc.Scopes, []string{"project:demo"}) || !slices.Equal(rc.Tags, []string{"failure-pattern"}) {
		t.Fatalf("recalled %+v", rc)
	}
	if len(rc.Items) != 1 || rc.Items[0].ItemID != added.Record.ItemID || rc.Items[0].Version != 1 || rc.Items[0].Content != pattern || rc.Items[0].Score <= 0 {
		t.Fatalf("recalled items %+v", rc.Items)
	}
	if c := decode[events.ChunkAppended](t, answer); c.Content != "The quick fix failed before; writing the full one." {
		t.Fatalf("the model answered %q: it did not read the recalled item", c.Content)
	}

	// The fold keeps what was recalled, content included, and the context
	// of the agent's next turn still holds it, as a user message.
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	msgs := worker.Transcript(st, "coder")
	want := user("[recalled memory] " + added.Record.ItemID + " v1 (score ")
	i := slices.IndexFunc(msgs, func(m provider.Message) bool { return strings.HasPrefix(m.Content, want.Content) })
	if i < 0 || msgs[i].Role != provider.RoleUser || !strings.HasSuffix(msgs[i].Content, "): "+pattern) {
		t.Fatalf("transcript %s", dump(msgs))
	}
}

// Without a memory service the turn does not wait forever: it fails, and
// the session says why.
func TestWorkerFailsTheTurnWhenRecallGetsNoAnswer(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupFile(t, nc, "testdata/recall.yaml", "")
	m := answering(provider.Response{Content: "never asked", StopReason: provider.StopEndTurn})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry, RecallWait: 300 * time.Millisecond}, quiet), quiet)

	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	end := r.end(t, req)
	if end.Type != events.TypeTurnFailed {
		t.Fatalf("turn ended with %s", end.Type)
	}
	f := decode[events.TurnFailed](t, end)
	if f.TurnID != "turn-1" || !strings.Contains(f.Error, "recall: the memory service did not answer within 300ms (is memory-svc running?)") {
		t.Fatalf("failed %+v", f)
	}
	if m.calls() != 0 {
		t.Fatalf("the model was called %d times without the recall", m.calls())
	}
}
