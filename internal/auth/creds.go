package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/openrath/rath/pkg/events"
)

// ErrNoCredentials is returned (wrapped, with the path) by Option, Load and
// ReadFile when a credentials file does not exist.
var ErrNoCredentials = errors.New("no credentials file")

// ErrBadCredentials is returned (wrapped, with the path and the cause) when a
// credentials file holds no usable user nkey seed, or is a NATS user
// credentials file whose JWT is garbled, expired, not its seed's, or names
// no Rath principal.
var ErrBadCredentials = errors.New("unusable credentials file")

// Identity is one identity on the bus: its role, the principal it acts as
// (a service, or a user of a tenant), the public user nkey the server knows,
// and the file holding its seed. JWT marks a NATS user credentials file (a
// user JWT of a server in operator mode, and its seed) rather than one of
// Rath's nkey seed files.
type Identity struct {
	Role      Role
	Principal events.Principal
	PublicKey string
	Path      string
	JWT       bool
}

// Permissions is what the identity may do: its role's, or for a user of a
// tenant, a client's scoped to that user and tenant.
func (id Identity) Permissions() Permissions {
	if id.Role == RoleClient {
		return ClientPermissions(id.Principal)
	}
	return id.Role.Permissions()
}

// SeedExt ends the name of Rath's nkey seed files: <role>.nk, as nsc names
// the nkey files it keeps. Not .creds: NATS tools mean by that a user JWT
// and its seed, and `nats --creds` refuses a seed alone (ADR 0013).
const SeedExt = ".nk"

// legacyExt ended the names of the seed files of earlier Rath versions.
// Ensure renames them; ReadFile reads one when the new name is absent.
const legacyExt = ".creds"

// FileName is the base name of a role's credentials file in a directory.
// It and UserPath are the only places the names are made.
func FileName(r Role) string { return string(r) + SeedExt }

// TenantsDir is the directory, under a credentials directory, holding the
// identities of tenants' users: tenants/<tenant>/<user>.nk.
const TenantsDir = "tenants"

// UserPath is the credentials file of a tenant's user under dir.
func UserPath(dir string, p events.Principal) string {
	return filepath.Join(dir, TenantsDir, p.Tenant, p.User+SeedExt)
}

// legacyPath is the name an earlier Rath gave the seed file at path, or ""
// if path is not a seed file's name.
func legacyPath(path string) string {
	base, ok := strings.CutSuffix(path, SeedExt)
	if !ok {
		return ""
	}
	return base + legacyExt
}

// Set is the identities of every role, one credentials file each in Dir,
// and of the tenants' users under Dir/tenants.
type Set struct {
	Dir string
	// Renamed lists the files of an earlier Rath that Ensure renamed from
	// <name>.creds to <name>.nk, for the caller to log once.
	Renamed []string
	ids     map[Role]Identity
	users   []Identity
}

// Identity returns the role's identity.
func (s *Set) Identity(r Role) Identity { return s.ids[r] }

// Path returns the role's credentials file: the file its identity was read
// from (a <role>.creds Load read in place of a missing <role>.nk), or else
// the <role>.nk it is to be.
func (s *Set) Path(r Role) string {
	if id, ok := s.ids[r]; ok && id.Path != "" {
		return id.Path
	}
	return filepath.Join(s.Dir, FileName(r))
}

// Identities returns every role's identity, in Roles order, then the
// tenants' users by tenant and name.
func (s *Set) Identities() []Identity {
	out := make([]Identity, 0, len(s.ids)+len(s.users))
	for _, r := range Roles() {
		out = append(out, s.ids[r])
	}
	return append(out, s.users...)
}

// Users returns the identities of the tenants' users.
func (s *Set) Users() []Identity { return slices.Clone(s.users) }

// AddUser creates the identity of a tenant's user in the set's directory
// (an existing one is returned unchanged) and adds it to the set. A server
// learns of it when it is (re)configured with the set.
func (s *Set) AddUser(p events.Principal) (Identity, error) {
	if p.IsService() {
		return Identity{}, fmt.Errorf("add user %s: the tenant %q is Rath's own", p, events.ServiceTenant)
	}
	if err := p.Validate(); err != nil {
		return Identity{}, fmt.Errorf("add user: %w", err)
	}
	path := UserPath(s.Dir, p)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Identity{}, fmt.Errorf("add user %s: %w", p, err)
	}
	id, err := readSeedFile(path)
	if errors.Is(err, ErrNoCredentials) {
		id, err = create(path, RoleClient, p)
	}
	if err != nil {
		return Identity{}, err
	}
	for i, u := range s.users {
		if u.Principal == id.Principal {
			s.users[i] = id
			return id, nil
		}
	}
	s.users = append(s.users, id)
	slices.SortFunc(s.users, func(a, b Identity) int { return strings.Compare(a.Principal.String(), b.Principal.String()) })
	return id, nil
}

// loadUsers reads every tenant user's identity under dir/tenants: the
// <user>.nk files, and the <user>.creds of an earlier Rath that has no .nk.
func loadUsers(dir string) ([]Identity, error) {
	paths, err := filepath.Glob(filepath.Join(dir, TenantsDir, "*", "*"+SeedExt))
	if err != nil {
		return nil, fmt.Errorf("tenant credentials in %s: %w", dir, err)
	}
	legacy, err := filepath.Glob(filepath.Join(dir, TenantsDir, "*", "*"+legacyExt))
	if err != nil {
		return nil, fmt.Errorf("tenant credentials in %s: %w", dir, err)
	}
	for _, old := range legacy {
		if p := strings.TrimSuffix(old, legacyExt) + SeedExt; !slices.Contains(paths, p) {
			paths = append(paths, p) // readSeedFile reads old under it
		}
	}
	slices.Sort(paths)
	var out []Identity
	for _, path := range paths {
		id, err := readSeedFile(path)
		if err != nil {
			return nil, err
		}
		want := events.Principal{Tenant: filepath.Base(filepath.Dir(path)), User: strings.TrimSuffix(filepath.Base(path), SeedExt)}
		if id.Principal != want || id.Role != RoleClient {
			return nil, fmt.Errorf("%w %s: it names %s (role %s), its place names user %s", ErrBadCredentials, path, id.Principal, id.Role, want)
		}
		out = append(out, id)
	}
	return out, nil
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
	if err := ensureApprovers(dir); err != nil {
		return nil, err
	}
	s := &Set{Dir: dir, ids: make(map[Role]Identity, len(Roles()))}
	renamed, err := migrate(dir)
	if err != nil {
		return nil, err
	}
	s.Renamed = renamed
	for _, r := range Roles() {
		id, err := readSeedFile(s.Path(r))
		if errors.Is(err, ErrNoCredentials) {
			id, err = create(s.Path(r), r, r.Principal())
		}
		if err != nil {
			return nil, err
		}
		if err := checkRole(id, r); err != nil {
			return nil, err
		}
		s.ids[r] = id
	}
	users, err := loadUsers(dir)
	if err != nil {
		return nil, err
	}
	s.users = users
	return s, nil
}

// migrate renames the seed files of an earlier Rath in dir, <name>.creds,
// to <name>.nk where no .nk exists, and returns the old paths. Renaming
// (rather than reading the old names for ever) leaves one name per file, so
// that no .creds file in a data directory is a seed `nats --creds` would
// refuse; a rename within a directory is atomic, and a second run finds
// nothing to do.
func migrate(dir string) ([]string, error) {
	var old []string
	for _, r := range Roles() {
		old = append(old, filepath.Join(dir, string(r)+legacyExt))
	}
	users, err := filepath.Glob(filepath.Join(dir, TenantsDir, "*", "*"+legacyExt))
	if err != nil {
		return nil, fmt.Errorf("tenant credentials in %s: %w", dir, err)
	}
	old = append(old, users...)
	var renamed []string
	for _, path := range old {
		to := strings.TrimSuffix(path, legacyExt) + SeedExt
		b, err := os.ReadFile(path)
		if err != nil {
			continue // none to rename (or one ReadFile will report)
		}
		jwtFile := IsUserJWTFile(b)
		wipe(b)
		if jwtFile {
			continue // a NATS user credentials file keeps its name
		}
		if _, err := os.Stat(to); err == nil {
			continue // both: the .nk is the one in use; the .creds is left alone
		}
		if err := os.Rename(path, to); err != nil {
			return renamed, fmt.Errorf("rename credentials %s to %s: %w", path, to, err)
		}
		renamed = append(renamed, path)
	}
	return renamed, nil
}

// readSeedFile is ReadFile for the files of a Set that Ensure makes and
// the embedded server knows by nkey: Rath's nkey seed files only, never a
// NATS user JWT.
func readSeedFile(path string) (Identity, error) {
	id, err := ReadFile(path)
	if err == nil && id.JWT {
		return Identity{}, fmt.Errorf("%w %s: a NATS user JWT credentials file where rath up keeps the nkey seeds of its embedded server (a JWT is for a server in operator mode: rath up --nats URL --creds-dir DIR)", ErrBadCredentials, id.Path)
	}
	return id, err
}

// checkRole refuses a role's file that names another identity.
func checkRole(id Identity, r Role) error {
	if id.Role != r || id.Principal != r.Principal() {
		return fmt.Errorf("%w %s: it names %s (role %s), want role %s", ErrBadCredentials, id.Path, id.Principal, id.Role, r)
	}
	return nil
}

// Load returns the identities in dir; every role's file must exist: its
// <role>.nk, or a <role>.creds, either an earlier Rath's seed file or, for
// a server in operator mode, the role's NATS user credentials file whose
// JWT names rath/<role> (Identity.JWT). A directory that does not exist is
// one ErrNoCredentials, not one per role.
func Load(dir string) (*Set, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s: the directory does not exist", ErrNoCredentials, dir)
	}
	s := &Set{Dir: dir, ids: make(map[Role]Identity, len(Roles()))}
	var errs []error
	for _, r := range Roles() {
		// A directory for an existing NATS deployment may hold each
		// role's NATS user credentials file (<role>.creds) instead.
		id, err := ReadFile(s.Path(r))
		if err == nil {
			err = checkRole(id, r)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.ids[r] = id
	}
	users, err := loadUsers(dir)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.users = users
	return s, nil
}

// Mint writes a new identity for every role into dir, which must not hold
// credentials files yet (to rotate, mint into a new directory and replace).
func Mint(dir string) (*Set, error) {
	for _, r := range Roles() {
		for _, name := range []string{FileName(r), string(r) + legacyExt} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return nil, fmt.Errorf("mint into %s: %s exists already; mint into an empty directory", dir, name)
			}
		}
	}
	return Ensure(dir)
}

// ReadFile reads a credentials file: one of Rath's nkey seed files (the
// seed, and the role and principal its header names; a file of an earlier
// Rath without that line is read by its name, <role>.creds), or a NATS user
// credentials file (the JWT's user, and the principal its
// rath-principal tag names; see readUserJWT for what is checked). A
// <name>.nk that does not exist is read from the <name>.creds an earlier
// Rath wrote, if that exists; Path says which file was read.
func ReadFile(path string) (Identity, error) {
	b, path, err := readCreds(path)
	if err != nil {
		return Identity{}, err
	}
	defer wipe(b)
	if IsUserJWTFile(b) {
		u, err := readUserJWT(b, path, time.Now())
		if err != nil {
			return Identity{}, err
		}
		wipe(u.seed)
		u.id.Path = path
		return u.id, nil
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
	}
	role, p, err := header(b, path)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Role: role, Principal: p, PublicKey: pub, Path: path}, nil
}

// readCreds reads the credentials file at path, or the .creds an earlier
// Rath named it, and returns its content and the path it was read from.
func readCreds(path string) ([]byte, string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if old := legacyPath(path); old != "" {
			if lb, lerr := os.ReadFile(old); lerr == nil {
				return lb, old, nil
			}
		}
		return nil, path, fmt.Errorf("%w %s", ErrNoCredentials, path)
	}
	if err != nil {
		return nil, path, fmt.Errorf("read credentials %s: %w", path, err)
	}
	return b, path, nil
}

// statCreds is os.Stat of the credentials file at path, or of the .creds
// an earlier Rath named it when path does not exist (as ReadFile reads it).
func statCreds(path string) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if old := legacyPath(path); old != "" {
			if lfi, lerr := os.Stat(old); lerr == nil {
				return lfi, nil
			}
		}
	}
	return fi, err
}

// principalLine starts the header line naming a file's role and principal.
const principalLine = "# rath-identity: "

// header reads the role and principal a credentials file names.
func header(b []byte, path string) (Role, events.Principal, error) {
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte(principalLine))
		if !ok {
			continue
		}
		fields := strings.Fields(string(rest))
		if len(fields) != 2 {
			return "", events.Principal{}, fmt.Errorf("%w %s: want %q<role> <tenant>/<user>", ErrBadCredentials, path, principalLine)
		}
		role, err := ParseRole(fields[0])
		if err != nil {
			return "", events.Principal{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
		}
		p, err := events.ParseActor(fields[1])
		if err != nil {
			return "", events.Principal{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, path, err)
		}
		if (role == RoleClient) == p.IsService() {
			return "", events.Principal{}, fmt.Errorf("%w %s: role %s cannot act as %s", ErrBadCredentials, path, role, p)
		}
		return role, p, nil
	}
	role, err := ParseRole(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), legacyExt), SeedExt))
	if err != nil {
		return "", events.Principal{}, fmt.Errorf("%w %s: no %q line, and the file name names no role", ErrBadCredentials, path, strings.TrimSpace(principalLine))
	}
	return role, role.Principal(), nil
}

// Options returns the nats.go options that authenticate a connection with
// the credentials file at path (ReadFile: one of Rath's nkey seed files or
// a NATS user credentials file), and the identity it names, after checking
// the file is usable, so that a missing or broken file is reported by name
// before any connection. A tenant's user gets replies under its own prefix
// (the only one it may subscribe to).
func Options(path string) ([]nats.Option, Identity, error) {
	id, err := ReadFile(path)
	if err != nil {
		return nil, Identity{}, err
	}
	var opts []nats.Option
	if id.JWT {
		opts = jwtOptions(userJWT{}, id.Path)
	} else {
		opt, err := nats.NkeyOptionFromSeed(id.Path)
		if err != nil {
			return nil, Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, id.Path, err)
		}
		opts = []nats.Option{opt}
	}
	return withInbox(opts, id), id, nil
}

// withInbox adds a client's reply prefix to opts.
func withInbox(opts []nats.Option, id Identity) []nats.Option {
	if id.Role == RoleClient {
		opts = append(opts, nats.CustomInboxPrefix(id.Principal.ReplyPrefix()))
	}
	return opts
}

// OptionsFrom is Options for a credentials file's content, as a person
// hands it to a program (the console's sign-in) rather than a path; name
// says where it came from in errors. The seed stays in memory, held by the
// returned option, for as long as the connection may reconnect.
func OptionsFrom(b []byte, name string) ([]nats.Option, Identity, error) {
	if IsUserJWTFile(b) {
		u, err := readUserJWT(b, name, time.Now())
		if err != nil {
			return nil, Identity{}, err
		}
		defer wipe(u.seed) // the option holds its own copy
		return withInbox(jwtOptions(u, ""), u.id), u.id, nil
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, Identity{}, fmt.Errorf("%w %s: %v", ErrBadCredentials, name, err)
	}
	role, p, err := header(b, name)
	if err != nil {
		return nil, Identity{}, err
	}
	id := Identity{Role: role, Principal: p, PublicKey: pub}
	return withInbox([]nats.Option{nats.Nkey(pub, kp.Sign)}, id), id, nil
}

// create writes a new identity for role, acting as p, at path, atomically
// and 0600.
func create(path string, role Role, p events.Principal) (Identity, error) {
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
	body := Encode(role, p, pub, seed)
	defer wipe(body)
	if err := writePrivate(path, body); err != nil {
		return Identity{}, fmt.Errorf("write credentials %s: %w", path, err)
	}
	return Identity{Role: role, Principal: p, PublicKey: pub, Path: path}, nil
}

// Encode is the content of a credentials file: comment lines naming the role,
// the principal and the public key, then the seed between the decoration nsc
// uses for nkey seed files. nats.go's NkeyOptionFromSeed and the nats CLI's
// --nkey read it; `nats --creds` does not (it wants a user JWT too), hence
// the .nk name.
func Encode(role Role, p events.Principal, publicKey string, seed []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Rath NATS identity of role %s acting as %s, user nkey %s.\n", role, p, publicKey)
	fmt.Fprintf(&b, "%s%s %s\n", principalLine, role, p)
	b.WriteString("# The seed below authenticates as this role: keep the file private (0600).\n")
	b.WriteString("# Use: rath --creds FILE; nats --nkey FILE; nats.go nats.NkeyOptionFromSeed(FILE).\n\n")
	b.WriteString("-----BEGIN USER NKEY SEED-----\n")
	b.Write(seed)
	b.WriteString("\n------END USER NKEY SEED------\n")
	return b.Bytes()
}

// writePrivate replaces the file at path with body, mode 0600: written whole
// to a temporary file in the same directory, synced, then renamed over path,
// so that a reader sees the old content or the new, never a part.
func writePrivate(path string, body []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
