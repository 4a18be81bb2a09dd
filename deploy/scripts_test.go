package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// fakeNATS is a stand-in for the nats CLI (not installed here): it logs each
// call, lists streams, and writes what "stream backup" would.
const fakeNATS = `#!/usr/bin/env bash
set -euo pipefail
echo "$*" >>"$FAKE_NATS_LOG"
while [ $# -gt 0 ]; do case "$1" in --server|--nkey) shift 2 ;; *) break ;; esac; done
case "$1 $2" in
  "stream ls") printf 'RATH_DEAD\nKV_rath-heads\nRATH_SESSIONS\nOBJ_rath-blobs\nRATH_SIGS\nRATH_MEMORY\n' ;;
  "stream backup") mkdir -p "$4"; echo '{}' >"$4/backup.json" ;;
  "stream restore") ;;
  *) echo "fake nats: unexpected $*" >&2; exit 1 ;;
esac
`

// TestBackupAndRestoreScripts runs scripts/backup-streams.sh and
// restore-streams.sh against a fake nats CLI: the streams in dependency order
// with the admin identity, and a clear message when the CLI is missing. The
// real CLI against a real server was never tried here.
func TestBackupAndRestoreScripts(t *testing.T) {
	m := credentials(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "nats"), []byte(fakeNATS), 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "calls")
	backup := filepath.Join(t.TempDir(), "backup")
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"FAKE_NATS_LOG="+logFile, "RATH_ADMIN_CREDS="+filepath.Join(m.dir, "admin.nk"), "NATS_URL=nats://n1:4222")
	run := func(script string, env []string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(repoRoot, "scripts", script), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("backup-streams.sh", env, backup); err != nil {
		t.Fatalf("backup-streams.sh: %v\n%s", err, out)
	}
	order, err := os.ReadFile(filepath.Join(backup, "streams.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"KV_rath-heads", "RATH_SESSIONS", "RATH_SIGS", "OBJ_rath-blobs", "RATH_DEAD", "RATH_MEMORY"}
	if got := strings.Fields(string(order)); !slices.Equal(got, want) {
		t.Errorf("backup order %v, want %v (heads before the log, the log before its signatures and blobs)", got, want)
	}
	calls, _ := os.ReadFile(logFile)
	if !strings.Contains(string(calls), "--server nats://n1:4222 --nkey "+filepath.Join(m.dir, "admin.nk")+" stream backup RATH_SESSIONS "+filepath.Join(backup, "RATH_SESSIONS")+" --check --no-progress") {
		t.Errorf("backup calls:\n%s", calls)
	}
	if out, err := run("backup-streams.sh", env, backup); err == nil || !strings.Contains(out, "is not empty") {
		t.Errorf("backup into a used directory: %v\n%s", err, out)
	}

	os.Remove(logFile)
	if out, err := run("restore-streams.sh", append(env, "REPLICAS=3"), backup); err != nil {
		t.Fatalf("restore-streams.sh: %v\n%s", err, out)
	}
	calls, _ = os.ReadFile(logFile)
	var restored []string
	for line := range strings.Lines(string(calls)) {
		f := strings.Fields(line)
		if len(f) < 7 || f[4] != "stream" || f[5] != "restore" || !strings.HasSuffix(line, "--no-progress --replicas 3\n") {
			t.Errorf("restore call %q", line)
			continue
		}
		restored = append(restored, filepath.Base(f[6]))
	}
	if !slices.Equal(restored, want) {
		t.Errorf("restore order %v, want %v", restored, want)
	}

	noNATS := append(os.Environ(), "PATH=/usr/bin:/bin", "RATH_ADMIN_CREDS="+filepath.Join(m.dir, "admin.nk"))
	for _, script := range []string{"backup-streams.sh", "restore-streams.sh"} {
		if out, err := run(script, noNATS, filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(out, "the nats CLI is not installed") {
			t.Errorf("%s without nats: %v\n%s", script, err, out)
		}
	}
}

// TestRotateLedgerKeyScript rotates a copy of a minted key directory: after
// prepare and commit, ledger.key is a new key the ledger reads, the old
// public key stays as ledger-<time>.pub for --trust, and the old private key
// has left the mounted directory.
func TestRotateLedgerKeyScript(t *testing.T) {
	m := credentials(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.CopyFS(keys, os.DirFS(filepath.Join(m.dir, "keys"))); err != nil {
		t.Fatal(err)
	}
	oldPub, _ := os.ReadFile(filepath.Join(keys, "ledger.pub"))
	run := func(step string) string {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "rotate-ledger-key.sh"), step, keys).CombinedOutput()
		if err != nil {
			t.Fatalf("rotate-ledger-key.sh %s: %v\n%s", step, err, out)
		}
		return string(out)
	}
	if out := run("prepare"); !strings.Contains(out, "RATH_LEDGER_TRUST=/etc/rath/keys/ledger-next.pub") {
		t.Errorf("prepare prints no trust of the next key:\n%s", out)
	}
	out := run("commit")
	retired, _ := filepath.Glob(filepath.Join(keys, "ledger-*.pub"))
	if len(retired) != 1 {
		t.Fatalf("after commit: retired public keys %v, want one", retired)
	}
	if b, _ := os.ReadFile(retired[0]); string(b) != string(oldPub) {
		t.Errorf("%s is not the old public key", retired[0])
	}
	if !strings.Contains(out, "RATH_LEDGER_TRUST=/etc/rath/keys/"+filepath.Base(retired[0])) {
		t.Errorf("commit prints no trust of the retired key:\n%s", out)
	}
	key, err := os.ReadFile(filepath.Join(keys, "ledger.key"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := events.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(keys, "ledger.pub"))
	p, err := events.ParsePublicKey(pub)
	if err != nil || p.ID != k.Public().ID || string(pub) == string(oldPub) {
		t.Errorf("ledger.pub is not the new key's (%v)", err)
	}
	if keysLeft, _ := filepath.Glob(filepath.Join(keys, "*.key")); len(keysLeft) != 1 {
		t.Errorf("private keys left in the mounted directory: %v", keysLeft)
	}
	if old, _ := filepath.Glob(filepath.Join(filepath.Dir(keys), "retired-keys", "ledger-*.key")); len(old) != 1 {
		t.Errorf("the old private key is not in retired-keys: %v", old)
	}
}
