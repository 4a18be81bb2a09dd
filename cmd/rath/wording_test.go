package main

import (
	"regexp"
	"strings"
	"testing"
)

// The ledger's refusals read as what a person does on the command line,
// and only a command line cobra could not parse points at --help.
func TestErrorWording(t *testing.T) {
	url := startLedger(t)
	eventID := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-`)

	for _, args := range [][]string{
		{"state", "nosuch"},
		{"log", "nosuch"},
		{"emit", "nosuch", "rath.conversation.chunk.appended", "--data", `{"role":"user","content":"hi"}`},
	} {
		r := rath(t, url, args...)
		if want := "rath: session nosuch does not exist (session_not_found): start it with 'rath start --id nosuch'; 'rath ls' lists the sessions there are\n"; r.code != exitNotFound || r.stderr != want {
			t.Errorf("rath %s: exit %d, stderr %q; want %d, %q", strings.Join(args, " "), r.code, r.stderr, exitNotFound, want)
		}
	}

	ok(t, url, "start", "--id", "s1")
	for _, args := range [][]string{
		{"start", "--id", "s1"},
		{"fork", "s1", "--at", "1", "--id", "s1"},
	} {
		r := rath(t, url, args...)
		if want := "rath: session s1 exists already (session_exists): choose another --id, or leave --id out and the ledger names one\n"; r.code != exitRefused || r.stderr != want {
			t.Errorf("rath %s: exit %d, stderr %q; want %d, %q", strings.Join(args, " "), r.code, r.stderr, exitRefused, want)
		}
		if r := rath(t, url, args...); eventID.MatchString(r.stderr) || strings.Contains(r.stderr, "append") {
			t.Errorf("rath %s names an event ID or the append: %q", strings.Join(args, " "), r.stderr)
		}
	}

	for _, tc := range []struct {
		args []string
		help string // "" when no pointer to --help may follow
	}{
		{[]string{"nosuch"}, "Run 'rath --help' for usage.\n"},
		{[]string{"state"}, "Run 'rath state --help' for usage.\n"},
		{[]string{"start", "--nosuch"}, "Run 'rath start --help' for usage.\n"},
		{[]string{"state", "s1", "--tail", "-1"}, ""},                 // the message names the flag and its range
		{[]string{"start", "--workflow", "testdata/nosuch.yaml"}, ""}, // a file, not the command line
		{[]string{"state", "nosuch"}, ""},                             // not a usage error at all
	} {
		r := rath(t, url, tc.args...)
		hinted := strings.Contains(r.stderr, "--help' for usage")
		if tc.help != "" && (r.code != exitUsage || !strings.HasSuffix(r.stderr, tc.help)) || tc.help == "" && hinted {
			t.Errorf("rath %s: exit %d, stderr %q; want the pointer to --help %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.help)
		}
	}
}
