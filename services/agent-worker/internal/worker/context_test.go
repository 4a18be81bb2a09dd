package worker_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// agents are whose contexts the equivalence tests build; "" is an agent
// too (tool calls recorded without a request have no agent).
var agents = []string{"coder", "researcher", ""}

// follower folds a session event by event and, after every event, checks
// that each agent's incremental context equals its transcript from scratch.
type follower struct {
	t       *testing.T
	c       *worker.Contexts
	id      string
	st      *session.State
	seq     uint64
	kept    []keptMessages // every slice Messages returned, with a copy
	history []string       // what was folded, for failures
}

func (f *follower) record(at string, d any) {
	b, _ := json.Marshal(d)
	f.history = append(f.history, fmt.Sprintf("%s %T %s", at, d, b))
}

type keptMessages struct {
	got, copy []provider.Message
	where     string
}

func newFollower(t *testing.T, c *worker.Contexts, id string) *follower {
	return &follower{t: t, c: c, id: id, st: &session.State{}}
}

// stored is event data as the fold sees it at seq of session id.
func stored(t testing.TB, id string, seq uint64, d any) events.Stored {
	t.Helper()
	k, ok := events.KindOf(d)
	if !ok {
		t.Fatalf("%T is not an event kind", d)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: id + "-" + strconv.FormatUint(seq, 10), Type: k.Type, Session: id, Seq: seq, Data: raw}
}

// apply folds the session's next event and checks.
func (f *follower) apply(d any) {
	f.t.Helper()
	f.seq++
	session.Apply(f.st, stored(f.t, f.id, f.seq, d))
	f.record(fmt.Sprintf("%d", f.seq), d)
	f.check(fmt.Sprintf("after %T at %d", d, f.seq))
}

// merge folds an event another session's merge takes in, and checks.
func (f *follower) merge(from string, seq uint64, d any) {
	f.t.Helper()
	session.ApplyMerged(f.st, stored(f.t, from, seq, d))
	f.record(fmt.Sprintf("merged %s %d", from, seq), d)
	f.check(fmt.Sprintf("after merged %T of %s at %d", d, from, seq))
}

// check compares every agent's context at the current state with the
// transcript from scratch. The worker hands out views; so does check.
func (f *follower) check(where string) {
	f.t.Helper()
	f.checkState(f.st.View(), where)
}

func (f *follower) checkState(st *session.State, where string) {
	f.t.Helper()
	for _, agent := range agents {
		want := wire(worker.Transcript(st, agent))
		got := f.c.Messages(f.id, st, agent)
		if !sameMessages(got, want) {
			f.t.Fatalf("%s, agent %q:\n got %s\nwant %s\nevents:\n%s", where, agent, dump(got), dump(want), strings.Join(f.history, "\n"))
		}
		f.kept = append(f.kept, keptMessages{got: got, copy: deepCopy(got), where: where + ", agent " + agent})
	}
}

// unchanged checks that no slice Messages returned changed since.
func (f *follower) unchanged() {
	f.t.Helper()
	for _, k := range f.kept {
		if !sameMessages(k.got, k.copy) {
			f.t.Fatalf("messages returned %s changed since:\n now %s\nthen %s", k.where, dump(k.got), dump(k.copy))
		}
	}
}

func sameMessages(a, b []provider.Message) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}

// wire names tool calls as the worker offers them to models.
func wire(msgs []provider.Message) []provider.Message {
	for i := range msgs {
		for j := range msgs[i].ToolCalls {
			msgs[i].ToolCalls[j].Name = strings.ReplaceAll(msgs[i].ToolCalls[j].Name, ".", "__")
		}
	}
	return msgs
}

func deepCopy(msgs []provider.Message) []provider.Message {
	out := slices.Clone(msgs)
	for i := range out {
		out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
		for j := range out[i].ToolCalls {
			out[i].ToolCalls[j].Arguments = slices.Clone(out[i].ToolCalls[j].Arguments)
		}
	}
	return out
}

func compaction(from, to uint64, summary string) *events.TranscriptCompacted {
	return &events.TranscriptCompacted{FromSeq: from, ToSeq: to, Summary: summary}
}

func recalled(agent, turn string, items ...string) *events.MemoryRecalled {
	r := &events.MemoryRecalled{Query: "q", Agent: agent, TurnID: turn}
	for i, content := range items {
		r.Items = append(r.Items, events.MemoryItemRef{ItemID: "mem-" + content, Version: i + 1, Score: 1, Content: content})
	}
	return r
}

// A session of turns without compactions: after the first build every turn
// only appends the messages of the new events.
func TestContextsAppendTurnByTurn(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "fix the build"})
	f.apply(chunk(events.RoleSystem, "", "be brief"))
	f.apply(recalled("coder", "turn-1", "capitals kept", "dashes"))
	f.apply(chunk(events.RoleAssistant, "coder", "running the tests"))
	f.apply(toolCall("coder", "c1", "run", `{"cmd":"go test"}`))
	f.apply(toolCall("coder", "c2", "fs.read", `{"path":"calc.go"}`))
	f.apply(&events.ToolStarted{CallID: "c1", Tool: "run", Attempt: 1})
	f.apply(&events.ToolCompleted{CallID: "c1", Tool: "run"})
	f.apply(toolResult("coder", "c1", "FAIL"))
	f.apply(toolResult("coder", "c2", "func Add"))
	f.apply(chunk(events.RoleAssistant, "researcher", "calc.go subtracts"))
	f.apply(toolCall("researcher", "r1", "fs.read", `{}`))
	f.apply(toolResult("researcher", "r1", "package calc"))
	f.apply(toolCall("coder", "c3", "run", `{}`)) // joins nothing: the last message is the researcher's
	f.apply(recalled("researcher", "turn-2", "not the coder's"))
	f.apply(recalled("coder", "turn-3")) // empty: no message
	f.apply(toolResult("coder", "ghost", "no such call"))
	f.apply(&events.ModelCalled{Agent: "coder", Model: "m"})
	f.apply(chunk(events.RoleUser, "", "please hurry"))
	f.unchanged()
	st := c.Stats()
	if st.Builds != int64(len(agents)) || st.Splices != 0 || st.Appends == 0 || st.Entries != len(agents) {
		t.Fatalf("stats %+v: want one build per agent, then only appends", st)
	}
}

// Compactions change earlier messages: the context is rebuilt from the
// first place that changes, also when a later compaction supersedes one
// and brings back what it had summarised, and when a compacted call's
// result stays.
func TestContextsSpliceCompactions(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "t"})                         // 1
	f.apply(chunk(events.RoleUser, "", "one"))                         // 2
	f.apply(chunk(events.RoleAssistant, "coder", "two"))               // 3
	f.apply(toolCall("coder", "c1", "run", `{}`))                      // 4
	f.apply(chunk(events.RoleAssistant, "researcher", "three"))        // 5
	f.apply(chunk(events.RoleUser, "", "four"))                        // 6
	f.apply(toolResult("coder", "c1", "result after others' words"))   // 7
	f.apply(compaction(3, 5, "two and three"))                         // 8: the call is compacted, its result stays
	f.apply(chunk(events.RoleAssistant, "coder", "five"))              // 9
	f.apply(compaction(2, 6, "one to four"))                           // 10: supersedes 8
	f.apply(chunk(events.RoleUser, "", "six"))                         // 11
	f.apply(compaction(4, 4, "the call alone"))                        // 12: supersedes 10, 2..3 and 5..6 come back
	f.apply(toolCall("coder", "c2", "run", `{}`))                      // 13
	f.apply(compaction(13, 20, "a range ahead of the log"))            // 14
	f.apply(chunk(events.RoleAssistant, "coder", "seven, compacted"))  // 15
	f.apply(toolResult("coder", "c2", "a result of a compacted call")) // 16
	f.apply(compaction(30, 31, "a range after everything"))            // 17
	f.apply(chunk(events.RoleUser, "", "eight"))                       // 18
	f.unchanged()
	if st := c.Stats(); st.Splices == 0 {
		t.Fatalf("stats %+v: compactions should splice", st)
	}
}

// Tool calls and their results in every order: a result before its call,
// a call's request after its start, another agent's call, a request that
// names the call again with other arguments.
func TestContextsToolCallsInAnyOrder(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "t"})
	f.apply(chunk(events.RoleAssistant, "coder", "calling"))
	f.apply(toolResult("coder", "early", "the result first"))
	f.apply(chunk(events.RoleUser, "", "meanwhile"))
	f.apply(toolCall("coder", "early", "run", `{}`))
	f.apply(&events.ToolStarted{CallID: "late", Tool: "run", Attempt: 1})
	f.apply(toolResult("coder", "late", "started before it was asked"))
	f.apply(toolCall("coder", "late", "run", `{"a":1}`))
	f.apply(toolCall("coder", "late", "run", `{"a":2}`))
	f.apply(toolCall("researcher", "late", "run", `{"a":2}`))
	f.apply(toolCall("researcher", "theirs", "run", `{}`))
	f.apply(toolResult("researcher", "theirs", "theirs"))
	f.apply(&events.ToolStarted{CallID: "anon", Tool: "run", Attempt: 1})
	f.apply(toolResult("", "anon", "nobody asked"))
	f.apply(&events.ToolFailed{CallID: "anon", Tool: "run", Error: "x"})
	f.unchanged()
}

// A session a merge took events into: the merged events keep their
// source's sequences, before, among and after the session's own.
func TestContextsMerges(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "t"})
	f.apply(chunk(events.RoleAssistant, "coder", "mine"))
	f.merge("o", 2, chunk(events.RoleUser, "", "theirs at 2"))
	f.merge("o", 9, toolCall("coder", "m1", "run", `{}`))
	f.apply(&events.SessionMerged{Source: "o"})
	f.apply(chunk(events.RoleUser, "", "after the merge"))
	f.apply(toolCall("coder", "c1", "run", `{}`))
	f.apply(chunk(events.RoleUser, "", "later"))
	f.merge("p", 4, recalled("coder", "turn-p", "from p"))
	f.apply(chunk(events.RoleUser, "", "last"))
	f.unchanged()
}

// A state below what a context covers (a redelivery, another worker's
// state) is built from scratch, and so is the later state after it.
func TestContextsLowerSequenceRebuilds(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "t"})
	f.apply(chunk(events.RoleAssistant, "coder", "one"))
	early := f.st.Clone()
	f.apply(toolCall("coder", "c1", "run", `{}`))
	f.apply(chunk(events.RoleAssistant, "coder", "two"))
	before := c.Stats().Builds
	f.checkState(early, "at the earlier state")
	if got := c.Stats().Builds - before; got != int64(len(agents)) {
		t.Fatalf("a lower sequence built %d contexts from scratch, want %d", got, len(agents))
	}
	f.check("back at the head")
	f.apply(chunk(events.RoleUser, "", "three"))
	f.unchanged()
}

// Another state at the same or a later sequence that does not continue
// the one covered (compact's state naming a compaction the log then holds
// differently; another task) is built from scratch.
func TestContextsOtherStateRebuilds(t *testing.T) {
	c := worker.NewContexts(0)
	f := newFollower(t, c, "s")
	f.apply(&events.SessionStarted{Task: "t"})
	f.apply(chunk(events.RoleUser, "", "one"))
	f.apply(chunk(events.RoleAssistant, "coder", "two"))
	// The worker's compact: the state with the compaction it just emitted.
	planned := f.st.View()
	planned.Compactions = append(planned.Compactions, session.Compaction{Seq: planned.Seq + 1, FromSeq: 2, ToSeq: 3, Summary: "planned"})
	f.checkState(planned, "with the planned compaction")
	// The log holds another (an earlier attempt's) compaction.
	f.apply(compaction(2, 2, "recorded"))
	f.apply(chunk(events.RoleUser, "", "three"))
	f.apply(&events.SessionStarted{Task: "another task"})
	f.unchanged()
}

// Contexts beyond the bound are dropped least recently used first, and
// built again from scratch when used.
func TestContextsEviction(t *testing.T) {
	c := worker.NewContexts(2000)
	a, b := newFollower(t, c, "a"), newFollower(t, c, "b")
	for _, f := range []*follower{a, b} {
		f.apply(&events.SessionStarted{Task: "t"})
	}
	long := strings.Repeat("x", 400)
	for i := range 6 {
		a.apply(chunk(events.RoleUser, "", long+strconv.Itoa(i)))
		b.apply(chunk(events.RoleUser, "", long+strconv.Itoa(i)))
	}
	st := c.Stats()
	if st.Bytes > 2000+3*2000 || st.Entries >= 2*len(agents) {
		t.Fatalf("stats %+v: want at most the bound, beside the entry in use", st)
	}
	builds := st.Builds
	a.apply(chunk(events.RoleUser, "", "again"))
	if c.Stats().Builds == builds {
		t.Fatal("a dropped context was not built again")
	}
	a.unchanged()
	b.unchanged()
}

// A fork's state begins with its parent's: its context is its own, built
// from the fork's state, and the parent's goes on.
func TestContextsFork(t *testing.T) {
	c := worker.NewContexts(0)
	p := newFollower(t, c, "p")
	p.apply(&events.SessionStarted{Task: "t"})
	p.apply(chunk(events.RoleAssistant, "coder", "one"))
	p.apply(toolCall("coder", "c1", "run", `{}`))
	p.apply(toolResult("coder", "c1", "ok"))
	p.apply(compaction(2, 2, "one"))
	f := newFollower(t, c, "f")
	f.st, f.seq = p.st.Clone(), p.seq
	f.apply(&events.SessionForked{Parent: "p", AtSeq: p.seq, ParentHash: "h"})
	f.apply(chunk(events.RoleAssistant, "coder", "fork's"))
	p.apply(chunk(events.RoleAssistant, "coder", "parent's"))
	f.apply(toolCall("coder", "c2", "run", `{}`))
	p.apply(toolCall("coder", "c2", "run", `{"other":true}`))
	p.unchanged()
	f.unchanged()
}

// The property: for random sessions (chunks of every role and several
// agents, tool calls and their events in any order, compactions that
// supersede others, recalls, merges, a second start), the incremental
// context equals the transcript from scratch after every event, and no
// slice it returned changes afterwards.
func TestContextsEqualTranscriptsOfRandomSessions(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 11))
			c := worker.NewContexts(int64(1 + r.IntN(1<<16))) // some evict
			f := newFollower(t, c, "s")
			if r.IntN(4) > 0 {
				f.apply(&events.SessionStarted{Task: "task"})
			}
			// Half the sessions take no merges, no second start and no planned
			// compaction, none of which a context continues: more splices.
			tame := seed%2 == 0
			var earlier *session.State
			for range 40 + r.IntN(60) {
				randomStep(r, f, tame)
				switch r.IntN(20) {
				case 0:
					earlier = f.st.Clone()
				case 1:
					if earlier != nil {
						f.history = append(f.history, "(an earlier state)")
						f.checkState(earlier, "at an earlier state")
					}
				}
			}
			f.unchanged()
		})
	}
}

func randomStep(r *rand.Rand, f *follower, tame bool) {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	agent := func() string { return pick("coder", "researcher", "") }
	callID := func() string { return pick("c1", "c2", "c3", "c4", "c5", "c6", "") }
	text := func() string { return "t" + strconv.Itoa(r.IntN(1000)) }
	n := r.IntN(100)
	if tame && n >= 80 && n < 86 {
		n = 99
	}
	switch {
	case n < 30:
		f.apply(chunk(pick(events.RoleSystem, events.RoleUser, events.RoleAssistant, events.RoleAssistant, "other"), agent(), text()))
	case n < 42:
		f.apply(toolResult(agent(), callID(), text()))
	case n < 55:
		f.apply(toolCall(agent(), callID(), pick("run", "fs.read"), `{"n":`+strconv.Itoa(r.IntN(3))+`}`))
	case n < 62:
		id := callID()
		f.apply(pick3(r, &events.ToolStarted{CallID: id, Tool: "run", Attempt: 1},
			&events.ToolCompleted{CallID: id, Tool: "run"}, &events.ToolFailed{CallID: id, Tool: "run", Error: "x"}))
	case n < 72:
		from := uint64(1 + r.IntN(int(f.seq)+2))
		to := from + uint64(r.IntN(8))
		if r.IntN(10) == 0 {
			to = from - 1 // an empty range: folds all the same
		}
		f.apply(compaction(from, to, text()))
	case n < 78:
		items := make([]string, r.IntN(3))
		for i := range items {
			items[i] = text()
		}
		f.apply(recalled(agent(), text(), items...))
	case n < 80:
		f.apply(&events.MemoryWritten{ItemID: text()})
	case n < 83:
		from := pick("o", "p")
		seq := uint64(1 + r.IntN(int(f.seq)+10))
		switch r.IntN(3) {
		case 0:
			f.merge(from, seq, chunk(events.RoleAssistant, agent(), text()))
		case 1:
			f.merge(from, seq, toolCall(agent(), callID(), "run", `{}`))
		default:
			f.merge(from, seq, recalled(agent(), text(), text()))
		}
	case n < 84:
		f.apply(&events.SessionStarted{Task: text()})
	case n < 86:
		// The worker's compact: the state with a compaction not yet folded.
		st := f.st.View()
		st.Compactions = append(st.Compactions, session.Compaction{Seq: st.Seq + 1, FromSeq: 1, ToSeq: st.Seq / 2, Summary: "planned"})
		f.history = append(f.history, "(a planned compaction)")
		f.checkState(st, "with a planned compaction")
	default:
		f.apply(&events.ModelCalled{Agent: agent(), Model: "m"})
	}
}

func pick3(r *rand.Rand, a, b, c any) any {
	return []any{a, b, c}[r.IntN(3)]
}

// An entry keys on a copy of the session ID it was asked for, not on the
// caller's memory (an ID parsed from a message is a substring of it):
// overwritten afterwards, the entry is still found under the ID.
func TestContextsKeepNoCallersID(t *testing.T) {
	c := worker.NewContexts(0)
	st := &session.State{}
	session.Apply(st, stored(t, "s-key", 1, &events.SessionStarted{Task: "t"}))
	session.Apply(st, stored(t, "s-key", 2, chunk(events.RoleUser, "", "hello")))
	id := []byte("s-key")
	c.Messages(unsafe.String(&id[0], len(id)), st, "coder")
	copy(id, "xxxxx")
	c.Messages("s-key", st, "coder")
	if s := c.Stats(); s.Builds != 1 || s.Entries != 1 {
		t.Errorf("stats %+v after the caller's ID was overwritten: want the entry found, one build", s)
	}
}
