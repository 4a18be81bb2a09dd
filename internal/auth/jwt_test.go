package auth_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// A NATS user credentials file is read for the principal its tag names:
// a tenant's user as a client (with the client's reply prefix), rath/<role>
// as that role; by path and by content alike.
func TestUserJWTFile(t *testing.T) {
	op := natstest.StartOperator(t)
	alice := events.Principal{Tenant: "acme", User: "alice"}
	path := op.CredsFile(t, "alice", auth.RoleClient, alice)
	_, id, err := auth.Options(path)
	if err != nil {
		t.Fatal(err)
	}
	if !id.JWT || id.Role != auth.RoleClient || id.Principal != alice || id.Path != path || !strings.HasPrefix(id.PublicKey, "U") {
		t.Errorf("identity of %s: %+v", path, id)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts, id2, err := auth.OptionsFrom(b, "upload")
	if err != nil || id2.Principal != alice || id2.PublicKey != id.PublicKey {
		t.Fatalf("OptionsFrom: %+v, %v", id2, err)
	}
	var o nats.Options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.InboxPrefix != alice.ReplyPrefix() || o.UserJWT == nil {
		t.Errorf("options: inbox prefix %q (want %q), user JWT callback set %v", o.InboxPrefix, alice.ReplyPrefix(), o.UserJWT != nil)
	}
	// The options held in memory (the console's sign-in) authenticate.
	nc, err := nats.Connect(op.URL(), opts...)
	if err != nil {
		t.Fatalf("connect with OptionsFrom's options: %v", err)
	}
	nc.Close()
	_, led, err := auth.Options(op.CredsFile(t, "ledger", auth.RoleLedger, auth.RoleLedger.Principal()))
	if err != nil || led.Role != auth.RoleLedger || led.Principal != events.Service("ledger") {
		t.Errorf("ledger's JWT: %+v, %v", led, err)
	}
}

// Hostile or broken NATS credentials files are refused before any
// connection, each with a message naming the file and the problem.
func TestUserJWTFileRefused(t *testing.T) {
	op := natstest.StartOperator(t)
	alice := events.Principal{Tenant: "acme", User: "alice"}
	good := op.Creds(t, auth.RoleClient, alice)
	other := op.Creds(t, auth.RoleClient, events.Principal{Tenant: "acme", User: "bob"})
	untag := func(c *jwt.UserClaims) { c.Tags = nil }
	cases := []struct {
		name string
		body []byte
		want []string
	}{
		{"garbled", garble(t, good), []string{"does not decode"}},
		{"untagged", op.Creds(t, auth.RoleClient, alice, untag), []string{"names no Rath principal", "--tag rath-principal:<tenant>/<user>"}},
		{"two-tags", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Tags.Add("rath-principal:acme/bob") }), []string{"2 Rath principals"}},
		{"bad-tenant", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Tags = jwt.TagList{"rath-principal:acme"} }), []string{"rath-principal:", "tenant/user"}},
		{"service-not-a-role", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Tags = jwt.TagList{"rath-principal:rath/root"} }), []string{"rath/root", "service role"}},
		{"service-as-client", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Tags = jwt.TagList{"rath-principal:rath/client"} }), []string{"rath/client", "service role"}},
		{"seed-of-another", swapSeed(t, good, other), []string{"the seed is of user", "another user's seed"}},
		{"expired", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Expires = time.Now().Add(-time.Hour).Unix() }), []string{"expired at"}},
		{"not-yet", op.Creds(t, auth.RoleClient, alice, func(c *jwt.UserClaims) { c.NotBefore = time.Now().Add(time.Hour).Unix() }), []string{"not valid before"}},
		{"no-seed", good[:bytes.Index(good, []byte("-----BEGIN USER NKEY SEED"))], []string{"seed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.name+".creds")
			if err := os.WriteFile(path, c.body, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := auth.Options(path)
			check := func(err error, name string) {
				t.Helper()
				if !errors.Is(err, auth.ErrBadCredentials) || !strings.Contains(err.Error(), name) {
					t.Fatalf("%s: %v, want %v naming %s", c.name, err, auth.ErrBadCredentials, name)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %v, want it to say %q", c.name, err, w)
					}
				}
			}
			check(err, path)
			_, _, err = auth.OptionsFrom(c.body, "sign-in upload")
			check(err, "sign-in upload")
		})
	}
	_, _, err := auth.OptionsFrom(op.Creds(t, auth.RoleClient, alice, untag), "x")
	if !errors.Is(err, auth.ErrNoPrincipalTag) {
		t.Errorf("an untagged JWT: %v, want %v", err, auth.ErrNoPrincipalTag)
	}
	// A JWT file is not one of a Rath credentials directory's seeds.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, auth.FileName(auth.RoleLedger)), op.Creds(t, auth.RoleLedger, auth.RoleLedger.Principal()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Ensure(dir); !errors.Is(err, auth.ErrBadCredentials) || !strings.Contains(err.Error(), "user JWT") {
		t.Errorf("Ensure with a JWT file as the ledger's seed: %v", err)
	}
}

// garble flips characters in the middle of the JWT's payload.
func garble(t *testing.T, creds []byte) []byte {
	t.Helper()
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	mid := len(token) / 2
	bad := token[:mid] + strings.Map(func(r rune) rune {
		if r == 'A' {
			return 'B'
		}
		return 'A'
	}, token[mid:mid+8]) + token[mid+8:]
	return bytes.Replace(creds, []byte(token), []byte(bad), 1)
}

// swapSeed is creds with the seed of from.
func swapSeed(t *testing.T, creds, from []byte) []byte {
	t.Helper()
	seed := func(b []byte) []byte {
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		return s
	}
	return bytes.Replace(creds, seed(creds), seed(from), 1)
}

// The seed files of an earlier Rath, <name>.creds, keep working: read
// under their new name until rath up (Ensure) renames them, once.
func TestLegacyCredsNames(t *testing.T) {
	dir := t.TempDir()
	set, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	alice := events.Principal{Tenant: "acme", User: "alice"}
	user, err := set.AddUser(alice)
	if err != nil {
		t.Fatal(err)
	}
	// Lay the directory out as an earlier Rath did.
	for _, id := range set.Identities() {
		old := strings.TrimSuffix(id.Path, ".nk") + ".creds"
		if err := os.Rename(id.Path, old); err != nil {
			t.Fatal(err)
		}
	}
	_, id, err := auth.Options(filepath.Join(dir, auth.FileName(auth.RoleClient)))
	if err != nil || id.PublicKey != set.Identity(auth.RoleClient).PublicKey || filepath.Base(id.Path) != "client.creds" {
		t.Fatalf("client.nk of a directory holding client.creds: %+v, %v", id, err)
	}
	loaded, err := auth.Load(dir)
	if err != nil || len(loaded.Users()) != 1 || loaded.Users()[0].PublicKey != user.PublicKey || len(loaded.Renamed) != 0 {
		t.Fatalf("Load of an earlier Rath's directory: %v, %+v", err, loaded)
	}
	again, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Renamed) != len(auth.Roles())+1 {
		t.Errorf("Ensure renamed %v, want every role's file and the user's", again.Renamed)
	}
	for _, id := range again.Identities() {
		if filepath.Ext(id.Path) != ".nk" || id.PublicKey != set.Identity(id.Role).PublicKey && id.Role != auth.RoleClient {
			t.Errorf("after the rename: %+v", id)
		}
	}
	if old, _ := filepath.Glob(filepath.Join(dir, "*.creds")); len(old) != 0 {
		t.Errorf("left behind: %v", old)
	}
	if third, err := auth.Ensure(dir); err != nil || len(third.Renamed) != 0 {
		t.Errorf("a second Ensure: %v, renamed %v", err, third.Renamed)
	}
	if _, err := auth.Mint(dir); err == nil {
		t.Error("Mint into a directory with credentials succeeded")
	}
}

// Every role's user JWT, with its template's permissions, fits well within
// the max_control_line deploy/nats-operator asks of the server.
func TestUserJWTFitsControlLine(t *testing.T) {
	op := natstest.StartOperator(t)
	for _, r := range auth.Roles() {
		token, err := jwt.ParseDecoratedJWT(op.Creds(t, r, r.Principal()))
		if err != nil {
			t.Fatal(err)
		}
		if len(token) > auth.MaxControlLine/2 {
			t.Errorf("the user JWT of %s is %d bytes: raise auth.MaxControlLine (%d) and the README's max_control_line", r, len(token), auth.MaxControlLine)
		}
	}
}
