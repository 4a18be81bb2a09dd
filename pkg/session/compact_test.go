package session_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

func foldAll(t *testing.T, data ...any) *session.State {
	t.Helper()
	st := &session.State{}
	for i, d := range data {
		k, _ := events.KindOf(d)
		raw, _ := json.Marshal(d)
		session.Apply(st, events.Stored{ID: "e" + strconv.Itoa(i+1), Type: k.Type, Session: "s", Seq: uint64(i + 1), Data: raw})
	}
	return st
}

func TestPlanCompaction(t *testing.T) {
	long := strings.Repeat("x", 800)
	st := foldAll(t, &events.SessionStarted{Task: "t"},
		&events.ChunkAppended{Role: events.RoleUser, Content: long},                                   // 2
		&events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder"},                              // 3
		&events.ChunkAppended{Role: events.RoleTool, Agent: "coder", ToolCallID: "c1", Content: long}, // 4
		&events.ChunkAppended{Role: events.RoleUser, Content: long},                                   // 5
		&events.ChunkAppended{Role: events.RoleTool, Agent: "coder", ToolCallID: "c1", Content: long}, // 6
		&events.WorkPending{WorkID: "w1", Kind: "review", Description: "check the diff"},              // 7
	)
	// Keeping 1 would keep only a tool result: the boundary moves back over it.
	p, ok := session.PlanCompaction(st, 1)
	if !ok || p.FromSeq != 2 || p.ToSeq != 4 {
		t.Fatalf("plan %+v %v", p, ok)
	}
	if !strings.Contains(p.Summary, "pending work w1 (review)") || !strings.Contains(p.Summary, "tool c1 run by coder") || p.TokensAfter >= p.TokensBefore {
		t.Fatalf("summary misses durable facts or does not shrink: %+v", p)
	}
	// Folded, the next plan takes the earlier summary over and starts at it.
	raw, _ := json.Marshal(p)
	session.Apply(st, events.Stored{ID: "e8", Type: events.TypeTranscriptCompacted, Session: "s", Seq: 8, Data: raw})
	if _, ok := session.PlanCompaction(st, 2); ok {
		t.Fatal("nothing new to compact, yet planned")
	}
	p2, ok := session.PlanCompaction(st, 0)
	if !ok || p2.FromSeq != 2 || p2.ToSeq != 6 || strings.Count(p2.Summary, "Durable facts:") != 1 {
		t.Fatalf("second plan %+v %v", p2, ok)
	}
	if got := st.ActiveCompactions(); len(got) != 1 || got[0].ToSeq != 4 {
		t.Fatalf("active %+v", got)
	}
}
