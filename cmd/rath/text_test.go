package main

import (
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// Data that is not Unicode text is refused as malformed (exit 4), naming
// the problem, and recorded; nothing is stored.
func TestEmitNonUnicodeIsRefused(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	for _, tc := range []struct {
		name, data, says string
	}{
		{"lone surrogate", `{"role":"user","content":"\ud800"}`, `lone surrogate \ud800`},
		{"raw invalid UTF-8", "{\"role\":\"user\",\"content\":\"\xff\"}", "not UTF-8: byte 0xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rath(t, url, "emit", "s1", events.TypeChunkAppended, "--data", tc.data)
			if r.code != exitRefused || !strings.Contains(r.stderr, "malformed") || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want exit %d, malformed, %q", r.code, r.stderr, exitRefused, tc.says)
			}
		})
	}
	if rej := ok(t, url, "rejects"); strings.Count(rej, "malformed  request") != 2 {
		t.Errorf("rejects lacks the two refusals:\n%s", rej)
	}
	if log := ok(t, url, "log", "s1"); strings.Count(log, "\n") != 1 {
		t.Errorf("a refused event was stored:\n%s", log)
	}
}
