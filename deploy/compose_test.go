package deploy

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// TestCompose loads docker-compose.yml with the compose-spec loader (the one
// docker compose uses) against credentials minted by scripts/deploy-creds.sh
// and checks it runs the whole loop on an authenticated 3-node cluster.
func TestCompose(t *testing.T) {
	failAll(t, checkCompose(t, repoRoot))
}

// minimum is how many processes of each service the compose file runs at
// least (issue 14: ledger ×2, agent worker ×2, one of the others).
var minimum = map[string]int{"session-ledger": 2, "selector": 1, "agent-worker": 2, "tool-runner": 1, "memory-svc": 1}

// loadCompose loads root's docker-compose.yml as docker compose would, with
// RATH_CREDS_DIR naming the minted identities and no other environment.
func loadCompose(root, credsDir string) (*types.Project, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(abs, "docker-compose.yml")},
		cli.WithWorkingDirectory(abs),
		cli.WithEnv([]string{"RATH_CREDS_DIR=" + credsDir}),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

func checkCompose(t *testing.T, root string) []error {
	t.Helper()
	bins := binaries(t)
	m := credentials(t)
	p, err := loadCompose(root, m.dir)
	if err != nil {
		return []error{fmt.Errorf("docker-compose.yml does not load: %v", err)}
	}
	stages, err := dockerStages(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		return []error{err}
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// The NATS nodes: the cluster configuration as each node loads it.
	var natsNames []string
	for name, s := range p.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			natsNames = append(natsNames, name)
		}
	}
	slices.Sort(natsNames)
	if len(natsNames) != natsNodes {
		fail("docker-compose.yml runs %d NATS services %v, want %d (a JetStream cluster for R3)", len(natsNames), natsNames, natsNodes)
	}
	serverNames := map[string]string{}
	for _, name := range natsNames {
		s := p.Services[name]
		where := "service " + name
		if !strings.HasPrefix(s.Image, "nats:2.15.") {
			fail("%s: image %s, want nats-server 2.15.x (what the tests run)", where, s.Image)
		}
		if s.Hostname != name {
			fail("%s: hostname %q, want %q (the routes name the nodes by it)", where, s.Hostname, name)
		}
		conf, confErrs := natsServerView(t, where, s)
		errs = append(errs, confErrs...)
		server := ""
		if v := s.Environment["NATS_SERVER_NAME"]; v != nil {
			server = *v
		}
		if other, dup := serverNames[server]; dup || server == "" {
			fail("%s: NATS_SERVER_NAME %q is empty or also %s's: each node needs its own", where, server, other)
		}
		serverNames[server] = name
		if conf != "" {
			opts, confErrs := natsConfig(t, where, conf, server, natsNames, m)
			errs = append(errs, confErrs...)
			if opts != nil && !mountedAt(s, opts.StoreDir) {
				fail("%s: JetStream's store_dir %s is on no volume: the node loses its streams when recreated", where, opts.StoreDir)
			}
		}
		if !healthy(s) || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), fmt.Sprintf(":%d/healthz", natsMonitorPort)) {
			fail("%s: no health check on the monitoring port's /healthz (the Rath services wait for it)", where)
		}
	}

	// The Rath services: a real binary, flags it accepts, its own identity.
	count := map[string]int{}
	var ledgers []command
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		if slices.Contains(natsNames, name) {
			continue
		}
		where := "service " + name
		c, cerrs := parseCommand(where, s.Command, bins)
		errs = append(errs, cerrs...)
		if c.bin == nil {
			continue
		}
		b := c.bin
		count[b.name] += s.GetScale()
		if s.Build == nil || s.Build.Target != b.name {
			fail("%s: runs %s but builds no image target %q of deploy/Dockerfile", where, b.name, b.name)
		} else if stage, ok := stages[b.name]; !ok || !strings.Contains(stage, "/out/"+b.name) {
			fail("%s: deploy/Dockerfile has no stage %q that copies /out/%s", where, b.name, b.name)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Environment)) {
			if !b.readsEnv(k) {
				fail("%s: sets %s, which %s does not read", where, k, b.name)
			}
		}
		errs = append(errs, composeCreds(where, p, s, c)...)
		urls := strings.Split(c.flags["nats"], ",")
		var hosts []string
		for _, u := range urls {
			pu, err := url.Parse(u)
			if err != nil || pu.Port() != fmt.Sprint(natsClientPort) {
				fail("%s: --nats %q: want nats://<node>:%d", where, u, natsClientPort)
				continue
			}
			hosts = append(hosts, pu.Hostname())
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, natsNames) {
			fail("%s: --nats names %v, want every node %v (so it reconnects to any)", where, hosts, natsNames)
		}
		if _, ok := b.flags["replicas"]; ok && c.flags["replicas"] != fmt.Sprint(natsNodes) {
			fail("%s: --replicas %q, want %d on a %d-node cluster", where, c.flags["replicas"], natsNodes, natsNodes)
		}
		// Dependencies: the cluster healthy first; the workers after the ledgers.
		for _, n := range natsNames {
			if d, ok := s.DependsOn[n]; !ok || d.Condition != types.ServiceConditionHealthy {
				fail("%s: does not wait for %s to be healthy (depends_on condition service_healthy)", where, n)
			}
		}
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionHealthy && !healthy(p.Services[dep]) {
				fail("%s: waits for %s to be healthy, but %s has no health check", where, dep, dep)
			}
		}
		// Health: a check where the binary serves /healthz and /readyz on
		// --http (issue 14 item 2), on the port the command gives it.
		_, serves := b.flags["http"]
		switch {
		case serves && !healthy(s):
			fail("%s: %s accepts --http now (issue 14 item 2): give the service a health check on /readyz and let its dependents wait for service_healthy", where, b.name)
		case !serves && healthy(s):
			fail("%s: has a health check, but %s serves no health endpoint (no --http flag)", where, b.name)
		case serves:
			if err := healthOnHTTP(c.flags["http"], strings.Join(s.HealthCheck.Test, " ")); err != nil {
				fail("%s: %v", where, err)
			}
		}
		grace := 15 * time.Second
		if b.name == "session-ledger" {
			grace = 30 * time.Second
			ledgers = append(ledgers, c)
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < grace {
			fail("%s: stop_grace_period under %s (docs/operations.md, Graceful shutdown)", where, grace)
		}
		switch b.name {
		case "session-ledger":
			errs = append(errs, composeKey(where, s, c)...)
		case "tool-runner":
			if s.Hostname == "" {
				fail("%s: no fixed hostname: its hand-over address is derived from it", where)
			}
			if !mountedAt(s, c.flags["workspaces"]) {
				fail("%s: --workspaces %q is on no volume: workspaces would be lost with the container", where, c.flags["workspaces"])
			}
			if st := stages[b.name]; !regexp.MustCompile(`(?m)^FROM golang:|^FROM \$\{GO_IMAGE\}`).MatchString(st) || !strings.Contains(st, " git") {
				fail("%s: the tool-runner image must carry the Go toolchain and git for tool commands", where)
			}
		}
	}
	for svc, n := range minimum {
		if count[svc] < n {
			fail("docker-compose.yml runs %d %s, want at least %d", count[svc], svc, n)
		}
	}
	// Ledgers of one deployment must agree (docs/operations.md) but differ by name.
	for i, l := range ledgers[min(1, len(ledgers)):] {
		a, b := maps.Clone(ledgers[0].flags), maps.Clone(l.flags)
		if a["name"] == b["name"] {
			fail("ledgers %d and 0 share --name %q", i+1, a["name"])
		}
		delete(a, "name")
		delete(b, "name")
		if fmt.Sprint(a) != fmt.Sprint(b) {
			fail("the ledgers' flags differ: %v vs %v (they rewrite each other's stream configuration)", a, b)
		}
	}
	return errs
}

// natsServerView copies the files mounted into a NATS container's
// configuration directory into a temporary one, so that the node's include
// resolves as it does in the container, and returns the -c file there.
func natsServerView(t *testing.T, where string, s types.ServiceConfig) (string, []error) {
	i := slices.Index(s.Command, "-c")
	if i < 0 || i+1 >= len(s.Command) {
		return "", []error{fmt.Errorf("%s: command %v names no configuration (-c FILE)", where, s.Command)}
	}
	conf := s.Command[i+1]
	dir := t.TempDir()
	found := false
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || path.Dir(v.Target) != path.Dir(conf) {
			continue
		}
		b, err := os.ReadFile(v.Source)
		if err != nil {
			return "", []error{fmt.Errorf("%s: mounts %s: %v", where, v.Source, err)}
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(v.Target)), b, 0o600); err != nil {
			return "", []error{err}
		}
		found = found || v.Target == conf
	}
	if !found {
		return "", []error{fmt.Errorf("%s: -c %s is not a file mounted into the container", where, conf)}
	}
	return filepath.Join(dir, path.Base(conf)), nil
}

// composeCreds checks that --creds is the file of the binary's own role,
// mounted from the minted directory as a secret.
func composeCreds(where string, p *types.Project, s types.ServiceConfig, c command) []error {
	creds := c.flags["creds"]
	if creds == "" {
		return []error{fmt.Errorf("%s: no --creds: the cluster refuses connections without an identity", where)}
	}
	want := auth.FileName(c.bin.role)
	if path.Base(creds) != want {
		return []error{fmt.Errorf("%s: --creds %s, want the %s role's file %s", where, creds, c.bin.role, want)}
	}
	for _, sec := range s.Secrets {
		target := sec.Target
		if target == "" {
			target = sec.Source
		}
		if !path.IsAbs(target) {
			target = "/run/secrets/" + target
		}
		if target != creds {
			continue
		}
		file := p.Secrets[sec.Source].File
		if path.Base(file) != want {
			return []error{fmt.Errorf("%s: --creds %s is mounted from %s, not a %s file", where, creds, file, want)}
		}
		id, err := auth.ReadFile(file)
		if err != nil {
			return []error{fmt.Errorf("%s: %v", where, err)}
		}
		if id.Role != c.bin.role {
			return []error{fmt.Errorf("%s: %s is the identity of role %s, want %s", where, file, id.Role, c.bin.role)}
		}
		return nil
	}
	return []error{fmt.Errorf("%s: --creds %s is no secret mounted into the container", where, creds)}
}

// composeKey checks that the ledger's --key is a key file mounted into it.
func composeKey(where string, s types.ServiceConfig, c command) []error {
	key := c.flags["key"]
	for _, v := range s.Volumes {
		rel, err := filepath.Rel(v.Target, key)
		if v.Type != types.VolumeTypeBind || err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(v.Source, rel))
		if err != nil {
			return []error{fmt.Errorf("%s: --key %s: %v", where, key, err)}
		}
		if _, err := events.ParsePrivateKey(b); err != nil {
			return []error{fmt.Errorf("%s: --key %s: %v", where, key, err)}
		}
		return nil
	}
	return []error{fmt.Errorf("%s: --key %q is in no directory mounted from the host: each ledger would make a key of its own", where, key)}
}

// healthOnHTTP checks that a health check asks /healthz or /readyz of the
// loopback port the service's --http listens on.
func healthOnHTTP(addr, test string) error {
	if addr == "" {
		return fmt.Errorf("a health check, but no --http address to serve it on")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: %v", addr, err)
	}
	if !regexp.MustCompile(`http://(127\.0\.0\.1|localhost):` + regexp.QuoteMeta(port) + `/(healthz|readyz)\b`).MatchString(test) {
		return fmt.Errorf("health check %q does not ask /healthz or /readyz on --http's port %s", test, port)
	}
	return nil
}

func healthy(s types.ServiceConfig) bool {
	return s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 0 && s.HealthCheck.Test[0] != "NONE"
}

// mountedAt reports whether dir is at or under a volume's target.
func mountedAt(s types.ServiceConfig, dir string) bool {
	for _, v := range s.Volumes {
		if rel, err := filepath.Rel(v.Target, dir); dir != "" && err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	return false
}

// dockerStages returns the text of each named stage of a Dockerfile.
func dockerStages(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	from := regexp.MustCompile(`(?im)^FROM\s+\S+(?:\s+AS\s+(\S+))?\s*$`)
	out := map[string]string{}
	idx := from.FindAllSubmatchIndex(b, -1)
	for i, m := range idx {
		end := len(b)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		if m[2] >= 0 {
			out[string(b[m[2]:m[3]])] = string(b[m[0]:end])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no named stages", file)
	}
	return out, nil
}
