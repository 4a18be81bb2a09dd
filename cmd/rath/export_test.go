package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// exportTree appends the dossier test tree and returns the NATS URL.
func exportTree(t *testing.T) (string, map[string]string) {
	t.Helper()
	url := startLedger(t)
	c, err := client.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return url, dt.Tree(t, c)
}

func TestExportAndVerifyDossier(t *testing.T) {
	url, _ := exportTree(t)
	dir := filepath.Join(t.TempDir(), "dossier")
	out := ok(t, url, "export", dt.Accepted, "--out", dir)
	if !strings.Contains(out, "3 branches, 40 events, final answer fork-1@7 (fix-b)\n") {
		t.Errorf("export printed %q", out)
	}
	for _, f := range []string{dossier.FileJSON, dossier.FileSchema, dossier.FileMarkdown, dossier.FileSVG, dossier.FileHTML, "events/fix.jsonl", "events/fix-b.jsonl", "events/fix-c.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("export wrote no %s: %v", f, err)
		}
	}

	// Offline: a NATS URL nobody listens on.
	const dead = "nats://127.0.0.1:1"
	got := ok(t, dead, "verify", "--dossier", dir)
	if !strings.HasPrefix(got, "OK dossier "+dir+": root fix, 3 branches, 40 events, every event signed by ") ||
		!strings.Contains(got, "(named by the dossier itself: pin the ledger's key with --key)\n") || !strings.Contains(got, "  fix-b head 25 ") {
		t.Errorf("verify --dossier printed %q", got)
	}

	// The ledger's key, pinned: the dossier holds. Another key: every
	// signature fails, the first one is named.
	var keys api.Keys
	if err := json.Unmarshal([]byte(ok(t, url, "verify", "--show-key", "--json")), &keys); err != nil || len(keys.Keys) != 1 {
		t.Fatalf("show-key: %v %+v", err, keys)
	}
	ledgerPub := filepath.Join(t.TempDir(), "ledger.pub")
	os.WriteFile(ledgerPub, []byte(keys.Keys[0].PEM), 0o644)
	if got := ok(t, dead, "verify", "--dossier", dir, "--key", ledgerPub); !strings.Contains(got, "every event signed by "+keys.Current+" (pinned keys)") {
		t.Errorf("pinned verify printed %q", got)
	}
	other, _ := events.GenerateSigningKey()
	otherPEM, _ := events.MarshalPublicKey(other.Public())
	otherPub := filepath.Join(t.TempDir(), "other.pub")
	os.WriteFile(otherPub, otherPEM, 0o644)
	if r := rath(t, dead, "verify", "--dossier", dir, "--key", otherPub); r.code != exitBroken || !strings.Contains(r.stdout, "at 1: signature: signed by an unknown key") {
		t.Errorf("verify with another pinned key: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// An edited page fails: the pages are rendered again from the events.
	edited := filepath.Join(t.TempDir(), "edited")
	if err := os.CopyFS(edited, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(edited, dossier.FileMarkdown)
	page, _ := os.ReadFile(md)
	os.WriteFile(md, []byte(strings.Replace(string(page), "fix-b", "fix-c", 1)), 0o644)
	if r := rath(t, dead, "verify", "--dossier", edited); r.code != exitBroken || !strings.Contains(r.stdout, "dossier.md differs from the page the verified events render") {
		t.Errorf("edited dossier.md: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	p := filepath.Join(dir, "events", "fix-b.jsonl")
	body, _ := os.ReadFile(p)
	if err := os.WriteFile(p, []byte(strings.Replace(string(body), "wrote calc.go", "wrote calx.go", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := rath(t, dead, "verify", "--dossier", dir)
	if r.code != exitBroken || !strings.HasPrefix(r.stdout, "BROKEN fix-b at 17: hash mismatch: stored ") || !strings.HasSuffix(r.stdout, " (event altered)\n") {
		t.Errorf("tampered dossier: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := rath(t, dead, "audit", "final", "--dossier", dir); r.code != exitBroken {
		t.Errorf("audit of a tampered dossier: exit %d, %s", r.code, r.stderr)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"verify", "--dossier", t.TempDir()}, exitError, "not a rath dossier"},
		{[]string{"verify", "--dossier", dir, "fix"}, exitUsage, "unknown command"},
		{[]string{"export", "fix"}, exitUsage, "--out DIR is required"},
		{[]string{"export", "nope", "--out", t.TempDir()}, exitNotFound, "session_not_found"},
	} {
		r := rath(t, url, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("rath %s: exit %d, stderr %q; want %d saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.says)
		}
	}
	notEmpty := t.TempDir()
	os.WriteFile(filepath.Join(notEmpty, "keep.txt"), []byte("mine"), 0o644)
	if r := rath(t, url, "export", "fix", "--out", notEmpty); r.code != exitUsage || !strings.Contains(r.stderr, "holds no dossier") {
		t.Errorf("export into a non-empty directory: exit %d, %s", r.code, r.stderr)
	}
}

// A session no branch of which produced a final answer says so in words:
// not "final answer -".
func TestExportWithoutFinalAnswer(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "open", "--task", "nothing decided yet")
	out := ok(t, url, "export", "open", "--out", filepath.Join(t.TempDir(), "dossier"))
	if !strings.Contains(out, "1 branch, 1 event, no final answer\n") || strings.Contains(out, "final answer -") {
		t.Errorf("export printed %q", out)
	}
}

func TestAuditQuestions(t *testing.T) {
	url, ids := exportTree(t)
	dir := filepath.Join(t.TempDir(), "d")
	ok(t, url, "export", dt.Root, "--out", dir)
	const dead = "nats://127.0.0.1:1"

	// Each question, from the ledger and from the dossier offline: the same answer.
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"final", []string{"final"}, []string{"final answer: branch fork-1@7 (fix-b)\n", "outcome:    succeeded", "closed:     fork-1@7 seq 25 (event " + ids["close"],
			"validation: tests passed at fork-1@7 seq 23 (event " + ids["validation-passed"]}},
		{"recalled at a step", []string{"recalled", "--branch", "fix-b", "--step", "11"}, []string{
			"fork-1@7 (fix-b) step 11 (rath.memory.recalled), turn 2 (coder, turn-3, seq 10 to 14): 1 recall",
			"routed at seq 9 by rule retry → agent:coder",
			`query "how not to fix Add"`,
			"fail-1 v1 score 0.8: written at root seq 17, provenance session root: failed_attempt",
			"note-1 v2 score 0.5: written outside this session graph"}},
		// A branch by its name, as the dossier and the demo call it.
		{"recalled in a turn", []string{"recalled", "--branch", "fork-1@7", "--turn", "1"}, []string{"fork-1@7 (fix-b), turn 1 (researcher, turn-1", "recall at root seq 4", "note-1 v2 score 0.91"}},
		{"modified", []string{"modified", "--file", "calc.go"}, []string{
			"root (fix) seq 15: tool call c1 write_file by coder\n",
			"fork-1@7 (fix-b) seq 17: tool call c2 write_file by coder, on the accepted path",
			"  | +\treturn a + b", "commits aaaa111 → cccc333"}},
		{"route", []string{"route", "--branch", "fix-b", "--step", "9", "--route", "agent:coder"}, []string{
			"fork-1@7 (fix-b) seq 9: route agent:coder by rule retry", "reason:     validation failed: try again from before the patch",
			`inputs:     {"counts.validations_failed":1,"event.type":"rath.validation.failed"}`, "candidates: retry, give-up", "routed:     agent coder, turn turn-3",
			"trigger:    event " + ids["validation-failed"]}},
		{"route in force", []string{"route", "--branch", "fix", "--step", "5"}, []string{"root (fix) step 5 is a rath.conversation.chunk.appended; the decision in force was taken at seq 2\nroot seq 2: route agent:researcher", "trigger:    seq 1 rath.session.started"}},
		{"usage", []string{"usage"}, []string{"token usage on the accepted path of fork-1@7 (fix-b): in 407, out 40, 2 calls",
			"agent coder        in 307  out 30  calls 1\n", "agent researcher   in 100  out 10  calls 1\n", "model scripted/m1  in 400  out 40  calls 2\n",
			"segment root 1..7: in 100, out 10, 1 call", "segment fork-1@7 8..25:", "taken in by merges (not counted above): in 50, out 5, 1 call"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := ok(t, url, append(append([]string{"audit"}, tc.args[0], dt.Root), tc.args[1:]...)...)
			offline := ok(t, dead, append(append([]string{"audit"}, tc.args...), "--dossier", dir)...)
			if live != offline {
				t.Errorf("the ledger and the dossier answer differently:\n%s\n---\n%s", live, offline)
			}
			for _, w := range tc.wants {
				if !strings.Contains(offline, w) {
					t.Errorf("answer lacks %q:\n%s", w, offline)
				}
			}
		})
	}

	var final struct {
		Final dossier.Final `json:"final"`
	}
	decode(t, ok(t, dead, "audit", "final", "--dossier", dir, "--json"), &final)
	if final.Final.Branch != dt.Accepted || final.Final.Validation == nil {
		t.Errorf("final --json %+v", final)
	}
	var use dossier.PathUsage
	decode(t, ok(t, url, "audit", "usage", dt.Accepted, "--json"), &use)
	if use.Usage.ByAgent["coder"] != (session.Tokens{In: 307, Out: 30, Calls: 1}) || use.Usage.ByAgent["researcher"] != (session.Tokens{In: 100, Out: 10, Calls: 1}) {
		t.Errorf("usage --json %+v", use.Usage)
	}
	var rec dossier.RecallAnswer
	decode(t, ok(t, url, "audit", "recalled", dt.Accepted, "--step", "11", "--json"), &rec)
	if len(rec.Recalls) != 1 || len(rec.Recalls[0].Items) != 2 || rec.Recalls[0].Items[0].ItemID != "fail-1" {
		t.Errorf("recalled --json %+v", rec)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"audit", "recalled", dt.Accepted, "--step", "99"}, exitNotFound, "no sequence 99"},
		{[]string{"audit", "recalled", dt.Accepted}, exitUsage, "give --step N or --turn K"},
		{[]string{"audit", "route", dt.Accepted, "--branch", "nope", "--step", "2"}, exitNotFound, "no branch nope"},
		{[]string{"audit", "final", dt.Accepted, "--dossier", dir}, exitUsage, "not both"},
		{[]string{"audit", "modified", dt.Accepted}, exitUsage, "--file F is required"},
	} {
		r := rath(t, url, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("rath %s: exit %d, stderr %q; want %d saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.says)
		}
	}
}
