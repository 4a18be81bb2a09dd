package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// TokensFile is the base name, in a credentials directory, of the file of
// the model gateway's bearer tokens (issue 33): one JSON object a line,
//
//	{"name":"ci","tenant":"acme","user":"alice","sha256":"<hex>","created":"2026-12-03T14:00:00Z"}
//
// Each token acts as exactly one tenant's user. Only the SHA-256 of a token
// is stored: the token itself is shown once, by MintToken, and never again.
// The file is mode 0600 and replaced whole (temporary file, rename), so a
// reader sees one version or the next, never a part.
const TokensFile = "gateway-tokens"

// TokenPrefix starts every gateway token, so that a token is told at a
// glance from a provider's key (and a provider's key presented to the
// gateway is refused without being hashed).
const TokenPrefix = "rath_"

// maxTokenLen bounds a presented token; a minted one is 48 bytes.
const maxTokenLen = 256

// tokenBytes is the entropy of a token: 256 bits.
const tokenBytes = 32

// ErrUnknownToken is returned (possibly wrapped, with a reason that never
// repeats the token) by Tokens.Lookup for a token that matches no entry of
// the file, or is not shaped like a gateway token at all. A gateway answers
// it with 401.
var ErrUnknownToken = errors.New("unknown gateway token")

// ErrBadTokens is returned, wrapped with the file and the line, when the
// tokens file cannot be read as tokens. Tokens.Lookup refuses every token
// while the file is so (it fails closed): a gateway answers it with a
// server error, and the operator fixes the file.
var ErrBadTokens = errors.New("malformed gateway tokens file")

// TokensPath is the tokens file of the credentials directory dir.
func TokensPath(dir string) string { return filepath.Join(dir, TokensFile) }

// TokenInfo is a token as ListTokens shows it: never its hash.
type TokenInfo struct {
	Name      string
	Principal events.Principal
	Created   time.Time
}

// validTokenName keeps a token's name one word of a table and of a command
// line.
var validTokenName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidateTokenName reports whether name can name a gateway token.
func ValidateTokenName(name string) error {
	if !validTokenName.MatchString(name) {
		return fmt.Errorf("invalid token name %q: want 1-64 characters of a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	return nil
}

// tokenLine is one line of the tokens file.
type tokenLine struct {
	Name    string `json:"name"`
	Tenant  string `json:"tenant"`
	User    string `json:"user"`
	SHA256  string `json:"sha256"`
	Created string `json:"created"`
}

// tokenEntry is a line of the tokens file as checked and decoded.
type tokenEntry struct {
	line      tokenLine
	principal events.Principal
	hash      [sha256.Size]byte
	created   time.Time
}

// parseTokens reads a tokens file's content; name is the file, for errors.
// Every line must be a complete entry with no field unknown to this Rath:
// a field a later version adds (an expiry, a scope) must not be ignored,
// which would grant more than the file says. Blank lines are skipped.
func parseTokens(b []byte, name string) ([]tokenEntry, error) {
	var out []tokenEntry
	names := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	n := 0
	for line := range bytes.Lines(b) {
		n++
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		e, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w %s:%d: %v", ErrBadTokens, name, n, err)
		}
		if first, dup := names[e.line.Name]; dup {
			return nil, fmt.Errorf("%w %s:%d: the name %q is taken by line %d", ErrBadTokens, name, n, e.line.Name, first)
		}
		if first, dup := hashes[e.hash]; dup {
			return nil, fmt.Errorf("%w %s:%d: the same token as line %d", ErrBadTokens, name, n, first)
		}
		names[e.line.Name], hashes[e.hash] = n, n
		out = append(out, e)
	}
	return out, nil
}

// parseTokenLine decodes and checks one non-blank line.
func parseTokenLine(line []byte) (tokenEntry, error) {
	var e tokenEntry
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e.line); err != nil {
		return e, fmt.Errorf("not a token entry: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return e, errors.New("not a token entry: more than one JSON value on the line")
	}
	l := e.line
	if err := ValidateTokenName(l.Name); err != nil {
		return e, err
	}
	e.principal = events.Principal{Tenant: l.Tenant, User: l.User}
	if err := events.ValidateTenant(l.Tenant); err != nil {
		return e, fmt.Errorf("token %s: %v", l.Name, err)
	}
	if err := events.ValidateUser(l.User); err != nil {
		return e, fmt.Errorf("token %s: %v", l.Name, err)
	}
	if len(l.SHA256) != 2*sha256.Size || strings.ToLower(l.SHA256) != l.SHA256 {
		return e, fmt.Errorf("token %s: sha256 is not %d lower-case hex digits", l.Name, 2*sha256.Size)
	}
	if _, err := hex.Decode(e.hash[:], []byte(l.SHA256)); err != nil {
		return e, fmt.Errorf("token %s: sha256 is not %d lower-case hex digits", l.Name, 2*sha256.Size)
	}
	created, err := time.Parse(time.RFC3339, l.Created)
	if err != nil {
		return e, fmt.Errorf("token %s: created is not an RFC 3339 time: %v", l.Name, err)
	}
	e.created = created
	return e, nil
}

// readTokens reads the tokens file at path; a file that does not exist
// holds no token.
func readTokens(path string) ([]tokenEntry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read gateway tokens: %w", err)
	}
	return parseTokens(b, path)
}

// writeTokens replaces the tokens file at path with entries.
func writeTokens(path string, entries []tokenEntry) error {
	var b bytes.Buffer
	for _, e := range entries {
		line, err := json.Marshal(e.line)
		if err != nil {
			return fmt.Errorf("write gateway tokens %s: %w", path, err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := writePrivate(path, b.Bytes()); err != nil {
		return fmt.Errorf("write gateway tokens %s: %w", path, err)
	}
	return nil
}

// lockTokens holds the lock of dir's tokens file until the returned
// function is called, so that two commands changing the file at once (a
// mint and a revoke) do not lose one change: each reads, changes and
// replaces the file under the lock. Readers (Lookup) take no lock; the
// rename makes each version whole.
func lockTokens(dir string) (func(), error) {
	path := filepath.Join(dir, "."+TokensFile+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock gateway tokens: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock gateway tokens %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// MintToken creates a gateway token acting as p, a tenant's user that has
// a credentials file in dir (rath creds add), records its hash under name
// in dir's tokens file, and returns the token: the only time it is shown.
// An empty name picks <tenant>-<user>-<first 8 hex digits of the hash>; a
// given one must be valid (ValidateTokenName) and not taken.
func MintToken(dir string, p events.Principal, name string) (string, error) {
	if p.IsService() {
		return "", fmt.Errorf("mint token for %s: the tenant %q is Rath's own; a token acts as a tenant's user", p, events.ServiceTenant)
	}
	if err := events.ValidateTenant(p.Tenant); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	if err := events.ValidateUser(p.User); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	if name != "" {
		if err := ValidateTokenName(name); err != nil {
			return "", fmt.Errorf("mint token: %w", err)
		}
	}
	id, err := ReadFile(UserPath(dir, p))
	if errors.Is(err, ErrNoCredentials) {
		return "", fmt.Errorf("mint token for %s: no such user in %s (add it first: rath creds add --tenant %s --user %s)", p, dir, p.Tenant, p.User)
	}
	if err != nil {
		return "", fmt.Errorf("mint token for %s: %w", p, err)
	}
	if id.Role != RoleClient || id.Principal != p {
		return "", fmt.Errorf("mint token for %s: %w %s: it names %s (role %s)", p, ErrBadCredentials, id.Path, id.Principal, id.Role)
	}
	unlock, err := lockTokens(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	path := TokensPath(dir)
	entries, err := readTokens(path)
	if err != nil {
		return "", fmt.Errorf("mint token for %s: %w", p, err)
	}
	taken := func(name string) bool {
		return slices.ContainsFunc(entries, func(e tokenEntry) bool { return e.line.Name == name })
	}
	if name != "" && taken(name) {
		return "", fmt.Errorf("mint token for %s: a token named %q exists already in %s (revoke it first, or choose another name)", p, name, path)
	}
	for {
		token, hash, err := newToken()
		if err != nil {
			return "", fmt.Errorf("mint token for %s: %w", p, err)
		}
		digest := hex.EncodeToString(hash[:])
		n := name
		if n == "" {
			n = defaultTokenName(p, digest)
			if taken(n) {
				continue // 8 hex digits alike: draw again
			}
		}
		entries = append(entries, tokenEntry{line: tokenLine{
			Name:    n,
			Tenant:  p.Tenant,
			User:    p.User,
			SHA256:  digest,
			Created: time.Now().UTC().Format(time.RFC3339),
		}})
		if err := writeTokens(path, entries); err != nil {
			return "", err
		}
		return token, nil
	}
}

// defaultTokenName is <tenant>-<user>-<8 hex digits>, the tenant and user
// cut so that the name stays within 64 characters.
func defaultTokenName(p events.Principal, digest string) string {
	who := p.Tenant + "-" + p.User
	if room := 64 - 1 - 8; len(who) > room {
		who = who[:room]
	}
	return who + "-" + digest[:8]
}

// newToken draws a token and its hash.
func newToken() (string, [sha256.Size]byte, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", [sha256.Size]byte{}, err
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, sha256.Sum256([]byte(token)), nil
}

// RevokeToken removes the token named name from dir's tokens file: a
// gateway refuses it from its next request on.
func RevokeToken(dir, name string) error {
	unlock, err := lockTokens(dir)
	if err != nil {
		return err
	}
	defer unlock()
	path := TokensPath(dir)
	entries, err := readTokens(path)
	if err != nil {
		return fmt.Errorf("revoke token %q: %w", name, err)
	}
	i := slices.IndexFunc(entries, func(e tokenEntry) bool { return e.line.Name == name })
	if i < 0 {
		return fmt.Errorf("revoke token %q: no token of that name in %s (rath creds token ls lists them)", name, path)
	}
	return writeTokens(path, slices.Delete(entries, i, i+1))
}

// ListTokens returns the tokens of dir's tokens file by name.
func ListTokens(dir string) ([]TokenInfo, error) {
	entries, err := readTokens(TokensPath(dir))
	if err != nil {
		return nil, err
	}
	out := make([]TokenInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, TokenInfo{Name: e.line.Name, Principal: e.principal, Created: e.created})
	}
	slices.SortFunc(out, func(a, b TokenInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Tokens answers which tenant's user a presented gateway token acts as,
// from a tokens file it rereads whenever the file changed, so that a token
// minted or revoked with rath creds takes effect at the next request. It is
// safe for concurrent use.
type Tokens struct {
	path string

	mu sync.Mutex
	// seen is the file as last read (nil: missing, or not read yet), sum
	// the SHA-256 of its content.
	seen fs.FileInfo
	sum  [sha256.Size]byte
	// settled is set when the file was read at least racyWindow after its
	// last change: any later change shows in its modification time.
	settled bool
	entries []tokenEntry
	err     error // the file as last read is malformed: refuse everything
}

// racyWindow is how long after a change a file's modification time may
// still not tell a second change from the first (coarse file system
// clocks, two writes of the same size within one tick): until it has
// passed, Lookup rereads the file each time and compares content, as git
// does with a racily clean index.
const racyWindow = 2 * time.Second

// OpenTokens returns the tokens of the file at path (TokensPath of a
// credentials directory). Nothing is read until the first Lookup; a file
// that does not exist holds no token.
func OpenTokens(path string) *Tokens { return &Tokens{path: path} }

// Lookup returns the principal the token acts as and the token's name. A
// token that is not one of the file's is ErrUnknownToken, as is one whose
// user's credentials file has gone (the user was removed); a malformed file
// is ErrBadTokens, for every token, until it is fixed. Errors never repeat
// the token.
func (t *Tokens) Lookup(token string) (events.Principal, string, error) {
	if len(token) > maxTokenLen {
		return events.Principal{}, "", fmt.Errorf("%w: longer than %d bytes", ErrUnknownToken, maxTokenLen)
	}
	if !strings.HasPrefix(token, TokenPrefix) {
		return events.Principal{}, "", fmt.Errorf("%w: not a Rath gateway token (they start %q)", ErrUnknownToken, TokenPrefix)
	}
	entries, err := t.current()
	if err != nil {
		return events.Principal{}, "", err
	}
	hash := sha256.Sum256([]byte(token))
	match := -1
	for i := range entries {
		// Every entry is compared, in constant time, whether or not an
		// earlier one matched.
		if subtle.ConstantTimeCompare(hash[:], entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return events.Principal{}, "", ErrUnknownToken
	}
	e := entries[match]
	// A user removed (its credentials file deleted) loses its tokens too.
	switch _, err := statCreds(UserPath(filepath.Dir(t.path), e.principal)); {
	case errors.Is(err, fs.ErrNotExist):
		return events.Principal{}, "", fmt.Errorf("%w: token %s acts as %s, who has no credentials file any more", ErrUnknownToken, e.line.Name, e.principal)
	case err != nil:
		return events.Principal{}, "", fmt.Errorf("token %s: user %s: %w", e.line.Name, e.principal, err)
	}
	return e.principal, e.line.Name, nil
}

// current returns the file's entries: those read last while the file is
// unchanged (the same file, size and modification time, and settled),
// else the file's content read again, parsed again if it differs.
func (t *Tokens) current() ([]tokenEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t.forget()
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read gateway tokens: %w", err)
	}
	if t.seen != nil && t.settled && unchanged(t.seen, fi) {
		return t.entries, t.err
	}
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		t.forget() // removed since the stat
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read gateway tokens: %w", err)
	}
	defer f.Close()
	// The version read is the one this stat describes: a later rename is
	// another file, seen at the next call.
	fi, err = f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read gateway tokens %s: %w", t.path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read gateway tokens %s: %w", t.path, err)
	}
	sum := sha256.Sum256(b)
	if t.seen == nil || sum != t.sum {
		t.entries, t.err = parseTokens(b, t.path)
		t.sum = sum
	}
	t.seen = fi
	t.settled = time.Since(fi.ModTime()) > racyWindow
	return t.entries, t.err
}

// forget drops what was read: the file is gone, and holds no token.
func (t *Tokens) forget() {
	t.seen, t.sum, t.settled, t.entries, t.err = nil, [sha256.Size]byte{}, false, nil, nil
}

// unchanged reports whether b is the file a was: the same file (device and
// inode: every write renames a new file in), size and modification time.
func unchanged(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
