package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/bind"
	"github.com/openrath/rath/pkg/natstest"
)

// runEnv runs rath in-process with the environment e as main would fill it:
// no --nats and no --creds but those in args.
func runEnv(e env, args ...string) result {
	var out, errb bytes.Buffer
	e.Args, e.Stdin, e.Stdout, e.Stderr = args, strings.NewReader(""), &out, &errb
	code := execute(context.Background(), e)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// copyCreds lays out the credentials of the test server at url as rath up
// keeps them in its working directory dir: dir/.rath/data/creds.
func copyCreds(t *testing.T, url, dir string) string {
	t.Helper()
	creds := filepath.Join(dir, defaultCredsDir)
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, r := range auth.Roles() {
		b, err := os.ReadFile(natstest.CredsFile(t, url, r))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(creds, auth.FileName(r)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return creds
}

// Commands run below rath up's directory find its credentials, as git
// finds .git; elsewhere each says in one message how to point at them, and
// doctor fails when it cannot reach the runtime.
func TestDataDirectory(t *testing.T) {
	url := startLedger(t)
	up := t.TempDir() // where "rath up" runs
	creds := copyCreds(t, url, up)
	below := filepath.Join(up, "src", "pkg")
	if err := os.MkdirAll(below, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Chdir(below)
	if r := runEnv(env{}, "--nats", url, "ls"); r.code != exitOK {
		t.Errorf("ls below rath up's directory: %+v, want exit 0", r)
	}
	r := runEnv(env{}, "--nats", url, "doctor")
	if r.code != exitOK || !strings.Contains(r.stdout, "(as "+filepath.Join(creds, "admin.nk")+"):") || !strings.Contains(r.stdout, "the admin role's permissions exactly") {
		t.Errorf("doctor below rath up's directory: %+v, want it checked as rath up's admin", r)
	}
	if r := runEnv(env{}, "creds", "add", "--tenant", "acme", "--user", "alice"); r.code != exitOK {
		t.Errorf("creds add below rath up's directory: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(creds, "tenants", "acme", "alice.nk")); err != nil {
		t.Errorf("creds add below rath up's directory wrote no file in its creds: %v", err)
	}

	t.Chdir(t.TempDir()) // elsewhere
	r = runEnv(env{}, "--nats", url, "doctor")
	if r.code != exitDenied || !strings.Contains(r.stdout, "FAIL  refused the connection, nothing checked: NATS at "+url+" requires credentials") ||
		!strings.Contains(r.stdout, "pass --creds DIR/.rath/data/creds/client.nk") ||
		r.stderr != "rath: doctor: NATS at "+url+" refused the connection (above)\n" {
		t.Errorf("doctor outside rath up's directory: %+v, want exit %d saying how to point at its credentials", r, exitDenied)
	}
	if r := runEnv(env{}, "--nats", "nats://127.0.0.1:1", "doctor"); r.code != exitUnavailable ||
		!strings.Contains(r.stdout, "FAIL  not reachable, nothing checked: no NATS server at nats://127.0.0.1:1") ||
		!strings.Contains(r.stdout, "Start it (rath up), or name the server with --nats URL") {
		t.Errorf("doctor with no NATS: %+v, want exit %d saying to start one", r, exitUnavailable)
	}
	r = runEnv(env{}, "creds", "add", "--tenant", "acme", "--user", "bob")
	if r.code != exitDenied || strings.Count(r.stderr, "\n") != 1 ||
		!strings.Contains(r.stderr, "no credentials directory of rath up (.rath/data/creds) here or in a parent directory") ||
		!strings.Contains(r.stderr, "pass --dir DIR/.rath/data/creds") {
		t.Errorf("creds add outside rath up's directory: %+v, want one line saying how to point at it", r)
	}

	// A file the user named: the reason first, and no advice to name one.
	r = runEnv(env{}, "--nats", url, "--creds", "nosuch.creds", "ls")
	if r.code != exitDenied || !strings.HasPrefix(r.stderr, "rath: no credentials file nosuch.creds (named by --creds): ") ||
		strings.Contains(r.stderr, "pass --creds") || strings.Contains(r.stderr, "--help") {
		t.Errorf("--creds nosuch.creds: %+v", r)
	}
	bad := filepath.Join(t.TempDir(), "bad.creds")
	if err := os.WriteFile(bad, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runEnv(env{Creds: bad}, "--nats", url, "ls")
	if r.code != exitDenied || !strings.HasPrefix(r.stderr, "rath: unusable credentials file "+bad+": ") || !strings.Contains(r.stderr, "(named by RATH_CREDS): ") ||
		strings.Contains(r.stderr, "set RATH_CREDS") {
		t.Errorf("RATH_CREDS=%s: %+v", bad, r)
	}
}

// The credentials directory of a rath up process is read from its command
// line and working directory.
func TestUpCredsDir(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Join(dir, ".rath", "data", "creds"), filepath.Join(dir, "d", "creds"), filepath.Join(dir, "c")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "client.nk"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rath", "up"}, filepath.Join(dir, ".rath", "data", "creds")},
		{[]string{"/tmp/go-build1/b001/exe/rath", "--json", "up", "--listen", "127.0.0.1:4223"}, filepath.Join(dir, ".rath", "data", "creds")},
		{[]string{"rath", "--nats", "nats://x:4222", "up", "--data", "d"}, filepath.Join(dir, "d", "creds")},
		{[]string{"rath", "up", "--data=d", "--creds-dir", filepath.Join(dir, "c")}, filepath.Join(dir, "c")},
		{[]string{"rath", "up", "--data", "nowhere"}, ""},
		{[]string{"rath", "ls"}, ""},
		{[]string{"nats-server", "-js"}, ""},
	} {
		if got := upCredsDir(bind.Process{PID: 1, Args: tc.args, Dir: dir}); got != tc.want {
			t.Errorf("credentials directory of %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}
