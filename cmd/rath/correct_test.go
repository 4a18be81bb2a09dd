package main

import (
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// rath fork --say and --tool-result against a real ledger: the fork and the
// correction are stored, marked and authored; points the loop cannot
// resume from are refused with what to do instead. And rath audit approved
// names who decided a gated call, from the call's step.
func TestForkCorrections(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "c")
	ok(t, url, "emit", "c", events.TypeTurnRequested, "--data", `{"turn_id":"t1","agent":"coder"}`)                // 2
	ok(t, url, "emit", "c", events.TypeTurnCompleted, "--data", `{"turn_id":"t1","agent":"coder","tool_calls":0}`) // 3
	ok(t, url, "emit", "c", events.TypeTurnRequested, "--data", `{"turn_id":"t2","agent":"coder"}`)                // 4
	ok(t, url, "emit", "c", events.TypeApprovalRequested, "--data",
		`{"approval_id":"ap-1","action":"run","approver":"maintainers","call_id":"c1","tool":"run"}`) // 5
	ok(t, url, "emit", "c", events.TypeToolRequested, "--data",
		`{"call_id":"c1","tool":"run","agent":"coder","arguments":{"command":["make"]},"approval_id":"ap-1"}`) // 6
	ok(t, url, "emit", "c", events.TypeTurnCompleted, "--data", `{"turn_id":"t2","agent":"coder","tool_calls":1}`) // 7
	ok(t, url, "approve", "c", "ap-1", "--reason", "fine")                                                         // 8

	out := ok(t, url, "fork", "c", "--at", "3", "--id", "c-said", "--say", "use blue")
	if !strings.Contains(out, "c-said\nforked c at 3; correction at 5 by default/client; coder resumes") {
		t.Fatalf("fork --say printed %q", out)
	}
	if log := ok(t, url, "log", "c-said", "--json"); !strings.Contains(log, `"correction":true`) || !strings.Contains(log, `"content":"use blue"`) {
		t.Fatalf("the correction is not in the fork:\n%s", log)
	}
	out = ok(t, url, "fork", "c", "--at", "8", "--id", "c-result", "--tool-result", "c1=ok: built", "--exit-code", "0")
	if !strings.Contains(out, "correction at 11 by default/client") {
		t.Fatalf("fork --tool-result printed %q", out)
	}
	if log := ok(t, url, "log", "c-result", "--json"); !strings.Contains(log, `"tool":"run"`) || !strings.Contains(log, `"result":"ok: built"`) {
		t.Fatalf("the result is not in the fork:\n%s", log)
	}
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"inside a turn", []string{"fork", "c", "--at", "4", "--say", "x"}, "the turn of coder (requested at 4) is in flight at 4"},
		{"a gated call", []string{"fork", "c", "--at", "7", "--tool-result", "c1=x"}, "waits for approval ap-1; approve or reject it instead"},
		{"a call in flight", []string{"fork", "c", "--at", "8", "--say", "x"}, "tool call c1 is in flight at 8"},
		{"no such call", []string{"fork", "c", "--at", "3", "--tool-result", "c9=x"}, "has no tool call c9 at 3"},
		{"no agent yet", []string{"fork", "c", "--at", "1", "--say", "x"}, "no agent's turn has ended by 1"},
		{"both", []string{"fork", "c", "--say", "x", "--tool-result", "c1=x"}, "not both"},
		{"no text", []string{"fork", "c", "--tool-result", "c1"}, "want CALLID=TEXT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rath(t, url, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want exit %d and a message with %q", r.code, r.stderr, exitUsage, tc.says)
			}
		})
	}

	out = ok(t, url, "audit", "approved", "c", "--step", "6")
	for _, want := range []string{"root (c) step 6 (rath.tool.call.requested): tool call c1 (run by coder", "granted by default/client at root seq 8",
		"maintainers to allow: run", "comment:  fine"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit approved lacks %q:\n%s", want, out)
		}
	}
	if out := ok(t, url, "audit", "approved", "c-result", "--step", "6"); !strings.Contains(out, "granted by default/client at root seq 8") {
		t.Errorf("a fork after the grant does not find it:\n%s", out)
	}
	if r := rath(t, url, "audit", "approved", "c", "--step", "2"); r.code != exitNotFound {
		t.Errorf("a step that is no call: exit %d (%s)", r.code, r.stderr)
	}
}
