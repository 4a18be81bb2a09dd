package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("disk full"), exitError},
		{usageError{errors.New("bad flag")}, exitUsage},
		{fmt.Errorf("state of s: %w", api.Errorf(api.CodeNotFound, "no")), exitNotFound},
		{api.Errorf(api.CodeOutOfRange, "no"), exitNotFound},
		{api.Errorf(api.CodeSchema, "no"), exitRefused},
		{api.Errorf(api.CodeNothingToMerge, "no"), exitRefused},
		{&brokenError{session: "s"}, exitBroken},
		{api.Errorf(api.CodeConflict, "retry"), exitUnavailable},
		{api.Errorf(api.CodeUnavailable, "retry"), exitUnavailable},
		{fmt.Errorf("start s: %w", api.Errorf(api.CodeQuotaExceeded, "at most 3")), exitQuota},
		{fmt.Errorf("log: %w", nats.ErrNoResponders), exitUnavailable},
		{&unreachableError{err: nats.ErrNoServers}, exitUnavailable},
		{api.Errorf("brand_new", "?"), exitError},
		{fmt.Errorf("to: %w", &refusedError{"the move was refused"}), exitRefused},
		{&regressedError{baseline: "ev-1", tasks: []string{"a"}}, exitRegressed},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// rath log's and rath watch's line: sequence, time and type in columns,
// then the event's summary (events.Summary, tested there).
func TestWriteEvent(t *testing.T) {
	raw, _ := json.Marshal(events.ToolCompleted{CallID: "c1", Tool: "shell", ExitCode: 1, DurationMS: 9})
	var b bytes.Buffer
	ev := events.Stored{Seq: 12, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Type: events.TypeToolCompleted, Data: raw}
	if err := writeEvent(&b, ev); err != nil {
		t.Fatal(err)
	}
	if want := "   12  2026-01-02T03:04:05Z  rath.tool.call.completed          shell c1 exit 1, 9 ms\n"; b.String() != want {
		t.Errorf("writeEvent = %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := writeEvent(&b, events.Stored{Seq: 1, Type: "rath.unknown", Data: json.RawMessage(`{"a":1}`)}); err != nil || !strings.HasSuffix(b.String(), `  {"a":1}`+"\n") {
		t.Errorf("writeEvent of an unknown type = %q, %v", b.String(), err)
	}
}

// rath graph calls each branch what the dossier calls it, with its ID: forks
// numbered in the order they were made, whatever their place in the tree.
func TestWriteGraph(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 2, 3, 4, s, 0, time.UTC) }
	g := api.Graph{Session: "s3", Root: &api.Node{
		Session: "s1", Status: "closed", Outcome: "succeeded", Head: 12, Created: at(0),
		Merges: []api.Merged{{Seq: 12, Source: "other", SourceSeq: 3}},
		Children: []*api.Node{
			{Session: "s2", Status: "active", ForkSeq: 5, Head: 9, Created: at(2), Merges: []api.Merged{{Seq: 9, Source: "s4", SourceSeq: 7}},
				Children: []*api.Node{{Session: "s4", Status: "paused", ForkSeq: 6, Head: 7, Created: at(3)}}},
			{Session: "s3", Status: "active", ForkSeq: 8, Head: 8, Created: at(1)},
			{Session: "s5", Status: "active", ForkSeq: 2, Head: 2, Created: at(4)},
		},
	}}
	var b bytes.Buffer
	names := map[string]string{"s1": "root", "s2": "fork-2@5", "s3": "fork-1@8", "s4": "fork-3@6", "other": "root-2"}
	if err := writeGraph(&b, g, names); err != nil {
		t.Fatal(err)
	}
	want := `root s1 (closed: succeeded, head 12) ← merged root-2 (other) up to 3
├─ fork-2@5 s2 (active, head 9) ← merged fork-3@6 up to 7
│  └─ fork-3@6 s4 (paused, head 7)
├─ fork-1@8 s3 (active, head 8) ◀
└─ s5 @2 (active, head 2)
`
	if b.String() != want {
		t.Errorf("writeGraph =\n%s\nwant\n%s", b.String(), want)
	}
}

// Counts in the CLI's text agree with their noun, and a closed session's
// outcome and reason are told apart.
func TestPluralsAndOutcome(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{plural(1, "branch", "branches"), "1 branch"},
		{plural(0, "branch", "branches"), "0 branches"},
		{plural(uint64(2), "event", "events"), "2 events"},
		{describeEvent(events.Stored{Type: events.TypeChunkAppended, Data: json.RawMessage(`{"role":"user","content":"hi"}`)}, nil), ""},
		{describeEvent(events.Stored{Type: events.TypeMemoryRecalled, Data: json.RawMessage(`{"agent":"coder","items":[{"item_id":"m1"}]}`)}, nil), "memory recalled for coder: 1 item"},
		{describeEvent(events.Stored{Type: events.TypeSessionClosed, Data: json.RawMessage(`{"outcome":"superseded","reason":"forked to 01a21c17-576e-7df7-bd67-bf660ec4d7e7-94f47468 at 22"}`)},
			map[string]string{"01a21c17-576e-7df7-bd67-bf660ec4d7e7-94f47468": "fork-1@22"}), "closed: superseded (forked to fork-1@22 at 22)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	var b bytes.Buffer
	if err := writeState(&b, &session.Overview{ID: "fix", Status: session.StatusClosed, Outcome: "succeeded", CloseReason: "the coder reports the tests pass"}); err != nil {
		t.Fatal(err)
	}
	if want := "closed (succeeded: the coder reports the tests pass)"; !strings.Contains(b.String(), want) {
		t.Errorf("state:\n%s\nwant %q", b.String(), want)
	}
}

// audit usage keeps its columns in line whatever the length of a model's
// name: every row's numbers start and end at the same column.
func TestUsageRowsAlign(t *testing.T) {
	var b strings.Builder
	writeUsageRows(&b, map[string]session.Tokens{"coder": {In: 307, Out: 30, Calls: 1}, "researcher": {In: 100000, Out: 10, Calls: 12}},
		map[string]session.Tokens{"m1": {In: 7, Out: 1, Calls: 1}, "accounts/fireworks/models/llama-v3p1-405b-instruct": {In: 100400, Out: 39, Calls: 12}})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "  agent coder ") || !strings.HasPrefix(lines[3], "  model m1 ") {
		t.Fatalf("usage rows:\n%s", b.String())
	}
	for _, col := range []string{"  in ", "  out ", "  calls "} {
		at := strings.Index(lines[0], col)
		for _, l := range lines[1:] {
			if strings.Index(l, col) != at {
				t.Errorf("%q is not in line:\n%s", col, b.String())
			}
		}
	}
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Errorf("rows of different widths:\n%s", b.String())
		}
	}
}

// An audit answer calls a branch by its name, with its ID at its first
// mention, and a reason that names a long session ID names the branch, as
// dossier.md does.
func TestAuditAnswersNameBranches(t *testing.T) {
	const root, fork = "0197a1c2-0000-7000-8000-00000000abcd", "0197a1c2-0000-7000-8000-00000000abcd-b"
	names := branchNames{root: "root", fork: "fork-1@22"}
	ans := dossier.RouteAnswer{Branch: fork, Step: 24, Decisions: []dossier.Decision{
		{At: dossier.At{Branch: fork, Seq: 24}, Rule: "retry", Route: "agent:coder", Reason: "first turn of the fork of " + root + " at 22"},
		{At: dossier.At{Branch: fork, Seq: 30}, Rule: "continue", Route: "agent:coder"},
	}}
	var b bytes.Buffer
	if err := writeRoute(&b, ans, names); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fork-1@22 (" + fork + ") seq 24: route agent:coder by rule retry\n", "  reason:     first turn of the fork of root at 22\n",
		"\nfork-1@22 seq 30: route agent:coder by rule continue\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the answer lacks %q:\n%s", want, b.String())
		}
	}
}
