package main

import (
	"strings"
	"testing"
)

func TestLifecycleCommands(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "lc", "--task", "t")
	for i := range 6 {
		ok(t, url, "emit", "lc", "rath.conversation.chunk.appended", "--data", `{"role":"user","content":"`+strings.Repeat(string(rune('a'+i)), 300)+`"}`)
	}
	ok(t, url, "pause", "lc", "--reason", "review")
	if r := rath(t, url, "pause", "lc"); r.code != exitRefused || !strings.Contains(r.stderr, "already paused") {
		t.Fatalf("pause twice: exit %d %q", r.code, r.stderr)
	}
	ok(t, url, "resume", "lc")
	if out := ok(t, url, "compact", "lc", "--keep-last", "2"); !strings.Contains(out, "compacted 2..5") {
		t.Fatalf("compact: %q", out)
	}
	ok(t, url, "start", "--id", "one", "--task", "t")
	ok(t, url, "emit", "one", "rath.conversation.chunk.appended", "--data", `{"role":"user","content":"hi"}`)
	if out := ok(t, url, "compact", "one", "--keep-last", "2"); !strings.Contains(out, "nothing to compact: 1 chunk, keeping the last 2") {
		t.Fatalf("compact of one chunk: %q", out) // it said "1 chunks"
	}
	if r := rath(t, url, "compact", "nope"); r.code != exitNotFound {
		t.Fatalf("compact missing: exit %d %q", r.code, r.stderr)
	}
	if r := rath(t, url, "archive", "lc"); r.code != exitRefused || !strings.Contains(r.stderr, "close it first") {
		t.Fatalf("archive active: exit %d %q", r.code, r.stderr)
	}
	ok(t, url, "close", "lc", "--reason", "done", "--outcome", "succeeded")
	if out := ok(t, url, "archive", "lc", "--purge"); !strings.Contains(out, "archived at 12") || !strings.Contains(out, "purged from the hot stream at 13") {
		t.Fatalf("archive: %q", out)
	}
	ok(t, url, "verify", "lc")
	if out := ok(t, url, "state", "lc"); !strings.Contains(out, "archived") {
		t.Fatalf("state: %q", out)
	}
}
