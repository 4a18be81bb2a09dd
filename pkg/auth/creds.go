package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ErrNoCredentials is returned (wrapped, with the path) by Option, Load and
// ReadFile when a credentials file does not exist.
var ErrNoCredentials = errors.New("no credentials file")

// ErrBadCredentials is returned (wrapped, with the path and the cause) when a
// credentials file holds no usable user nkey seed.
var ErrBadCredentials = errors.New("unusable credentials file")

// Identity is one role's identity: the public user nkey the server knows,
// and the file holding its seed.
type Identity struct {
	Role      Role
	PublicKey string
	Path      string
}

// FileName is the base name of a role's credentials file in a directory.
func FileName(r Role) string { return string(r) + ".creds" }

// Set is the identities of every role, one credentials file each in Dir.
type Set struct {
	Dir string
	ids map[Role]Identity
}

// Identity returns the role's identity.
func (s *Set) Identity(r Role) Identity { return s.ids[r] }

// Path returns the role's credentials file.
func (s *Set) Path(r Role) string { return filepath.Join(s.Dir, FileName(r)) }

// Identities returns every role's identity, in Roles order.
func (s *Set) Identities() []Identity {
	out := make([]Identity, 0, len(s.ids))
	for _, r := range Roles() {
		out = append(out, s.ids[r])
	}
	return out
}

// Ensure returns the identities in dir, creating the directory (0700) and
// the file of any role that has none (0600). Existing files are reused, so
// a restart keeps every identity; a file that cannot be read is an error,
// never silently replaced.
func Ensure(dir string) (*Set, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials directory %s: %w", dir, err)
	}
	s := &Set{Dir: dir, ids: make(map[Role]Identity, len(Roles()))}
	for _, r := range Roles() {
		id, err := ReadFile(s.Path(r))
		if errors.Is(err, ErrNoCredentials) {
			id, err = create(s.Path(r), r)
		}
		if err != nil {
			return nil, err
		}
		id.Role = r
		s.ids[r] = id
	}
	return s, nil
}

// Load returns the identities in dir; every role's file must exist.
func Load(dir string) (*Set, error) {
	s := &Set{Dir: dir, ids: make(map[Role]Identity, len(Roles()))}
	var errs []error
	for _, r := range Roles() {
		id, err := ReadFile(s.Path(r))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id.Role = r
		s.ids[r] = id
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Mint writes a new identity for every role into dir, which must not hold
// credentials files yet (to rotate, mint into a new directory and replace).
func Mint(dir string) (*Set, error) {
	for _, r := range Roles() {
		if _, err := os.Stat(filepath.Join(dir, FileName(r))); err == nil {
			return nil, fmt.Errorf("mint into %s: %s exists already; mint into an empty directory", dir, FileName(r))
		}
	}
	return Ensure(dir)
}

// ReadFile reads a credentials file. The role is taken from the caller; the
// file only holds the seed.
func ReadFile(path string) (Identity, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, fmt.Errorf("%w %s", ErrNoCredentials, path)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("read credentials %s: %w", path, err)
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
	}
	return Identity{PublicKey: pub, Path: path}, nil
}

// Option returns the nats.go option that authenticates a connection with
// the credentials file at path, after checking the file is usable, so that
// a missing or broken file is reported by name before any connection.
func Option(path string) (nats.Option, error) {
	if _, err := ReadFile(path); err != nil {
		return nil, err
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
	}
	return opt, nil
}

// create writes a new identity for role at path, atomically and 0600.
func create(path string, role Role) (Identity, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Identity{}, fmt.Errorf("create %s identity: %w", role, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Identity{}, fmt.Errorf("create %s identity: %w", role, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Identity{}, fmt.Errorf("create %s identity: %w", role, err)
	}
	defer wipe(seed)
	body := Encode(role, pub, seed)
	defer wipe(body)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+FileName(role)+".*")
	if err != nil {
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	return Identity{Role: role, PublicKey: pub, Path: path}, nil
}

// Encode is the content of a credentials file: comment lines naming the role
// and its public key, then the seed between the decoration nsc uses for nkey
// seed files. nats.go's NkeyOptionFromSeed and the nats CLI's --nkey read it.
func Encode(role Role, publicKey string, seed []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Rath NATS identity of role %s, user nkey %s.\n", role, publicKey)
	b.WriteString("# The seed below authenticates as this role: keep the file private (0600).\n")
	b.WriteString("# Use: rath --creds FILE; nats --nkey FILE; nats.go nats.NkeyOptionFromSeed(FILE).\n\n")
	b.WriteString("-----BEGIN USER NKEY SEED-----\n")
	b.Write(seed)
	b.WriteString("\n------END USER NKEY SEED------\n")
	return b.Bytes()
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
