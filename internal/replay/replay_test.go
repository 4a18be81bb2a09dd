package replay

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// ev builds a stored event of session at seq.
func ev(t *testing.T, session string, seq uint64, source string, data any) events.Stored {
	t.Helper()
	k, ok := events.KindOf(data)
	if !ok {
		t.Fatalf("%T is not an event kind", data)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: events.NewID(), Source: source, Type: k.Type, Session: session, Seq: seq,
		Time: time.Unix(int64(seq), 0), Data: raw}
}

// run builds a two-branch tree as one run would store it, with its own
// session IDs, commits and turn IDs.
func run(t *testing.T, root, turn, commit, coderSays string, swap bool) *Tree {
	fork := root + "-0a1b2c3d"
	own := map[string][]events.Stored{
		root: {
			ev(t, root, 1, "rath/cli", &events.SessionStarted{Task: "fix", WorkflowRef: "sha256:" + strings.Repeat(commit[:1], 64)}),
			ev(t, root, 2, SourceSelector, &events.SelectorDecided{Rule: "start", Route: "agent:coder", Agent: "coder", TurnID: turn}),
			ev(t, root, 3, SourceWorker, &events.ChunkAppended{Role: "assistant", Agent: "coder", Content: coderSays}),
			ev(t, root, 4, SourceWorker, &events.TurnCompleted{TurnID: turn, Agent: "coder"}),
			ev(t, root, 5, SourceRunner, &events.ToolCompleted{CallID: "c1", Tool: "run", DurationMS: 17, CommitAfter: commit,
				Result: "ok  \texample.com/slug\t0.004s"}),
			ev(t, root, 6, SourceSelector, &events.SessionClosed{Outcome: "superseded", Reason: "forked to " + fork + " at 4"}),
		},
		fork: {
			ev(t, fork, 5, SourceSelector, &events.SessionForked{Parent: root, AtSeq: 4, ParentHash: commit}),
			ev(t, fork, 6, SourceSelector, &events.SessionClosed{Outcome: "accepted"}),
		},
	}
	if swap { // the tool runner's event stored before the worker's
		r := own[root]
		r[3], r[4] = r[4], r[3]
		r[3].Seq, r[4].Seq = 4, 5
	}
	tr, err := NewTree(own)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestCompare(t *testing.T) {
	orig := run(t, "01a20131-647b-7c22-b4af-2924e4062573", "turn-c20c2833", strings.Repeat("a", 40), "patching", false)
	for _, tc := range []struct {
		name  string
		repl  *Tree
		first string // "" for reproduced
		seq   uint64
	}{
		{"another run", run(t, "01a20139-9588-706f-b041-ff486bffc761", "turn-5f2f1f0d", strings.Repeat("b", 40), "patching", false), "", 0},
		{"interleaved differently", run(t, "01a20139-9588-706f-b041-ff486bffc761", "turn-5f2f1f0d", strings.Repeat("b", 40), "patching", true), "", 0},
		{"another answer", run(t, "01a20139-9588-706f-b041-ff486bffc761", "turn-5f2f1f0d", strings.Repeat("b", 40), "guessing", false), "root", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Compare(orig, tc.repl, Options{Finished: true})
			if len(res.Pairs) != 2 || res.Pairs[1].Pos != "root.1" || res.Pairs[1].Replay != tc.repl.Branches[1].ID {
				t.Fatalf("pairs %+v", res.Pairs)
			}
			switch {
			case tc.first == "" && res.First != nil:
				t.Fatalf("diverged: %+v\n%s", res.First, res.First.Diff)
			case tc.first == "" && res.Identical != 8:
				t.Fatalf("identical %d, want 8", res.Identical)
			case tc.first != "" && (res.First == nil || res.First.Pos != tc.first || res.First.Seq != tc.seq):
				t.Fatalf("first divergence %+v, want %s at %d", res.First, tc.first, tc.seq)
			case tc.first != "" && res.First.Diff != "- data.content: \"patching\"\n+ data.content: \"guessing\"\n":
				t.Fatalf("diff %q", res.First.Diff)
			}
		})
	}
}

func TestCompareMissingBranchAndEvents(t *testing.T) {
	orig := run(t, "01a20131-647b-7c22-b4af-2924e4062573", "turn-c20c2833", strings.Repeat("a", 40), "patching", false)
	root := orig.Root.Events[:4] // stopped before the tool result; no fork
	repl, err := NewTree(map[string][]events.Stored{orig.Root.ID: root})
	if err != nil {
		t.Fatal(err)
	}
	res := Compare(orig, repl, Options{})
	if res.First == nil || res.First.Pos != "root.1" || res.First.What != "branch missing" {
		t.Fatalf("unfinished replay: %+v", res.First)
	}
	res = Compare(orig, repl, Options{Finished: true})
	if res.First == nil || res.First.Pos != "root" || res.First.What != "missing" || res.First.Seq != 5 {
		t.Fatalf("finished replay: %+v", res.First)
	}
}

func TestNormaliseMasksAndRenames(t *testing.T) {
	tr := run(t, "01a20131-647b-7c22-b4af-2924e4062573", "turn-c20c2833", strings.Repeat("a", 40), "x", false)
	n := Normalise(tr)
	b, _ := json.Marshal(n[tr.Root.ID])
	got := string(b)
	for _, want := range []string{`"turn_id":"\u003cturn#1\u003e"`, `"commit_after":"\u003ccommit#1\u003e"`, `"duration_ms":"\u003cmasked\u003e"`,
		`forked to \u003croot.1\u003e at 4`, `example.com/slug\t\u003cduration\u003e`, `"workflow_ref":"\u003cmasked\u003e"`} {
		if !strings.Contains(got, want) {
			t.Errorf("normalised root lacks %s:\n%s", want, got)
		}
	}
}

func TestExternal(t *testing.T) {
	const s = "01a20131-647b-7c22-b4af-2924e4062573"
	trigger := events.NewID()
	byRule := &events.MemoryWritten{ItemID: itemID(events.DerivedID("selector", trigger, "memory")), Version: 1,
		Provenance: events.Provenance{Session: s, EventIDs: []string{trigger}, Evidence: "failed_attempt"}}
	byUser := &events.MemoryWritten{ItemID: itemID(events.NewID()), Version: 1,
		Provenance: events.Provenance{Session: s, EventIDs: []string{trigger}, Evidence: "human_correction"}}
	tr, err := NewTree(map[string][]events.Stored{s: {
		ev(t, s, 1, "rath/cli", &events.SessionStarted{Task: "fix"}),
		ev(t, s, 2, SourceMemory, byUser),
		ev(t, s, 3, SourceSelector, &events.SelectorDecided{Rule: "r", Route: "memory:project:x"}),
		ev(t, s, 4, SourceMemory, byRule),
		ev(t, s, 5, SourceMemory, &events.MemoryRecalled{Query: "q", TurnID: "turn-1"}),
		ev(t, s, 6, SourceMemory, &events.MemoryRecalled{Query: "q"}),
		ev(t, s, 7, "rath/cli", &events.ChunkAppended{Role: "user", Content: "hint"}),
		ev(t, s, 8, "rath/tool/lint", &events.ToolCompleted{CallID: "c", Tool: "lint"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, in := range External(tr) {
		seqs = append(seqs, in.Event.Seq)
	}
	if want := []uint64{2, 6, 7}; !slices.Equal(seqs, want) {
		t.Errorf("external inputs at %v, want %v", seqs, want)
	}
}

// A session ID replaces whole IDs only: session "fix" of workflow
// "fix-calc" keeps its workflow's name (the README's own replay reported a
// false divergence), and a fork's ID, which extends its parent's, is its
// own.
func TestNormaliseReplacesWholeIDsOnly(t *testing.T) {
	n := &normaliser{renames: map[string]string{}, counts: map[string]int{}, literal: [][2]string{{"fix-d1e6be3c", "<root.1>"}, {"fix", "<root>"}}}
	for in, want := range map[string]string{
		"fix":                         "<root>",
		"fix-calc":                    "fix-calc",
		"prefix":                      "prefix",
		"fix_2":                       "fix_2",
		"forked to fix-d1e6be3c at 4": "forked to <root.1> at 4",
		"fork of fix at 22":           "fork of <root> at 22",
		"fix/fix:fix.":                "<root>/<root>:<root>.",
		"ffix fix":                    "ffix <root>",
	} {
		if got := n.text(in); got != want {
			t.Errorf("text(%q) = %q, want %q", in, got, want)
		}
	}
}

// The README's session "fix" replays as reproduced: its ID is a word of its
// task and of the coder's text, and part of no workflow name it replaces.
func TestCompareShortWordID(t *testing.T) {
	orig := run(t, "fix", "turn-c20c2833", strings.Repeat("a", 40), "I will fix Add in fix-calc.", false)
	repl := run(t, "01a20139-9588-706f-b041-ff486bffc761", "turn-5f2f1f0d", strings.Repeat("b", 40), "I will fix Add in fix-calc.", false)
	if res := Compare(orig, repl, Options{Finished: true}); res.First != nil {
		t.Fatalf("diverged: %+v", res.First)
	}
	other := run(t, "01a20139-9588-706f-b041-ff486bffc761", "turn-5f2f1f0d", strings.Repeat("b", 40), "I will fix Add in <root>-calc.", false)
	if res := Compare(orig, other, Options{Finished: true}); res.First == nil || res.First.Seq != 3 {
		t.Fatalf("a different text compared equal: %+v", res.First)
	}
}

// A side's status is the session fold's for every registered kind: the
// contrast keeps no switch of its own over the catalog (an archived branch
// is archived, not closed).
func TestSideStatusIsTheFolds(t *testing.T) {
	for _, k := range events.Kinds() {
		raw, err := json.Marshal(k.New())
		if err != nil {
			t.Fatal(err)
		}
		all := []events.Stored{
			{ID: "e1", Type: events.TypeSessionStarted, Session: "s", Seq: 1, Data: json.RawMessage(`{"task":"t"}`)},
			{ID: "e2", Type: k.Type, Session: "s", Seq: 2, Data: raw},
		}
		st := &session.State{}
		for _, e := range all {
			session.Apply(st, e)
		}
		got := side("s", all, all[1:])
		if got.Status != string(st.Status) || got.Outcome != st.Outcome || got.Reason != st.CloseReason {
			t.Errorf("%s: side says %s/%s/%s, the fold %s/%s/%s", k.Type, got.Status, got.Outcome, got.Reason, st.Status, st.Outcome, st.CloseReason)
		}
	}
	closed, _ := json.Marshal(events.SessionClosed{Outcome: "succeeded", Reason: "done"})
	archived, _ := json.Marshal(events.SessionArchived{BundleRef: "sha256:x", FromSeq: 1, HeadSeq: 2})
	all := []events.Stored{
		{ID: "e1", Type: events.TypeSessionStarted, Session: "s", Seq: 1, Data: json.RawMessage(`{"task":"t"}`)},
		{ID: "e2", Type: events.TypeSessionClosed, Session: "s", Seq: 2, Data: closed},
		{ID: "e3", Type: events.TypeSessionArchived, Session: "s", Seq: 3, Data: archived},
	}
	if s := side("s", all, nil); s.Status != "archived" || s.Outcome != "succeeded" {
		t.Errorf("an archived branch: %+v", s)
	}
}
