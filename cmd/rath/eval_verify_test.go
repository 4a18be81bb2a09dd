package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// An eval's report verifies offline with the ledger's pinned key; a report
// whose grade, head or key was changed after it was written does not (exit
// 5), and the problem is named.
func TestEvalReportVerifies(t *testing.T) {
	rt, _ := evalRuntime(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "report")
	if r := rath(t, rt.URL, "eval", "testdata/eval/tasks.yaml", "--runs", "2", "--id", "ev-verify", "--out", out); r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var keys api.Keys
	r := rath(t, rt.URL, "verify", "--show-key", "--json")
	decode(t, r.stdout, &keys)
	pinned := filepath.Join(dir, "ledger.pub")
	if err := os.WriteFile(pinned, []byte(keys.Keys[0].PEM), 0o644); err != nil {
		t.Fatal(err)
	}
	// Offline: no NATS URL that answers.
	offline := "nats://127.0.0.1:1"
	if r := rath(t, offline, "verify", "--eval-report", out, "--key", pinned); r.code != exitOK ||
		r.stdout != "OK eval ev-verify: 4 runs, 4 heads signed by the pinned key, every summary what its runs give\n" {
		t.Fatalf("verify --eval-report: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	tamper := func(name string, fn func(r *eval.Report)) string {
		t.Helper()
		rep, err := eval.LoadReport(out)
		if err != nil {
			t.Fatal(err)
		}
		fn(rep)
		data, _ := json.Marshal(rep)
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		fn   func(r *eval.Report)
		want string
	}{
		{"passed", func(r *eval.Report) { r.Tasks[1].Runs[0].Passed, r.Tasks[1].Runs[0].Failure = true, nil }, "task gives-up: its summary is not what its runs give"},
		{"head", func(r *eval.Report) { r.Tasks[0].Runs[1].Head-- }, "task answers try 2 (session "},
	} {
		r := rath(t, offline, "verify", "--eval-report", tamper(tc.name, tc.fn), "--key", pinned)
		if r.code != exitBroken || !strings.Contains(r.stdout, "BROKEN eval ev-verify:") || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("a report with its %s changed: exit %d, stdout %q", tc.name, r.code, r.stdout)
		}
	}
	other, _ := events.GenerateSigningKey()
	otherPEM, _ := events.MarshalPublicKey(other.Public())
	otherFile := filepath.Join(dir, "other.pub")
	if err := os.WriteFile(otherFile, otherPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := rath(t, offline, "verify", "--eval-report", out, "--key", otherFile); r.code != exitBroken || !strings.Contains(r.stdout, "signed by an unknown key") {
		t.Errorf("with another key: exit %d, stdout %q", r.code, r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--eval-report", out}, "--eval-report needs --key"},
		{[]string{"verify", "--eval-report", pinned, "--key", pinned}, "--eval-report: "},
		{[]string{"verify", "--eval-report", filepath.Join(dir, "none"), "--key", pinned}, "no such file"},
	} {
		if r := rath(t, offline, tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
	}
}
