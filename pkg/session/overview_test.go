package session

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// big is text that costs the most JSON per byte (control characters and
// invalid UTF-8 are written as six bytes each) and is n bytes long.
func big(n int) string { return strings.Repeat("\x01\xff<", n/3+1)[:n] }

// worstState is a session holding as much as any list, map or text can
// hold, each text in the most expensive encoding.
func worstState(n, content int) *State {
	long, huge := big(min(content, 64<<10)), big(content)
	st := &State{ID: "worst", Tenant: long, Status: StatusActive, StatusBy: long, Workflow: long, WorkflowHash: long, WorkflowRef: long,
		Task: huge, Labels: map[string]string{}, CloseReason: long, Outcome: long, Hash: long, LastID: long, LastAgent: long,
		Pending: map[string]Work{}, Approvals: map[string]Approval{}, Tools: map[string]*Tool{},
		Usage: Usage{ByAgent: map[string]Tokens{}, ByModel: map[string]Tokens{}}, Counts: Counts{TurnsByAgent: map[string]int{}},
		Sandbox: &Placement{Session: long, Commit: long, Backend: long, SandboxID: long, Host: long, Workspace: long},
		Turn:    &Turn{ID: long, Agent: long}, Archive: &Archive{BundleRef: long, HeadHash: long},
		Lineage: Lineage{Parent: "p", ForkHash: long, ForkReason: long}}
	args, _ := json.Marshal(map[string]string{"path": strings.Repeat("<", maxArguments/6-20)})
	for i := range n {
		k := fmt.Sprintf("%s%d", long[:min(len(long), 1000)], i)
		seq := uint64(i + 1)
		st.Chunks = append(st.Chunks, Chunk{Seq: seq, Role: long, Agent: long, Content: huge, ToolCallID: long, Origin: long})
		st.Compactions = append(st.Compactions, Compaction{Seq: seq, Summary: huge})
		st.Decisions = append(st.Decisions, Decision{Seq: seq, Rule: long, Route: long, Reason: long, Cause: long, TurnID: long})
		st.Validations = append(st.Validations, Validation{Seq: seq, Check: Check{Validator: long, Reason: long}})
		st.Memory = append(st.Memory, MemoryEvent{Seq: seq, Kind: long, ItemIDs: []string{long, long, long, long, long, long, long, long, long, long},
			Query: long, EventID: long, Agent: long, TurnID: long, Actor: long, Items: []events.MemoryItemRef{{ItemID: long, Content: long}}})
		st.Lineage.Merges = append(st.Lineage.Merges, Merge{Seq: seq, Source: long, SourceHash: long, Ancestor: long})
		st.Lineage.Path = append(st.Lineage.Path, events.Segment{Session: long, From: seq})
		st.Lineage.Merged = append(st.Lineage.Merged, events.Segment{Session: long, From: seq, To: seq})
		st.Labels[k] = long
		st.Usage.ByAgent[k] = Tokens{In: int64(i)}
		st.Usage.ByModel[k] = Tokens{In: int64(i)}
		st.Counts.TurnsByAgent[k] = i
		st.Pending[k] = Work{Seq: seq, Kind: long, Description: long, Assignee: long}
		outcome := ""
		if i%2 == 0 {
			outcome = long
		}
		st.Approvals[k] = Approval{Seq: seq, Action: long, Outcome: outcome, By: long, Actor: long, RequestedBy: long,
			Approver: long, CallID: long, Tool: long, Gate: long, Reason: long}
		status := ToolRunning
		if i%2 == 0 {
			status = long + fmt.Sprint(i)
		}
		st.Tools[k] = &Tool{CallID: k, Tool: long, Agent: long, Arguments: args, Status: status, Error: long, CommitBefore: long,
			CommitAfter: long, Seqs: make([]uint64, 1000), Origin: long}
	}
	return st
}

// TestOverviewBound checks that no session makes the state reply large:
// the worst case with the largest options stays under MaxOverviewBytes.
func TestOverviewBound(t *testing.T) {
	st := worstState(1000, 1<<20)
	many := make([]string, 0, len(st.Tools))
	for id := range st.Tools {
		many = append(many, id)
	}
	ov := st.Overview(OverviewOptions{Tail: 1 << 20, Clip: 1 << 30, Calls: many})
	b, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worst-case overview: %d bytes (bound %d)", len(b), MaxOverviewBytes)
	if len(b) > MaxOverviewBytes {
		t.Fatalf("overview is %d bytes, above MaxOverviewBytes %d", len(b), MaxOverviewBytes)
	}
	if ov.Chunks.Count != 1000 || len(ov.Chunks.Last) != MaxTail || ov.Tools.Count != 1000 || len(ov.Tools.Open) != MaxOpen || ov.Tools.OpenCount != 500 {
		t.Errorf("counts: chunks %d (%d last), tools %d (%d of %d open); want 1000 (%d), 1000 (%d of 500)",
			ov.Chunks.Count, len(ov.Chunks.Last), ov.Tools.Count, len(ov.Tools.Open), ov.Tools.OpenCount, MaxTail, MaxOpen)
	}
}

// TestOverviewNineChunks is issue 11's case: nine 1 MB chunks answered in
// a few KiB, each with its seq and full size.
func TestOverviewNineChunks(t *testing.T) {
	st := &State{ID: "s", Status: StatusActive}
	for i := range 9 {
		st.Chunks = append(st.Chunks, Chunk{Seq: uint64(i + 2), Role: "user", Content: strings.Repeat("x", 1_000_000)})
	}
	b, err := json.Marshal(st.Overview(OverviewOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 16<<10 {
		t.Fatalf("overview of nine 1 MB chunks is %d bytes, want at most 16 KiB", len(b))
	}
	var ov Overview
	if err := json.Unmarshal(b, &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Chunks.Count != 9 || ov.Chunks.Bytes != 9_000_000 || len(ov.Chunks.Last) != DefaultTail {
		t.Fatalf("chunks %+v", ov.Chunks)
	}
	c := ov.Chunks.Last[DefaultTail-1]
	if c.Seq != 10 || c.Size != 1_000_000 || !c.Clipped || len(c.Content) != DefaultClip {
		t.Errorf("last chunk: seq %d size %d clipped %v content %d bytes; want 10, 1000000, true, %d", c.Seq, c.Size, c.Clipped, len(c.Content), DefaultClip)
	}
	if ov.Chunks.Last[0].Seq != 3 {
		t.Errorf("first chunk kept is seq %d, want 3 (the last %d of 9)", ov.Chunks.Last[0].Seq, DefaultTail)
	}
}

// TestOverviewManyToolCalls: thousands of tool calls make a bounded
// reply that keeps the calls in flight and the last ones, oldest first.
func TestOverviewManyToolCalls(t *testing.T) {
	st := &State{ID: "s", Status: StatusActive, Tools: map[string]*Tool{}}
	args := json.RawMessage(`{"path":"` + strings.Repeat("a", 2000) + `"}`)
	for i := range 5000 {
		status := ToolCompleted
		if i%1000 == 7 {
			status = ToolRequested
		}
		id := fmt.Sprintf("call-%05d", i)
		st.Tools[id] = &Tool{CallID: id, Tool: "read_file", Status: status, Arguments: args, Seqs: []uint64{uint64(3*i + 2), uint64(3*i + 3)}}
	}
	st.Tools["call-small"] = &Tool{CallID: "call-small", Tool: "ls", Status: ToolRunning, Arguments: json.RawMessage(`{"dir":"."}`), Seqs: []uint64{20000}}
	ov := st.Overview(OverviewOptions{Tail: 3})
	b, _ := json.Marshal(ov)
	if len(b) > 16<<10 {
		t.Fatalf("overview of 5001 tool calls is %d bytes, want at most 16 KiB", len(b))
	}
	var open []string
	for _, e := range ov.Tools.Open {
		open = append(open, e.CallID)
	}
	if want := []string{"call-00007", "call-01007", "call-02007", "call-03007", "call-04007", "call-small"}; !reflect.DeepEqual(open, want) || ov.Tools.OpenCount != 6 {
		t.Errorf("open = %v (%d), want %v", open, ov.Tools.OpenCount, want)
	}
	var last []string
	for _, e := range ov.Tools.Last {
		last = append(last, e.CallID)
	}
	if want := []string{"call-04998", "call-04999", "call-small"}; !reflect.DeepEqual(last, want) {
		t.Errorf("last = %v, want %v", last, want)
	}
	if e := ov.Tools.Last[0]; e.Arguments != nil || e.ArgumentsSize != len(args) || e.Seq != 3*4998+2 || e.LastSeq != 3*4998+3 || e.Events != 2 {
		t.Errorf("large call = %+v, want arguments left out with their size and seqs", e)
	}
	if e := ov.Tools.Last[2]; string(e.Arguments) != `{"dir":"."}` {
		t.Errorf("small call arguments = %s", e.Arguments)
	}
	asked := st.Overview(OverviewOptions{Calls: []string{"call-00001", "nope", "call-04007"}}).Tools.Asked
	if len(asked) != 2 || asked[0].CallID != "call-00001" || asked[0].Status != ToolCompleted || asked[1].CallID != "call-04007" || asked[1].Status != ToolRequested {
		t.Errorf("asked = %+v, want call-00001 completed and call-04007 requested", asked)
	}
	if ov.Tools.ByStatus[ToolCompleted] != 4995 || ov.Tools.ByStatus[ToolRequested] != 5 || ov.Tools.ByStatus[ToolRunning] != 1 {
		t.Errorf("by status = %v", ov.Tools.ByStatus)
	}
}

// TestOverviewLeavesStateAlone: the ledger builds overviews of the state it
// holds, so building one must change nothing in it.
func TestOverviewLeavesStateAlone(t *testing.T) {
	st := worstState(40, 2<<10)
	before, _ := json.Marshal(st)
	st.Overview(OverviewOptions{Tail: 3, Clip: 10})
	after, _ := json.Marshal(st)
	if string(before) != string(after) {
		t.Fatal("Overview changed the state")
	}
}

func TestClipJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
		cut  bool
	}{
		{"hello", 5, "hello", false},
		{"hello", 4, "hell", true},
		{"a\"b", 3, "a\"", true},
		{"héllo", 2, "h", true}, // é is two bytes
		{"héllo", 3, "hé", true},
		{"\x01abc", 6, "\x01", true},
		{"\xffabc", 5, "", true},
		{"a\nb", 4, "a\nb", false},
	} {
		got, cut := clipJSON(c.in, c.n)
		if got != c.want || cut != c.cut {
			t.Errorf("clipJSON(%q, %d) = %q, %v; want %q, %v", c.in, c.n, got, cut, c.want, c.cut)
		}
		if enc, _ := json.Marshal(got); len(enc)-2 > c.n {
			t.Errorf("clipJSON(%q, %d) encodes to %d bytes", c.in, c.n, len(enc)-2)
		}
	}
	if got := text(strings.Repeat("x", 600), maxText); len(got) != maxText || !strings.HasSuffix(got, "…") {
		t.Errorf("text clipped to %d bytes (%q…), want %d ending with …", len(got), got[:10], maxText)
	}
}
