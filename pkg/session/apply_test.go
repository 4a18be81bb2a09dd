package session_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

func stored(t *testing.T, sessionID string, seq uint64, data any) events.Stored {
	t.Helper()
	k, ok := events.KindOf(data)
	if !ok {
		t.Fatalf("%T is not an event kind", data)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{
		ID: events.NewID(), Type: k.Type, Session: sessionID, Seq: seq, Hash: "h" + string(rune('0'+seq%10)),
		Time: time.Date(2026, 1, 1, 0, 0, int(seq), 0, time.UTC), Data: raw,
	}
}

func fold(evs ...events.Stored) *session.State {
	st := &session.State{}
	for _, e := range evs {
		session.Apply(st, e)
	}
	return st
}

func TestLifecycle(t *testing.T) {
	tests := []struct {
		name   string
		given  []any
		status session.Status
	}{
		{"started", []any{&events.SessionStarted{Task: "t"}}, session.StatusActive},
		{"paused", []any{&events.SessionStarted{}, &events.SessionPaused{Reason: "lunch"}}, session.StatusPaused},
		{"resumed", []any{&events.SessionStarted{}, &events.SessionPaused{}, &events.SessionResumed{}}, session.StatusActive},
		{"closed", []any{&events.SessionStarted{}, &events.SessionClosed{Reason: "done", Outcome: "ok"}}, session.StatusClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var evs []events.Stored
			for i, d := range tc.given {
				evs = append(evs, stored(t, "s", uint64(i+1), d))
			}
			st := fold(evs...)
			if st.Status != tc.status || st.ID != "s" || st.Seq != uint64(len(evs)) || st.Counts.Events != len(evs) {
				t.Fatalf("status %s id %s seq %d events %d", st.Status, st.ID, st.Seq, st.Counts.Events)
			}
		})
	}
}

func TestUsageByAgentAndModel(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.ModelCalled{Agent: "a", Provider: "p", Model: "m", TokensIn: 10, TokensOut: 1}),
		stored(t, "s", 3, &events.ModelCalled{Agent: "b", Provider: "p", Model: "m", TokensIn: 20, TokensOut: 2}),
		stored(t, "s", 4, &events.UsageRecorded{Agent: "a", Model: "emb", TokensIn: 5}),
	)
	u := st.Usage
	if u.Total.In != 35 || u.Total.Out != 3 || u.Total.Calls != 2 {
		t.Fatalf("total %+v", u.Total)
	}
	if u.ByAgent["a"].In != 15 || u.ByAgent["b"].Calls != 1 || u.ByModel["p/m"].In != 30 || u.ByModel["emb"].In != 5 {
		t.Fatalf("by agent %+v by model %+v", u.ByAgent, u.ByModel)
	}
}

func TestToolEvidenceIndex(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.ToolRequested{CallID: "c1", Tool: "run", Arguments: json.RawMessage(`{"cmd":"go test"}`), Agent: "coder"}),
		stored(t, "s", 3, &events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 1}),
		stored(t, "s", 4, &events.ToolFailed{CallID: "c1", Tool: "run", Attempt: 1, Error: "timeout"}),
		stored(t, "s", 5, &events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 2}),
		stored(t, "s", 6, &events.ToolCompleted{CallID: "c1", Tool: "run", Attempt: 2, ExitCode: 1, CommitBefore: "a", CommitAfter: "b"}),
		stored(t, "s", 7, &events.SandboxPlaced{Backend: "local", SandboxID: "sb1", Workspace: "/w"}),
	)
	tool := st.Tools["c1"]
	if tool == nil || tool.Status != session.ToolCompleted || tool.Attempts != 2 || tool.ExitCode != 1 || tool.Error != "" ||
		len(tool.Seqs) != 5 || tool.CommitAfter != "b" || string(tool.Arguments) != `{"cmd":"go test"}` {
		t.Fatalf("tool %+v", tool)
	}
	if st.Sandbox == nil || st.Sandbox.SandboxID != "sb1" || st.Counts.ToolCalls != 1 {
		t.Fatalf("sandbox %+v", st.Sandbox)
	}
	// A local placement recorded before placements said their isolation
	// has none.
	if st.Sandbox.Isolation != events.IsolationNone {
		t.Fatalf("isolation of an old local placement %q", st.Sandbox.Isolation)
	}
}

// A call its caller runs stays open until the caller records its outcome,
// and the state and the overview say who runs it.
func TestCallerRunCall(t *testing.T) {
	log := []events.Stored{
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.ToolRequested{CallID: "c1", Tool: "lookup", Agent: "planner", Runner: events.RunnerCaller}),
		stored(t, "s", 3, &events.ToolRequested{CallID: "c2", Tool: "run", Agent: "planner"}),
	}
	st := fold(log...)
	if c := st.Tools["c1"]; c == nil || c.Runner != events.RunnerCaller || !c.Open() {
		t.Fatalf("caller-run call before its result: %+v", c)
	}
	if c := st.Tools["c2"]; c == nil || c.Runner != "" {
		t.Fatalf("a Rath runner's call: %+v", c)
	}
	if req := st.Call("c1"); req == nil || req.Runner != events.RunnerCaller {
		t.Fatalf("rebuilt request %+v", req)
	}
	open := st.Overview(session.OverviewOptions{}).Tools.Open
	if len(open) != 2 || open[0].CallID != "c1" || open[0].Runner != events.RunnerCaller || open[1].Runner != "" {
		t.Fatalf("open calls in the overview: %+v", open)
	}
	st = fold(append(log, stored(t, "s", 4, &events.ToolCompleted{CallID: "c1", Tool: "lookup", Result: "42"}))...)
	if c := st.Tools["c1"]; c.Status != session.ToolCompleted || c.Runner != events.RunnerCaller {
		t.Fatalf("caller-run call after its result: %+v", c)
	}
}

// A move request and its refusal leave the placement as it is; the answer
// that moves the session is a placement like any other.
func TestSandboxMoves(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.SandboxPlaced{Backend: "local", SandboxID: "local-s", Isolation: events.IsolationNone}),
		stored(t, "s", 3, &events.SandboxRequested{Backend: "bwrap"}),
		stored(t, "s", 4, &events.SandboxRefused{Backend: "bwrap", Reason: "bubblewrap not found"}),
	)
	if p := st.Sandbox; p == nil || p.Backend != "local" || p.Seq != 2 {
		t.Fatalf("after a refused move: %+v", p)
	}
	st = fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.SandboxPlaced{Backend: "local", SandboxID: "local-s"}),
		stored(t, "s", 3, &events.SandboxRequested{Backend: "bwrap"}),
		stored(t, "s", 4, &events.SandboxPlaced{Backend: "bwrap", SandboxID: "bwrap-s", Commit: "c1", Isolation: "bwrap: namespaces",
			From: &events.Sandbox{Backend: "local", SandboxID: "local-s"}}),
	)
	if p := st.Sandbox; p == nil || p.Backend != "bwrap" || p.Seq != 4 || p.Session != "s" || p.Commit != "c1" || p.Isolation != "bwrap: namespaces" {
		t.Fatalf("after a move: %+v", p)
	}
}

// A move asked for is the session's state until its own answer: an answer
// to another request does not end it.
func TestMoveWaitsForItsAnswer(t *testing.T) {
	req := stored(t, "s", 3, &events.SandboxRequested{Backend: "bwrap", Pool: "gpu"})
	answer := func(seq uint64, data any, cause string) events.Stored {
		e := stored(t, "s", seq, data)
		e.Causation = cause
		return e
	}
	st := fold(stored(t, "s", 1, &events.SessionStarted{}), req)
	if m := st.Moving; m == nil || m.ID != req.ID || m.Seq != 3 || m.Pool != "gpu" || m.Backend != "bwrap" || m.Session != "s" {
		t.Fatalf("moving %+v", m)
	}
	session.Apply(st, answer(4, &events.SandboxRefused{Backend: "bwrap", Reason: "another's"}, "someone-else"))
	if st.Moving == nil {
		t.Fatal("an answer to another request ended the move")
	}
	session.Apply(st, answer(5, &events.SandboxPlaced{Backend: "bwrap", SandboxID: "bwrap-s", Pool: "gpu", Runner: "gpu/b:/w"}, req.ID))
	if st.Moving != nil || st.Sandbox.Pool != "gpu" || st.Sandbox.Runner != "gpu/b:/w" {
		t.Fatalf("after its answer: moving %+v placement %+v", st.Moving, st.Sandbox)
	}
	st = fold(stored(t, "s", 1, &events.SessionStarted{}), req, answer(4, &events.SandboxRefused{Backend: "bwrap", Reason: "no"}, req.ID))
	if st.Moving != nil {
		t.Fatalf("after its refusal: moving %+v", st.Moving)
	}
}

func TestPendingWorkAndApprovals(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.WorkPending{WorkID: "w1", Kind: "turn"}),
		stored(t, "s", 3, &events.WorkPending{WorkID: "w2", Kind: "turn"}),
		stored(t, "s", 4, &events.WorkDone{WorkID: "w1"}),
		stored(t, "s", 5, &events.ApprovalRequested{ApprovalID: "a1", Action: "merge"}),
		stored(t, "s", 6, &events.ApprovalRejected{ApprovalID: "a1", By: "ann", Reason: "no"}),
		stored(t, "s", 7, &events.ValidationFailed{Validator: "tests", Reason: "1 failing"}),
		stored(t, "s", 8, &events.SelectorDecided{Rule: "retry", Route: "fork"}),
	)
	if _, ok := st.Pending["w2"]; !ok || len(st.Pending) != 1 {
		t.Fatalf("pending %+v", st.Pending)
	}
	if st.Approvals["a1"].Outcome != "rejected" || st.Approvals["a1"].By != "ann" {
		t.Fatalf("approvals %+v", st.Approvals)
	}
	if len(st.Validations) != 1 || st.Validations[0].Passed || len(st.Decisions) != 1 || st.Decisions[0].Route != "fork" {
		t.Fatalf("validations %+v decisions %+v", st.Validations, st.Decisions)
	}
}

func TestForkInheritsPrefixAndMergeSkipsSourceLifecycle(t *testing.T) {
	st := fold(
		stored(t, "p", 1, &events.SessionStarted{Labels: map[string]string{"team": "a"}}),
		stored(t, "p", 2, &events.ChunkAppended{Role: "user", Content: "hi"}),
		stored(t, "c", 3, &events.SessionForked{Parent: "p", AtSeq: 2, ParentHash: "h2", Labels: map[string]string{"try": "2"}}),
	)
	if st.ID != "c" || st.Lineage.Parent != "p" || st.Lineage.ForkSeq != 2 || len(st.Chunks) != 1 || st.Labels["team"] != "a" || st.Labels["try"] != "2" {
		t.Fatalf("fork state %+v", st)
	}
	// A merge brings in the source's chunks and usage, not its lifecycle.
	session.ApplyMerged(st, stored(t, "x", 3, &events.SessionClosed{Reason: "x done"}))
	session.ApplyMerged(st, stored(t, "x", 4, &events.ChunkAppended{Role: "assistant", Content: "from x"}))
	session.ApplyMerged(st, stored(t, "x", 5, &events.ModelCalled{Agent: "a", Model: "m", TokensIn: 3}))
	if st.Status != session.StatusActive || st.ID != "c" || st.Seq != 3 || len(st.Chunks) != 2 || st.Chunks[1].Origin != "x" || st.Usage.Total.In != 3 || st.Counts.Merged != 3 {
		t.Fatalf("after merged events: %+v", st)
	}
}

func TestApplyNeverFailsOnBadData(t *testing.T) {
	st := fold(stored(t, "s", 1, &events.SessionStarted{}))
	bad := events.Stored{ID: "x", Type: events.TypeChunkAppended, Session: "s", Seq: 2, Hash: "h", Data: json.RawMessage(`{"role":`)}
	unknown := events.Stored{ID: "y", Type: "rath.future.kind", Session: "s", Seq: 3, Hash: "h3"}
	session.Apply(st, bad)
	session.Apply(st, unknown)
	if st.Seq != 3 || st.Hash != "h3" || len(st.Chunks) != 0 {
		t.Fatalf("state %+v", st)
	}
}

func TestCloneIsDeep(t *testing.T) {
	st := fold(stored(t, "s", 1, &events.SessionStarted{}), stored(t, "s", 2, &events.WorkPending{WorkID: "w", Kind: "k"}))
	c := st.Clone()
	session.Apply(c, stored(t, "s", 3, &events.WorkDone{WorkID: "w"}))
	if len(st.Pending) != 1 || len(c.Pending) != 0 {
		t.Fatalf("clone shares maps: %v %v", st.Pending, c.Pending)
	}
}

func TestAgentTurns(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.TurnRequested{TurnID: "t1", Agent: "researcher"}),
	)
	if st.Turn == nil || st.Turn.Agent != "researcher" || st.Turn.Seq != 2 {
		t.Fatalf("turn in flight: %+v", st.Turn)
	}
	session.Apply(st, stored(t, "s", 3, &events.ModelCallFailed{Agent: "researcher", Provider: "p", Model: "m", Attempt: 1, Error: "429"}))
	session.Apply(st, stored(t, "s", 4, &events.TurnCompleted{TurnID: "t1", Agent: "researcher"}))
	session.Apply(st, stored(t, "s", 5, &events.TurnRequested{TurnID: "t2", Agent: "coder"}))
	session.Apply(st, stored(t, "s", 6, &events.TurnFailed{TurnID: "t2", Agent: "coder", Error: "boom"}))
	if st.Turn != nil || st.Counts.Turns != 1 || st.Counts.TurnsFailed != 1 || st.Counts.ModelFailures != 1 || st.LastAgent != "coder" {
		t.Fatalf("after turns: turn %+v counts %+v last %s", st.Turn, st.Counts, st.LastAgent)
	}
}

// A turn requested, decided or ended once more after it ended (a second
// producer requesting the same turn, as a selector following rath replay
// --fork's decision did) is not in flight again and counts once against the
// budgets; the next turn opens as usual.
func TestTurnEndedIsNotOpenedOrCountedAgain(t *testing.T) {
	st := fold(
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.SelectorDecided{Rule: "what-if", Route: "agent:coder", Agent: "coder", TurnID: "t1"}),
		stored(t, "s", 3, &events.TurnRequested{TurnID: "t1", Agent: "coder"}),
		stored(t, "s", 4, &events.TurnCompleted{TurnID: "t1", Agent: "coder"}),
		stored(t, "s", 5, &events.TurnRequested{TurnID: "t1", Agent: "coder"}),
	)
	if st.Turn != nil {
		t.Fatalf("a second request of an ended turn opened it: %+v", st.Turn)
	}
	session.Apply(st, stored(t, "s", 6, &events.SelectorDecided{Rule: "again", Route: "agent:coder", Agent: "coder", TurnID: "t1"}))
	if st.Turn != nil {
		t.Fatalf("a second decision of an ended turn opened it: %+v", st.Turn)
	}
	session.Apply(st, stored(t, "s", 7, &events.TurnCompleted{TurnID: "t1", Agent: "coder"}))
	session.Apply(st, stored(t, "s", 8, &events.TurnFailed{TurnID: "t1", Agent: "coder"}))
	if st.Counts.Turns != 1 || st.Counts.TurnsFailed != 0 || st.Counts.TurnsByAgent["coder"] != 1 {
		t.Fatalf("one turn ended three times counts %+v", st.Counts)
	}
	session.Apply(st, stored(t, "s", 9, &events.TurnRequested{TurnID: "t2", Agent: "coder"}))
	if st.Turn == nil || st.Turn.ID != "t2" {
		t.Fatalf("the next turn is not in flight: %+v", st.Turn)
	}
}

// A memory event names who it was for: the principal a service proposed it
// on behalf of, else its proposer.
func TestMemoryEventActor(t *testing.T) {
	tests := []struct {
		name, actor, onBehalf, want string
	}{
		{"on behalf of a tenant's user", "rath/memory-svc", "acme/alice", "acme/alice"},
		{"the service itself", "rath/memory-svc", "", "rath/memory-svc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs := []events.Stored{
				stored(t, "s", 1, &events.SessionStarted{}),
				stored(t, "s", 2, &events.MemoryWritten{ItemID: "m1", Version: 1, Content: "c", Scope: "project:x"}),
				stored(t, "s", 3, &events.MemoryRecalled{Query: "c", Items: []events.MemoryItemRef{{ItemID: "m1", Version: 1}}}),
				stored(t, "s", 4, &events.MemoryRetracted{ItemID: "m1", By: "ana", Reason: "wrong"}),
			}
			for i := 1; i < len(evs); i++ {
				evs[i].Actor, evs[i].OnBehalf = tc.actor, tc.onBehalf
			}
			st := fold(evs...)
			if len(st.Memory) != 3 {
				t.Fatalf("%d memory events", len(st.Memory))
			}
			for _, me := range st.Memory {
				if me.Actor != tc.want {
					t.Errorf("%s: actor %q, want %q", me.Kind, me.Actor, tc.want)
				}
			}
		})
	}
}

// A gated call waits for its approval, runs once it is granted and fails
// with the reason once it is rejected; the first decision is the one that
// counts, and the decider is the authenticated actor, not the free text.
func TestGateOf(t *testing.T) {
	actor := func(e events.Stored, who string) events.Stored { e.Actor = who; return e }
	base := []events.Stored{
		stored(t, "s", 1, &events.SessionStarted{}),
		stored(t, "s", 2, &events.ApprovalRequested{ApprovalID: "ap-1", Action: "git push", Approver: "maintainers", CallID: "c1", Tool: "run", Gate: "push"}),
		stored(t, "s", 3, &events.ToolRequested{CallID: "c1", Tool: "run", ApprovalID: "ap-1"}),
		stored(t, "s", 4, &events.ToolRequested{CallID: "c2", Tool: "read_file"}),
	}
	st := fold(base...)
	if g := st.GateOf("c1"); g.ApprovalID != "ap-1" || g.Outcome != "" || g.Runnable() {
		t.Fatalf("pending gate %+v", g)
	}
	if g := st.GateOf("c2"); g.ApprovalID != "" || !g.Runnable() {
		t.Fatalf("ungated call %+v", g)
	}
	if g := st.GateOf("nope"); !g.Runnable() {
		t.Fatalf("unknown call %+v", g)
	}
	if a := st.Approvals["ap-1"]; a.CallID != "c1" || a.Tool != "run" || a.Gate != "push" || a.Approver != "maintainers" || a.Requested.IsZero() {
		t.Fatalf("approval %+v", a)
	}

	granted := fold(append(base,
		actor(stored(t, "s", 5, &events.ApprovalGranted{ApprovalID: "ap-1", By: "someone else"}), "default/ana"),
		actor(stored(t, "s", 6, &events.ApprovalRejected{ApprovalID: "ap-1", Reason: "late"}), "default/bob"))...)
	if g := granted.GateOf("c1"); !g.Runnable() || g.Outcome != session.ApprovalGranted || g.Actor != "default/ana" {
		t.Fatalf("granted gate %+v", g)
	}
	if a := granted.Approvals["ap-1"]; a.By != "someone else" || a.DecidedSeq != 5 {
		t.Fatalf("granted approval %+v", a)
	}

	rejected := fold(append(base, actor(stored(t, "s", 5, &events.ApprovalRejected{ApprovalID: "ap-1", Reason: "not on Friday"}), "default/bob"))...)
	if g := rejected.GateOf("c1"); g.Runnable() || g.Outcome != session.ApprovalRejected || g.Reason != "not on Friday" || g.Actor != "default/bob" {
		t.Fatalf("rejected gate %+v", g)
	}
}
