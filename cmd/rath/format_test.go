package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

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
		{fmt.Errorf("log: %w", nats.ErrNoResponders), exitUnavailable},
		{&unreachableError{err: nats.ErrNoServers}, exitUnavailable},
		{api.Errorf("brand_new", "?"), exitError},
		{fmt.Errorf("to: %w", &refusedError{"the move was refused"}), exitRefused},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		data any
		want string
	}{
		{&events.ChunkAppended{Role: "assistant", Agent: "coder", Content: "line one\nline two"}, "assistant/coder: line one line two"},
		{&events.ChunkAppended{Role: "user", Content: string(bytes.Repeat([]byte("é"), 70))}, "user: " + string(bytes.Repeat([]byte("é"), 59)) + "…"},
		{&events.ModelCalled{Agent: "coder", Provider: "p", Model: "m", TokensIn: 3, TokensOut: 4, LatencyMS: 5}, "coder p/m in=3 out=4 5ms"},
		{&events.ToolCompleted{CallID: "c1", Tool: "shell", ExitCode: 1, DurationMS: 9}, "shell c1 exit 1 9ms"},
		{&events.SessionClosed{Outcome: "succeeded"}, "outcome=succeeded"},
		{&events.SessionPaused{}, ""},
		{&events.SandboxPlaced{Backend: "local", SandboxID: "local-s", Host: "h"}, "local/local-s (development backend: no isolation) host=h"},
		{&events.SandboxPlaced{Backend: "bwrap", SandboxID: "bwrap-s", Isolation: "bwrap: namespaces", From: &events.Sandbox{Backend: "local", SandboxID: "local-s"}},
			"bwrap/bwrap-s isolation=bwrap: namespaces from local/local-s"},
		{&events.SandboxRequested{Backend: "bwrap", Reason: "isolate"}, "to bwrap reason=isolate"},
		{&events.SandboxRefused{Backend: "docker", Reason: "unknown backend"}, "to docker refused: unknown backend"},
	} {
		k, _ := events.KindOf(tc.data)
		raw, _ := json.Marshal(tc.data)
		if got := summary(events.Stored{Type: k.Type, Data: raw}); got != tc.want {
			t.Errorf("summary(%s) = %q, want %q", k.Type, got, tc.want)
		}
	}
	if got := summary(events.Stored{Type: "rath.unknown", Data: json.RawMessage(`{"a":1}`)}); got != `{"a":1}` {
		t.Errorf("summary of an unknown type = %q", got)
	}
}

func TestWriteGraph(t *testing.T) {
	g := api.Graph{Session: "s3", Root: &api.Node{
		Session: "s1", Status: "closed", Head: 12,
		Children: []*api.Node{
			{Session: "s2", Status: "active", ForkSeq: 5, Head: 9, Merges: []api.Merged{{Seq: 9, Source: "s4", SourceSeq: 7}},
				Children: []*api.Node{{Session: "s4", Status: "paused", ForkSeq: 6, Head: 7}}},
			{Session: "s3", Status: "active", ForkSeq: 8, Head: 8},
		},
	}}
	var b bytes.Buffer
	if err := writeGraph(&b, g); err != nil {
		t.Fatal(err)
	}
	want := `s1 (closed, head 12)
├─ s2 @5 (active, head 9) ← merged s4@7
│  └─ s4 @6 (paused, head 7)
└─ s3 @8 (active, head 8) ◀
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
		{summary(events.Stored{Type: events.TypeMemoryRecalled, Data: json.RawMessage(`{"agent":"coder","items":[{"item_id":"m1"}]}`)}), "1 item"},
		{describeEvent(events.Stored{Type: events.TypeMemoryRecalled, Data: json.RawMessage(`{"agent":"coder","items":[{"item_id":"m1"}]}`)}), "memory recalled for coder: 1 item"},
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
