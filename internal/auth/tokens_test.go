package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

var (
	alice = events.Principal{Tenant: "acme", User: "alice"}
	bob   = events.Principal{Tenant: "globex", User: "bob"}
)

// tokenDir is a credentials directory with the users alice and bob.
func tokenDir(t *testing.T) string {
	t.Helper()
	set, err := auth.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []events.Principal{alice, bob} {
		if _, err := set.AddUser(p); err != nil {
			t.Fatal(err)
		}
	}
	return set.Dir
}

// mint mints a token for p and fails the test unless it can.
func mint(t *testing.T, dir string, p events.Principal, name string) string {
	t.Helper()
	token, err := auth.MintToken(dir, p, name)
	if err != nil {
		t.Fatalf("mint %s %q: %v", p, name, err)
	}
	return token
}

// lookup looks token up and fails the test unless it acts as want.
func lookup(t *testing.T, tokens *auth.Tokens, token string, want events.Principal, wantName string) {
	t.Helper()
	p, name, err := tokens.Lookup(token)
	if err != nil || p != want || name != wantName {
		t.Fatalf("Lookup: %s %q %v, want %s %q", p, name, err, want, wantName)
	}
}

// A minted token looks up as its user; the file holds its hash, never the
// token, mode 0600; ListTokens shows it without the hash.
func TestTokenMintLookup(t *testing.T) {
	dir := tokenDir(t)
	token := mint(t, dir, alice, "")
	if !strings.HasPrefix(token, auth.TokenPrefix) || len(token) != len(auth.TokenPrefix)+43 {
		t.Errorf("token %q: want %s and 43 base64url characters", token, auth.TokenPrefix)
	}
	sum := sha256.Sum256([]byte(token))
	digest := hex.EncodeToString(sum[:])
	wantName := "acme-alice-" + digest[:8]
	lookup(t, auth.OpenTokens(auth.TokensPath(dir)), token, alice, wantName)

	named := mint(t, dir, bob, "bob.ci_1")
	if named == token {
		t.Fatal("two mints gave the same token")
	}
	lookup(t, auth.OpenTokens(auth.TokensPath(dir)), named, bob, "bob.ci_1")

	path := filepath.Join(dir, auth.TokensFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), token) || strings.Contains(string(b), strings.TrimPrefix(token, auth.TokenPrefix)) {
		t.Errorf("%s holds the token itself:\n%s", path, b)
	}
	if !strings.Contains(string(b), `"sha256":"`+digest+`"`) || strings.Count(string(b), "\n") != 2 {
		t.Errorf("%s: want one line per token with its sha256:\n%s", path, b)
	}
	list, err := auth.ListTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != wantName || list[0].Principal != alice || list[0].Created.IsZero() ||
		list[1].Name != "bob.ci_1" || list[1].Principal != bob {
		t.Errorf("ListTokens: %+v", list)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+auth.TokensFile+".") && !strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("left over in %s: %s", dir, e.Name())
		}
	}
}

// A revoked token is refused by a Tokens that had loaded it, with no
// reopening; another's token still works; revoking an unknown name is an
// error naming it.
func TestTokenRevoke(t *testing.T) {
	dir := tokenDir(t)
	tokens := auth.OpenTokens(auth.TokensPath(dir))
	gone, kept := mint(t, dir, alice, "gone"), mint(t, dir, alice, "kept")
	lookup(t, tokens, gone, alice, "gone")
	if err := auth.RevokeToken(dir, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tokens.Lookup(gone); !errors.Is(err, auth.ErrUnknownToken) {
		t.Errorf("Lookup of a revoked token: %v, want ErrUnknownToken", err)
	}
	lookup(t, tokens, kept, alice, "kept")
	if err := auth.RevokeToken(dir, "gone"); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("revoke twice: %v, want an error naming the token", err)
	}
	if err := auth.RevokeToken(dir, "nosuch"); err == nil || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("revoke unknown: %v, want an error naming it", err)
	}
	if list, err := auth.ListTokens(dir); err != nil || len(list) != 1 || list[0].Name != "kept" {
		t.Errorf("ListTokens after revoke: %+v, %v", list, err)
	}
}

// Tokens minted after a Tokens loaded the file (or found none) are seen at
// its next Lookup; a missing file is no token; a removed user's tokens are
// refused.
func TestTokensReload(t *testing.T) {
	dir := tokenDir(t)
	first, second := auth.OpenTokens(auth.TokensPath(dir)), auth.OpenTokens(auth.TokensPath(dir))
	stranger := "rath_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, tokens := range []*auth.Tokens{first, second} {
		if _, _, err := tokens.Lookup(stranger); !errors.Is(err, auth.ErrUnknownToken) {
			t.Fatalf("Lookup with no file: %v, want ErrUnknownToken", err)
		}
	}
	a := mint(t, dir, alice, "a")
	lookup(t, first, a, alice, "a")
	b := mint(t, dir, bob, "b")
	lookup(t, first, b, bob, "b")
	lookup(t, second, a, alice, "a")
	lookup(t, second, b, bob, "b")

	if err := os.Remove(auth.TokensPath(dir)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Lookup(a); !errors.Is(err, auth.ErrUnknownToken) {
		t.Errorf("Lookup after the file was removed: %v, want ErrUnknownToken", err)
	}
	c := mint(t, dir, bob, "c")
	lookup(t, first, c, bob, "c")

	if err := os.Remove(auth.UserPath(dir, bob)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Lookup(c); !errors.Is(err, auth.ErrUnknownToken) || !strings.Contains(err.Error(), "globex/bob") {
		t.Errorf("Lookup of a removed user's token: %v, want ErrUnknownToken naming the user", err)
	}
}

// Tokens that are not the file's are refused as unknown, and the error
// never repeats what was presented.
func TestTokenLookupRefusals(t *testing.T) {
	dir := tokenDir(t)
	token := mint(t, dir, alice, "real")
	tokens := auth.OpenTokens(auth.TokensPath(dir))
	flip := []byte(token)
	if flip[len(flip)-1] == 'A' {
		flip[len(flip)-1] = 'B'
	} else {
		flip[len(flip)-1] = 'A'
	}
	other, err := auth.MintToken(tokenDir(t), alice, "real") // the same user and name, another directory
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, token string }{
		{"empty", ""},
		{"prefix only", auth.TokenPrefix},
		{"another directory's", other},
		{"one character changed", string(flip)},
		{"one character more", token + "A"},
		{"one character less", token[:len(token)-1]},
		{"without its prefix", strings.TrimPrefix(token, auth.TokenPrefix)},
		{"upper-case prefix", "RATH_" + strings.TrimPrefix(token, auth.TokenPrefix)},
		{"with the scheme", "Bearer " + token},
		{"a trailing newline", token + "\n"},
		{"leading space", " " + token},
		{"a provider's key", "sk-proj-" + strings.Repeat("x", 40)},
		{"10 KB", auth.TokenPrefix + strings.Repeat("A", 10<<10)},
		{"257 bytes", token + strings.Repeat("A", 257-len(token))},
		{"NUL", token[:10] + "\x00" + token[11:]},
		{"its hash", func() string { s := sha256.Sum256([]byte(token)); return auth.TokenPrefix + hex.EncodeToString(s[:]) }()},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, name, err := tokens.Lookup(c.token)
			if !errors.Is(err, auth.ErrUnknownToken) || p != (events.Principal{}) || name != "" {
				t.Fatalf("Lookup: %s %q %v, want ErrUnknownToken", p, name, err)
			}
			secret := strings.TrimPrefix(c.token, auth.TokenPrefix)
			if len(secret) >= 8 && strings.Contains(err.Error(), secret[:8]) || strings.Contains(err.Error(), token[5:13]) {
				t.Errorf("the error repeats the token: %v", err)
			}
			if len(err.Error()) > 200 {
				t.Errorf("the error is %d bytes long", len(err.Error()))
			}
		})
	}
	lookup(t, tokens, token, alice, "real")
}

// Minting is refused for anyone but an existing tenant's user, and for
// names that are not valid or taken (by any tenant).
func TestMintTokenRefusals(t *testing.T) {
	dir := tokenDir(t)
	mint(t, dir, alice, "taken")
	forged := auth.UserPath(dir, events.Principal{Tenant: "acme", User: "mallory"})
	b, err := os.ReadFile(auth.UserPath(dir, alice))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forged, b, 0o600); err != nil { // alice's file under mallory's name
		t.Fatal(err)
	}
	// The service tenant's users have no file under tenants/, but say one
	// did: it is refused by its tenant all the same.
	if err := os.MkdirAll(filepath.Join(dir, auth.TenantsDir, events.ServiceTenant), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auth.UserPath(dir, events.Service("admin")), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    events.Principal
		name string
		want string
	}{
		{events.Principal{Tenant: "acme", User: "nobody"}, "", "no such user"},
		{events.Principal{Tenant: "initech", User: "alice"}, "", "no such user"},
		{events.Principal{Tenant: "acme", User: "mallory"}, "", "acme/alice"},
		{events.Service("admin"), "", "Rath's own"},
		{events.Service("ledger"), "x", "Rath's own"},
		{events.Principal{Tenant: "..", User: "alice"}, "", "invalid tenant"},
		{events.Principal{Tenant: "acme", User: "../../admin"}, "", "invalid user"},
		{events.Principal{Tenant: "acme", User: ""}, "", "invalid user"},
		{alice, "taken", `"taken"`},
		{bob, "taken", `"taken"`},
		{alice, "-x", "invalid token name"},
		{alice, ".x", "invalid token name"},
		{alice, "Upper", "invalid token name"},
		{alice, "a b", "invalid token name"},
		{alice, "a/b", "invalid token name"},
		{alice, "../x", "invalid token name"},
		{alice, "x\n", "invalid token name"},
		{alice, "é", "invalid token name"},
		{alice, `x"}{"`, "invalid token name"},
		{alice, strings.Repeat("x", 65), "invalid token name"},
	} {
		_, err := auth.MintToken(dir, c.p, c.name)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mint %q %q: %v, want an error with %q", c.p, c.name, err, c.want)
		}
	}
	if list, err := auth.ListTokens(dir); err != nil || len(list) != 1 {
		t.Errorf("after the refusals: %+v, %v; want the one token", list, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, auth.TenantsDir, events.ServiceTenant)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(forged); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 64)
	mint(t, dir, bob, long)
	// The default name of the longest tenant and user stays valid.
	set, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	longest := events.Principal{Tenant: strings.Repeat("t", 32), User: strings.Repeat("u", 32)}
	if _, err := set.AddUser(longest); err != nil {
		t.Fatal(err)
	}
	token := mint(t, dir, longest, "")
	_, name, err := auth.OpenTokens(auth.TokensPath(dir)).Lookup(token)
	if err != nil || auth.ValidateTokenName(name) != nil {
		t.Errorf("default name of %s: %q, %v", longest, name, err)
	}
}

// A malformed tokens file is an error naming it and the line, from Lookup
// (for every token, a good one too: it fails closed), ListTokens,
// MintToken and RevokeToken, until it is fixed.
func TestTokensFileMalformed(t *testing.T) {
	dir := tokenDir(t)
	token := mint(t, dir, alice, "good")
	path := auth.TokensPath(dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tokens := auth.OpenTokens(path)
	lookup(t, tokens, token, alice, "good")
	hash := strings.Repeat("ab", 32)
	line := func(name, tenant, user, sum, created string) string {
		return fmt.Sprintf(`{"name":%q,"tenant":%q,"user":%q,"sha256":%q,"created":%q}`, name, tenant, user, sum, created)
	}
	const at = "2026-12-03T14:00:00Z"
	goodLine := strings.TrimSpace(string(good))
	for _, c := range []struct{ name, line, want string }{
		{"not JSON", "good token", "not a token entry"},
		{"an array", `["good"]`, "not a token entry"},
		{"two values", line("x", "acme", "alice", hash, at) + " {}", "more than one JSON value"},
		{"an unknown field", strings.TrimSuffix(line("x", "acme", "alice", hash, at), "}") + `,"expires":"2027-01-01T00:00:00Z"}`, "unknown field"},
		{"no hash", line("x", "acme", "alice", "", at), "sha256"},
		{"a short hash", line("x", "acme", "alice", hash[:62], at), "sha256"},
		{"an upper-case hash", line("x", "acme", "alice", strings.ToUpper(hash), at), "sha256"},
		{"not hex", line("x", "acme", "alice", strings.Repeat("zz", 32), at), "sha256"},
		{"the service tenant", line("x", "rath", "admin", hash, at), "reserved"},
		{"no tenant", line("x", "", "alice", hash, at), "invalid tenant"},
		{"a path as user", line("x", "acme", "../admin", hash, at), "invalid user"},
		{"a bad name", line("X Y", "acme", "alice", hash, at), "invalid token name"},
		{"a bad time", line("x", "acme", "alice", hash, "yesterday"), "RFC 3339"},
		{"a name taken", line("good", "globex", "bob", hash, at), "taken by line 1"},
		{"a hash twice", strings.Replace(goodLine, `"good"`, `"twin"`, 1), "same token as line 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			replace(t, path, goodLine+"\n\n"+c.line+"\n")
			where := path + ":3"
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, auth.ErrBadTokens) || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v; want ErrBadTokens naming %s and %q", op, err, where, c.want)
				}
			}
			for range 2 { // loaded, then as loaded
				p, name, err := tokens.Lookup(token)
				check("Lookup", err)
				if errors.Is(err, auth.ErrUnknownToken) || p != (events.Principal{}) || name != "" {
					t.Errorf("Lookup of a good token in a malformed file: %s %q %v, want nothing", p, name, err)
				}
			}
			_, err := auth.ListTokens(dir)
			check("ListTokens", err)
			_, err = auth.MintToken(dir, bob, "")
			check("MintToken", err)
			check("RevokeToken", auth.RevokeToken(dir, "good"))
		})
	}
	replace(t, path, string(good))
	lookup(t, tokens, token, alice, "good")
}

// A change that keeps the file, its size and its modification time (two
// writes in one tick of a coarse clock) is seen all the same.
func TestTokensSameSizeSameTime(t *testing.T) {
	dir := tokenDir(t)
	path := auth.TokensPath(dir)
	a, b := mint(t, dir, alice, "aaaa"), mint(t, dir, alice, "bbbb")
	both, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(both), "\n")
	if err := os.WriteFile(path, []byte(lines[0]), 0o600); err != nil { // in place: the same file
		t.Fatal(err)
	}
	tokens := auth.OpenTokens(path)
	lookup(t, tokens, a, alice, "aaaa")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(lines[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the test needs the same file, size and time: %v %v (%v)", before, after, err)
	}
	if _, _, err := tokens.Lookup(a); !errors.Is(err, auth.ErrUnknownToken) {
		t.Errorf("Lookup of the token no longer in the file: %v, want ErrUnknownToken", err)
	}
	lookup(t, tokens, b, alice, "bbbb")
}

// replace writes body at path as rath creds does: a new file renamed over
// the old.
func replace(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Lookups from many goroutines while tokens are minted and revoked: a
// token is served from the moment MintToken returns until RevokeToken
// does, and concurrent mints lose none (run with -race).
func TestTokensConcurrent(t *testing.T) {
	dir := tokenDir(t)
	tokens := auth.OpenTokens(auth.TokensPath(dir))
	steady := mint(t, dir, alice, "steady")
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if p, _, err := tokens.Lookup(steady); err != nil || p != alice {
					t.Errorf("Lookup of the steady token: %s %v", p, err)
					return
				}
			}
		})
	}
	var minters sync.WaitGroup
	for i := range 4 {
		minters.Go(func() {
			for j := range 5 {
				name := fmt.Sprintf("m%d-%d", i, j)
				token, err := auth.MintToken(dir, bob, name)
				if err != nil {
					t.Errorf("mint %s: %v", name, err)
					return
				}
				if p, got, err := tokens.Lookup(token); err != nil || p != bob || got != name {
					t.Errorf("Lookup of %s just minted: %s %q %v", name, p, got, err)
				}
				if j%2 == 0 {
					if err := auth.RevokeToken(dir, name); err != nil {
						t.Errorf("revoke %s: %v", name, err)
					}
					if _, _, err := tokens.Lookup(token); !errors.Is(err, auth.ErrUnknownToken) {
						t.Errorf("Lookup of %s just revoked: %v", name, err)
					}
				}
			}
		})
	}
	minters.Wait()
	close(done)
	readers.Wait()
	list, err := auth.ListTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1+4*2 {
		t.Errorf("%d tokens after the mints and revokes, want %d: %+v", len(list), 1+4*2, list)
	}
}

// Whatever a tokens file holds, reading it gives tokens of valid names
// acting as tenants' users, or ErrBadTokens; never a panic, never a
// service, never a token for a line that was refused.
func FuzzTokensFile(f *testing.F) {
	f.Add([]byte(`{"name":"ci","tenant":"acme","user":"alice","sha256":"` + strings.Repeat("ab", 32) + `","created":"2026-12-03T14:00:00Z"}` + "\n"))
	f.Add([]byte(`{"name":"ci","tenant":"rath","user":"admin","sha256":"` + strings.Repeat("ab", 32) + `","created":"2026-12-03T14:00:00Z"}`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"name":"ci","expires":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(auth.TokensPath(dir), b, 0o600); err != nil {
			t.Fatal(err)
		}
		list, err := auth.ListTokens(dir)
		if err != nil {
			if !errors.Is(err, auth.ErrBadTokens) || !strings.Contains(err.Error(), auth.TokensPath(dir)+":") {
				t.Fatalf("ListTokens: %v, want ErrBadTokens naming the file and line", err)
			}
			return
		}
		for _, tok := range list {
			if auth.ValidateTokenName(tok.Name) != nil || tok.Principal.IsService() || tok.Principal.Validate() != nil || tok.Created.IsZero() {
				t.Fatalf("ListTokens read %+v", tok)
			}
		}
	})
}
