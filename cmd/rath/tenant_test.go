package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// Two tenants' users, each with a credentials file made by "rath creds
// add": each works its own sessions from the command line, and another
// tenant's session does not exist for it — not in ls, state, log, watch,
// export or verify (exit 3, not found).
func TestTenantsFromTheCommandLine(t *testing.T) {
	url := startLedger(t)
	dir := natstest.CredsDir(t, url)
	add := func(tenant, user string) string {
		t.Helper()
		r := rathWith(env{}, "creds", "add", "--dir", dir, "--tenant", tenant, "--user", user)
		if r.code != exitOK || !strings.Contains(r.stdout, tenant+"/"+user) || !strings.Contains(r.stdout, "nkey: U") {
			t.Fatalf("creds add %s/%s: exit %d, stdout %q, stderr %q", tenant, user, r.code, r.stdout, r.stderr)
		}
		// The server learns of the identity as rath up's SIGHUP would have it.
		natstest.ConnectUser(t, url, events.Principal{Tenant: tenant, User: user})
		return auth.UserPath(dir, events.Principal{Tenant: tenant, User: user})
	}
	alice, bob := add("acme", "alice"), add("globex", "bob")
	for _, bad := range [][2]string{{"rath", "mallory"}, {"Acme", "alice"}, {"acme", "al.ice"}, {"", "alice"}, {"acme", ""}} {
		r := rathWith(env{}, "creds", "add", "--dir", dir, "--tenant", bad[0], "--user", bad[1])
		if r.code != exitUsage || !strings.Contains(r.stderr, "invalid") {
			t.Errorf("creds add --tenant %q --user %q: exit %d, stderr %q; want %d naming the invalid name", bad[0], bad[1], r.code, r.stderr, exitUsage)
		}
	}
	as := func(creds string, args ...string) result {
		return rathWith(env{}, append([]string{"--nats", url, "--creds", creds, "--timeout", "5s"}, args...)...)
	}
	if r := as(alice, "start", "--id", "a1", "--task", "acme's work"); r.code != exitOK {
		t.Fatalf("alice starts a1: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := as(alice, "state", "a1"); r.code != exitOK || !strings.Contains(r.stdout, "acme's work") {
		t.Fatalf("alice reads a1: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := as(bob, "ls"); r.code != exitOK || strings.Contains(r.stdout, "a1") {
		t.Errorf("bob lists: exit %d, stdout %q; want no a1", r.code, r.stdout)
	}
	out := filepath.Join(t.TempDir(), "dossier")
	for _, args := range [][]string{
		{"state", "a1"},
		{"log", "a1"},
		{"verify", "a1"},
		{"export", "a1", "--out", out},
		{"emit", "a1", "rath.session.closed", "--data", `{"reason":"mine now"}`},
	} {
		r := as(bob, args...)
		if r.code != exitNotFound || !strings.Contains(r.stderr, "a1") {
			t.Errorf("bob %s: exit %d, stderr %q; want %d, not found", strings.Join(args, " "), r.code, r.stderr, exitNotFound)
		}
	}
	if r := as(alice, "state", "a1"); r.code != exitOK || !strings.Contains(r.stdout, "active") {
		t.Errorf("a1 after bob: exit %d, stdout %q", r.code, r.stdout)
	}
}
