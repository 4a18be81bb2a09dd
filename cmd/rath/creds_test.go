package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// rath creds token add prints the token alone on stdout and a note on
// stderr; the token looks up as its user; ls lists it (never the token);
// rm revokes it. Bad command lines are exit 2, refusals exit 1, each
// naming the problem.
func TestCredsToken(t *testing.T) {
	set, err := auth.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := set.Dir
	if r := rathWith(env{}, "creds", "add", "--dir", dir, "--tenant", "acme", "--user", "alice"); r.code != exitOK {
		t.Fatalf("creds add: %+v", r)
	}
	alice := events.Principal{Tenant: "acme", User: "alice"}
	tokens := auth.OpenTokens(auth.TokensPath(dir))

	r := rathWith(env{}, "creds", "token", "add", "--dir", dir, "--user", "acme/alice", "--name", "laptop")
	token := strings.TrimSuffix(r.stdout, "\n")
	if r.code != exitOK || !strings.HasPrefix(token, auth.TokenPrefix) || strings.ContainsAny(token, " \n") ||
		!strings.Contains(r.stderr, "shown this once") || !strings.Contains(r.stderr, "Authorization: Bearer") ||
		!strings.Contains(r.stderr, "laptop") || strings.Contains(r.stderr, token) {
		t.Fatalf("token add: %+v; want the token alone on stdout, a note without it on stderr", r)
	}
	if p, name, err := tokens.Lookup(token); err != nil || p != alice || name != "laptop" {
		t.Fatalf("Lookup of the printed token: %s %q %v", p, name, err)
	}

	r = rathWith(env{}, "--json", "creds", "token", "add", "--dir", dir, "--user", "acme/alice")
	var added struct{ Name, User, Token string }
	if err := json.Unmarshal([]byte(r.stdout), &added); err != nil || r.code != exitOK || added.User != "acme/alice" || !strings.HasPrefix(added.Name, "acme-alice-") {
		t.Fatalf("token add --json: %+v (%v)", r, err)
	}
	if p, name, err := tokens.Lookup(added.Token); err != nil || p != alice || name != added.Name {
		t.Fatalf("Lookup of the --json token: %s %q %v", p, name, err)
	}

	r = rathWith(env{}, "creds", "token", "ls", "--dir", dir)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "NAME") || !strings.Contains(r.stdout, "laptop") ||
		!strings.Contains(r.stdout, added.Name) || !strings.Contains(r.stdout, "acme/alice") ||
		strings.Contains(r.stdout, token) || strings.Contains(r.stdout, added.Token) {
		t.Errorf("token ls: %+v", r)
	}
	r = rathWith(env{}, "--json", "creds", "token", "ls", "--dir", dir)
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != exitOK || len(rows) != 2 || rows[1]["name"] != "laptop" || rows[1]["user"] != "acme/alice" || len(rows[1]) != 3 {
		t.Errorf("token ls --json: %+v (%v)", r, err)
	}
	b, err := os.ReadFile(auth.TokensPath(dir))
	if err != nil || strings.Contains(string(b), token) {
		t.Errorf("%s holds the token (%v)", auth.TokensPath(dir), err)
	}

	if r := rathWith(env{}, "creds", "token", "rm", "--dir", dir, "laptop"); r.code != exitOK || r.stdout != "revoked laptop\n" {
		t.Errorf("token rm: %+v", r)
	}
	if _, _, err := tokens.Lookup(token); err == nil {
		t.Error("the revoked token still looks up")
	}
	if r := rathWith(env{}, "creds", "token", "ls", "--dir", dir); strings.Contains(r.stdout, "laptop") {
		t.Errorf("token ls after rm: %+v", r)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"add"}, exitUsage, "--user"},
		{[]string{"add", "--user", "acme"}, exitUsage, "tenant/user"},
		{[]string{"add", "--user", "rath/admin"}, exitUsage, "reserved"},
		{[]string{"add", "--user", "acme/../alice"}, exitUsage, "invalid"},
		{[]string{"add", "--user", "acme/alice", "--name", "Bad Name"}, exitUsage, "invalid token name"},
		{[]string{"add", "--user", "acme/nobody"}, exitError, "no such user"},
		{[]string{"add", "--user", "acme/alice", "--name", added.Name}, exitError, "exists already"},
		{[]string{"add", "--user", "acme/alice", "stray"}, exitUsage, "unknown command"},
		{[]string{"rm"}, exitUsage, "accepts 1 arg"},
		{[]string{"rm", "laptop"}, exitError, `"laptop"`},
		{[]string{"rm", "../gateway-tokens"}, exitUsage, "invalid token name"},
	} {
		args := append([]string{"creds", "token"}, c.args...)
		r := rathWith(env{}, append(args, "--dir", dir)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("rath %s: %+v; want exit %d naming %q, nothing on stdout", strings.Join(args, " "), r, c.code, c.want)
		}
	}

	// A malformed file is named, with its line, by every command.
	if err := os.WriteFile(auth.TokensPath(dir), append(b, "not json\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ls"}, {"add", "--user", "acme/alice"}, {"rm", added.Name}} {
		r := rathWith(env{}, append(append([]string{"creds", "token"}, args...), "--dir", dir)...)
		if r.code != exitError || !strings.Contains(r.stderr, auth.TokensPath(dir)+":3") || r.stdout != "" {
			t.Errorf("rath creds token %s on a malformed file: %+v", strings.Join(args, " "), r)
		}
	}
}
