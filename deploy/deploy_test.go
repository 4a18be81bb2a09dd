package deploy

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

var update = flag.Bool("update", false, "copy deploy/nats-server.conf into deploy/kubernetes/nats/")

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// natsClientPort, natsClusterPort and natsMonitorPort are the ports both
// deployments use; the NATS configurations must agree.
const (
	natsClientPort  = 4222
	natsClusterPort = 6222
	natsMonitorPort = 8222
	maxPayload      = 8 << 20 // docs/operations.md: snapshots and replies reach 8 MiB
	natsNodes       = 3
)

// binary is one Rath command as its --help describes it.
type binary struct {
	name  string
	path  string
	flags map[string]bool // flag name → takes a value (false: a bool flag)
	role  auth.Role       // the identity its --creds names; "" for rath
	help  string          // its --help output
}

var (
	buildOnce sync.Once
	binDir    string
	bins      map[string]*binary
	buildErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, dir := range []string{binDir, credsRoot} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// binaries builds cmd/rath and every services/<name> once, and reads each
// service's flags from its own --help: the deployment files are checked
// against what the binaries accept, not against a list kept here.
func binaries(t *testing.T) map[string]*binary {
	t.Helper()
	buildOnce.Do(func() { bins, buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

func build() (map[string]*binary, error) {
	mains, err := filepath.Glob(filepath.Join(repoRoot, "services", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		return nil, fmt.Errorf("no services/*/main.go under %s (%v)", repoRoot, err)
	}
	pkgs := []string{"./cmd/rath"}
	for _, m := range mains {
		name := filepath.Base(filepath.Dir(m))
		if name == "model-gateway" {
			// It holds no role of its own (it acts as each caller, with
			// the callers' credentials files: ADR 0039), and deploy/
			// does not run it yet.
			continue
		}
		pkgs = append(pkgs, "./services/"+name)
	}
	if binDir, err = os.MkdirTemp("", "rath-deploy-bin-"); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", append([]string{"build", "-o", binDir + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	out := map[string]*binary{"rath": {name: "rath", path: filepath.Join(binDir, "rath")}}
	for _, p := range pkgs[1:] {
		name := filepath.Base(p)
		b, err := readHelp(name, filepath.Join(binDir, name))
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

var (
	// flagLine is a flag in the flag package's PrintDefaults: "  -name type".
	flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(?: (\S+))?$`)
	// credsRole is the file daemon.Main's --creds usage names for the role.
	credsRole = regexp.MustCompile(`creds/([a-z0-9-]+)\.nk`)
)

// readHelp runs the binary's --help and reads its flags and role.
func readHelp(name, path string) (*binary, error) {
	var out bytes.Buffer
	cmd := exec.Command(path, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) { // flag.ExitOnError exits 0 on -help; tolerate 2 as well
			return nil, fmt.Errorf("%s --help: %v", name, err)
		}
	}
	b := &binary{name: name, path: path, flags: map[string]bool{}, help: out.String()}
	for line := range strings.Lines(out.String()) {
		if m := flagLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			b.flags[m[1]] = m[2] != ""
		}
	}
	if len(b.flags) == 0 {
		return nil, fmt.Errorf("%s --help lists no flags:\n%s", name, out.String())
	}
	m := credsRole.FindStringSubmatch(out.String())
	if m == nil {
		return nil, fmt.Errorf("%s --help names no credentials file (<role>.nk) in its --creds usage", name)
	}
	role, err := auth.ParseRole(m[1])
	if err != nil {
		return nil, fmt.Errorf("%s --help: %v", name, err)
	}
	b.role = role
	return b, nil
}

func (b *binary) flagNames() string {
	names := make([]string, 0, len(b.flags))
	for f := range b.flags {
		names = append(names, "--"+f)
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// command is a container command parsed against its binary's flags.
type command struct {
	bin   *binary
	flags map[string]string // --flag → value ("true" for a bool flag without one)
}

// parseCommand checks that args name a binary of this repository and only
// flags it accepts, each with a value where it takes one. where names the
// command in messages.
func parseCommand(where string, args []string, bins map[string]*binary) (command, []error) {
	if len(args) == 0 {
		return command{}, []error{fmt.Errorf("%s: no command: it must name the binary to run (the images have no entrypoint)", where)}
	}
	b, ok := bins[args[0]]
	if !ok || b.role == "" {
		var names []string
		for n, b := range bins {
			if b.role != "" {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		return command{}, []error{fmt.Errorf("%s: command %q names no service binary of this repository (want one of %s)", where, args[0], strings.Join(names, ", "))}
	}
	c := command{bin: b, flags: map[string]string{}}
	var errs []error
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			errs = append(errs, fmt.Errorf("%s: %s takes no arguments, got %q", where, b.name, a))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takes, known := b.flags[name]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("%s: %s has no flag --%s (its flags: %s)", where, b.name, name, b.flagNames()))
			continue
		case takes && !hasValue:
			if i+1 >= len(args) {
				errs = append(errs, fmt.Errorf("%s: %s --%s needs a value", where, b.name, name))
				continue
			}
			i++
			value = args[i]
		case !takes && !hasValue:
			value = "true"
		}
		if _, dup := c.flags[name]; dup {
			errs = append(errs, fmt.Errorf("%s: --%s given twice", where, name))
		}
		c.flags[name] = value
	}
	return c, errs
}

// readsEnv reports whether the binary reads the environment variable: its
// --help names it (flags' "env X"), or its service's code has the name as a
// string literal (the model providers' keys).
func (b *binary) readsEnv(name string) bool {
	if strings.Contains(b.help, name) {
		return true
	}
	found := false
	filepath.WalkDir(filepath.Join(repoRoot, "services", b.name), func(path string, d fs.DirEntry, err error) error {
		if err != nil || found || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		found = err == nil && bytes.Contains(src, []byte(strconv.Quote(name)))
		return nil
	})
	return found
}

// durables returns every durable consumer the services' code names (a
// constant Durable... = "name" under services/), by the service directory
// that declares it.
func durables(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(repoRoot, "services")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		service := strings.Split(filepath.ToSlash(rel), "/")[0]
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, n := range v.Names {
					if !strings.HasPrefix(n.Name, "Durable") || i >= len(v.Values) {
						continue
					}
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[s] = service
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("found no Durable constants under services/")
	}
	return out
}

// minted is a credentials directory made by scripts/deploy-creds.sh, as an
// operator would, with the public keys of nkeys.env.
type minted struct {
	dir   string
	nkeys map[string]string // RATH_NKEY_* → public key
}

var (
	mintOnce  sync.Once
	credsRoot string
	mint      minted
	mintErr   error
)

// credentials runs scripts/deploy-creds.sh once (with the built rath) and
// checks what it wrote: every role's identity, nkeys.env and a signing key
// the ledger can read.
func credentials(t *testing.T) minted {
	t.Helper()
	bins := binaries(t)
	mintOnce.Do(func() {
		var err error
		if credsRoot, err = os.MkdirTemp("", "rath-deploy-creds-"); err != nil {
			mintErr = err
			return
		}
		dir := filepath.Join(credsRoot, "creds")
		cmd := exec.Command(filepath.Join(repoRoot, "scripts", "deploy-creds.sh"), dir)
		cmd.Env = append(os.Environ(), "RATH="+bins["rath"].path)
		if out, err := cmd.CombinedOutput(); err != nil {
			mintErr = fmt.Errorf("scripts/deploy-creds.sh: %v\n%s", err, out)
			return
		}
		mint, mintErr = readMinted(dir)
	})
	if mintErr != nil {
		t.Fatal(mintErr)
	}
	return mint
}

func readMinted(dir string) (minted, error) {
	if _, err := auth.Load(dir); err != nil {
		return minted{}, fmt.Errorf("deploy-creds.sh wrote unusable identities: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, "keys", "ledger.key"))
	if err != nil {
		return minted{}, err
	}
	if _, err := events.ParsePrivateKey(key); err != nil {
		return minted{}, fmt.Errorf("deploy-creds.sh wrote a ledger key the ledger cannot read: %w", err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "keys", "ledger.pub"))
	if err != nil {
		return minted{}, err
	}
	if _, err := events.ParsePublicKey(pub); err != nil {
		return minted{}, fmt.Errorf("deploy-creds.sh wrote a public key --trust cannot read: %w", err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "nkeys.env"))
	if err != nil {
		return minted{}, err
	}
	m := minted{dir: dir, nkeys: map[string]string{}}
	for line := range strings.Lines(string(env)) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			m.nkeys[k] = v
		}
	}
	for _, r := range auth.Roles() {
		if m.nkeys[auth.EnvVar(r)] == "" {
			return minted{}, fmt.Errorf("nkeys.env has no %s", auth.EnvVar(r))
		}
	}
	return m, nil
}

// natsConfig loads a NATS node's configuration with nats-server's own parser,
// as the node would with serverName and the minted public keys in its
// environment, and checks what Rath needs of it: max_payload, JetStream, the
// cluster with a route to each of routeHosts, the monitoring port, and one
// user per role with that role's key, account and permissions.
func natsConfig(t *testing.T, where, path, serverName string, routeHosts []string, m minted) (*server.Options, []error) {
	t.Helper()
	for k, v := range m.nkeys {
		t.Setenv(k, v)
	}
	t.Setenv("NATS_SERVER_NAME", serverName)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, []error{fmt.Errorf("%s: nats-server cannot load %s: %v", where, path, err)}
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{where}, args...)...))
	}
	if opts.MaxPayload != maxPayload {
		fail("max_payload is %d, want %d (8MB, docs/operations.md)", opts.MaxPayload, maxPayload)
	}
	if !opts.JetStream {
		fail("JetStream is not enabled")
	}
	if opts.ServerName != serverName {
		fail("server_name is %q, want %q (unique per node)", opts.ServerName, serverName)
	}
	if opts.Port != natsClientPort || opts.HTTPPort != natsMonitorPort {
		fail("client port %d and monitoring port %d, want %d and %d", opts.Port, opts.HTTPPort, natsClientPort, natsMonitorPort)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port != natsClusterPort {
		fail("cluster name %q port %d: want a named cluster listening on %d", opts.Cluster.Name, opts.Cluster.Port, natsClusterPort)
	}
	var hosts []string
	for _, r := range opts.Routes {
		if r.Port() != strconv.Itoa(natsClusterPort) {
			fail("route %s is not on the cluster port %d", r, natsClusterPort)
		}
		hosts = append(hosts, r.Hostname())
	}
	slices.Sort(hosts)
	want := slices.Sorted(slices.Values(routeHosts))
	if len(opts.Routes) != natsNodes || !slices.Equal(hosts, want) {
		fail("routes go to %v, want the %d nodes %v", hosts, natsNodes, want)
	}
	users := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		users[u.Nkey] = u
	}
	for _, r := range auth.Roles() {
		u := users[m.nkeys[auth.EnvVar(r)]]
		switch {
		case u == nil:
			fail("no user for role %s (nkey $%s)", r, auth.EnvVar(r))
		case u.Account == nil || u.Account.Name != auth.Account:
			fail("the %s user is not in the account %s", r, auth.Account)
		case u.Permissions == nil || u.Permissions.Publish == nil ||
			!slices.Equal(u.Permissions.Publish.Allow, r.Permissions().Publish.Allow):
			fail("the %s user's publish permissions differ from internal/auth's table", r)
		}
	}
	return opts, errs
}

// failAll reports every problem, one per line, so a broken file shows all
// that is wrong with it at once.
func failAll(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
}
