package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// needBwrap fails a test that needs the bwrap sandbox backend on a machine
// without bubblewrap: such tests are never skipped (CI installs it).
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs the bwrap sandbox backend, and bubblewrap (bwrap) is not installed: run scripts/install-sandbox.sh (apt-get install bubblewrap): %v", err)
	}
}

// withoutBwrap points PATH at a directory holding git alone, as on a
// machine without bubblewrap.
func withoutBwrap(t *testing.T) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(git, filepath.Join(dir, "git")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

// offline runs rath without NATS.
func offline(args ...string) result {
	var out, errb bytes.Buffer
	code := execute(context.Background(), env{Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// noNATS is a NATS URL where nothing answers: doctor then checks the
// sandboxes and says it reached no runtime (exit 6).
const noNATS = "nats://127.0.0.1:1"

// rath doctor says which backends work and which is the default; it exits
// 0 only if the default works and it reached a runtime.
func TestDoctor(t *testing.T) {
	needBwrap(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatalf("rath doctor's test needs the gvisor backend, and gVisor's runsc is not installed: run scripts/install-sandbox.sh (apt-get install runsc): %v", err)
	}
	r := offline("--nats", noNATS, "doctor")
	if r.code != exitUnavailable || !strings.Contains(r.stdout, "  bwrap  works\n") || !strings.Contains(r.stdout, "  local  works\n") ||
		!strings.Contains(r.stdout, "  gvisor works\n         program: ") || !strings.Contains(r.stdout, "runsc version") ||
		!strings.Contains(r.stdout, "default backend: bwrap (--sandbox auto)") || !strings.Contains(r.stdout, "for development only") {
		t.Fatalf("doctor: %+v", r)
	}
	// The tests run as root, where a call's limits hold in a control group
	// of its own; bwrap's commands also run under a system-call filter.
	if !strings.Contains(r.stdout, "         call limits: cgroup v") || !strings.Contains(r.stdout, "         filter: seccomp filter: ") {
		t.Fatalf("doctor does not say how a call's limits hold: %+v", r)
	}
	if r := offline("--nats", noNATS, "doctor", "--json"); r.code != exitUnavailable || !strings.Contains(r.stdout, `"default": "bwrap"`) || !strings.Contains(r.stdout, `"reached": false`) {
		t.Fatalf("doctor --json: %+v", r)
	}
	if r := offline("--nats", noNATS, "doctor", "--sandbox", "docker"); r.code != exitUsage {
		t.Fatalf("doctor --sandbox docker: %+v", r)
	}
}

func TestDoctorWithoutBubblewrap(t *testing.T) {
	withoutBwrap(t)
	r := offline("--nats", noNATS, "doctor")
	if r.code != exitUnavailable || !strings.Contains(r.stdout, "  bwrap  FAILS\n") || !strings.Contains(r.stdout, "bubblewrap (bwrap) not found") ||
		!strings.Contains(r.stdout, "default backend: local (--sandbox auto)") || !strings.Contains(r.stdout, "WARNING: ") {
		t.Fatalf("doctor without bwrap: %+v", r)
	}
	r = offline("--nats", noNATS, "doctor", "--sandbox", "bwrap")
	if r.code != exitError || !strings.Contains(r.stderr, "default sandbox backend bwrap does not work on this machine") {
		t.Fatalf("doctor --sandbox bwrap without bwrap: %+v", r)
	}
	// rath up stops before it starts anything, saying why.
	cfg := runtime.DefaultConfig()
	cfg.Data, cfg.Listen = t.TempDir(), "127.0.0.1:0"
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	cfg.ToolRunner.Backend = "bwrap"
	var out bytes.Buffer
	err := up(context.Background(), cfg, httpEndpoint{}, gatewayEndpoint{}, &out, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "default sandbox backend bwrap does not work") || strings.Contains(out.String(), "NATS") ||
		!strings.Contains(out.String(), "rath: sandbox backend bwrap does not work here: ") {
		t.Fatalf("up without bwrap: %v\n%s", err, out.String())
	}
}

// rath to moves a session between backends and says where it went; rath
// log, rath state and the refusals say what each placement isolates.
func TestMoveFromTheCommandLine(t *testing.T) {
	needBwrap(t)
	ctx := context.Background()
	cfg := demoConfig(t.TempDir())
	cfg.ToolRunner.Backend = "local"
	rt, err := startRuntime(ctx, cfg, "rath-to-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	rt.StartLoop()
	upCreds.Store(rt.URL, rt.Creds)
	waitReady(t, rt.URL)
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}

	ok(t, rt.URL, "start", "--id", "s1")
	ok(t, rt.URL, "emit", "s1", events.TypeToolRequested, "--data", `{"call_id":"w1","tool":"write_file","arguments":{"path":"a.txt","content":"kept\n"}}`)
	waitCall(t, c, "s1", "w1")

	out := ok(t, rt.URL, "to", "s1", "bwrap", "--reason", "isolate it")
	if !strings.HasPrefix(out, "s1 moved from local (local-s1) to bwrap (bwrap-s1) at commit ") || !strings.Contains(out, "isolation: bwrap: new user") {
		t.Fatalf("rath to printed %q", out)
	}
	ok(t, rt.URL, "emit", "s1", events.TypeToolRequested, "--data", `{"call_id":"r1","tool":"run","arguments":{"command":["cat","a.txt"]}}`)
	if done := waitCall(t, c, "s1", "r1"); done.Sandbox.Backend != "bwrap" || !strings.Contains(done.Result, "kept") {
		t.Fatalf("after the move: %+v", done)
	}

	log := ok(t, rt.URL, "log", "s1")
	for _, want := range []string{"local/local-s1 (development backend: no isolation)", "rath.sandbox.requested            move to sandbox bwrap requested: isolate it",
		"bwrap/bwrap-s1 (isolation: bwrap: new user", "moved from local/local-s1"} {
		if !strings.Contains(log, want) {
			t.Errorf("rath log lacks %q:\n%s", want, log)
		}
	}
	if state := ok(t, rt.URL, "state", "s1"); !strings.Contains(state, "isolation  bwrap: new user") {
		t.Errorf("rath state:\n%s", state)
	}

	r := rath(t, rt.URL, "to", "s1", "bwrap")
	if r.code != exitRefused || !strings.Contains(r.stderr, "refused") || !strings.Contains(r.stderr, "on bwrap already") {
		t.Errorf("a second move to bwrap: %+v", r)
	}
	if r := rath(t, rt.URL, "to", "s1", "docker"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown sandbox backend "docker"`) {
		t.Errorf("a move to docker: %+v", r)
	}
	ok(t, rt.URL, "to", "s1", "local")
	if state := ok(t, rt.URL, "state", "s1"); !strings.Contains(state, "isolation  none: local is a development backend") {
		t.Errorf("rath state after the move back:\n%s", state)
	}

	// Pools: bad names are usage errors; a pool without a runner makes
	// the move wait, which rath to and rath state say.
	for _, bad := range []string{"GPU/bwrap", "/bwrap", "gpu.x/bwrap", "a/b/bwrap", "gpu/docker", strings.Repeat("p", 33) + "/bwrap"} {
		if r := rath(t, rt.URL, "to", "s1", bad); r.code != exitUsage || !strings.Contains(r.stderr, "pool") && !strings.Contains(r.stderr, "unknown sandbox backend") {
			t.Errorf("rath to s1 %s: %+v", bad, r)
		}
	}
	if r := rath(t, rt.URL, "emit", "s1", events.TypeSandboxRequested, "--data", `{"backend":"bwrap","pool":"../etc"}`); r.code == 0 || !strings.Contains(r.stderr, "pool") {
		t.Errorf("a request naming pool ../etc: %+v", r)
	}
	r = rath(t, rt.URL, "to", "s1", "gpu/bwrap", "--wait", "300ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no tool runner of pool gpu took s1") {
		t.Errorf("a move to a pool without a runner: %+v", r)
	}
	if state := ok(t, rt.URL, "state", "s1"); !strings.Contains(state, "moving") || !strings.Contains(state, "to gpu/bwrap") {
		t.Errorf("rath state while moving:\n%s", state)
	}
	if log := ok(t, rt.URL, "log", "s1"); !strings.Contains(log, "move to sandbox gpu/bwrap requested") {
		t.Errorf("rath log lacks the move to gpu/bwrap:\n%s", log)
	}
	ok(t, rt.URL, "close", "s1")
	if r := rath(t, rt.URL, "to", "s1", "bwrap"); r.code != exitRefused || !strings.Contains(r.stderr, "session_closed") && !strings.Contains(r.stderr, "closed") {
		t.Errorf("a move of a closed session: %+v", r)
	}
}

// Without a tool runner, rath to says so after --wait; the request stays.
func TestMoveWithoutARunner(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	r := rath(t, url, "to", "s1", "bwrap", "--wait", "300ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no tool runner answered the move of s1") {
		t.Fatalf("%+v", r)
	}
	if log := ok(t, url, "log", "s1"); !strings.Contains(log, "rath.sandbox.requested") {
		t.Fatalf("the request is not in the log:\n%s", log)
	}
}

// waitCall waits for a tool call's completion.
func waitCall(t *testing.T, c *client.Client, id, callID string) *events.ToolCompleted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var done *events.ToolCompleted
	found := errors.New("found")
	err := c.Watch(ctx, id, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		switch d := d.(type) {
		case *events.ToolCompleted:
			if d.CallID == callID {
				done = d
				return found
			}
		case *events.ToolFailed:
			if d.CallID == callID {
				return errors.New("call " + callID + " failed: " + d.Error)
			}
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("call %s: %v", callID, err)
	}
	return done
}

// What rath up and rath demo print about the sandboxes: a development
// default is a warning, and a backend that does not work says why, once.
func TestPrintSandboxes(t *testing.T) {
	withoutBwrap(t)
	cfg := runtime.DefaultConfig().ToolRunner
	cfg.Sandbox.Root, cfg.Backend = t.TempDir(), toolrunner.BackendAuto
	s, err := toolrunner.CheckSandboxes(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printSandboxes(&b, "rath demo", s)
	bwrap := s.Backends[0]
	if bwrap.Name != "bwrap" || bwrap.Works || bwrap.Why == "" {
		t.Fatalf("bwrap without bwrap on PATH: %+v", bwrap)
	}
	gvisor := s.Backends[1]
	if gvisor.Name != "gvisor" || gvisor.Works || gvisor.Why == "" {
		t.Fatalf("gvisor without runsc on PATH: %+v", gvisor)
	}
	want := "rath demo: sandbox backend bwrap does not work here: " + bwrap.Why + `
rath demo: sandbox backend gvisor does not work here: ` + gvisor.Why + `
rath demo: sandbox backend local works (development only: no isolation)
rath demo: WARNING: sessions whose workflow names no sandbox are placed on local (--sandbox auto), a development backend with no isolation: their commands run as the runner's user on this host
`
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}

// rath doctor --nats checks the deployment too: a ledger's streams pass as
// admin; a server where no ledger ever ran fails, naming the fix.
func TestDoctorChecksTheDeployment(t *testing.T) {
	url := startLedger(t)
	r := rath(t, url, "doctor", "--creds", natstest.CredsFile(t, url, auth.RoleAdmin))
	if r.code != exitOK || !strings.Contains(r.stdout, "  ok    stream RATH_SESSIONS: ") || !strings.Contains(r.stdout, "the admin role's permissions exactly") {
		t.Fatalf("doctor of a healthy deployment: %+v", r)
	}
	if r := rath(t, url, "doctor"); r.code != exitOK || !strings.Contains(r.stdout, "the client role's permissions exactly") ||
		!strings.Contains(r.stdout, "fix: run doctor with admin credentials") {
		t.Fatalf("doctor as a client: %+v", r)
	}

	ns, _ := natstest.Start(t)
	empty := ns.ClientURL()
	r = rath(t, empty, "doctor", "--creds", natstest.CredsFile(t, empty, auth.RoleAdmin))
	if r.code != exitError || !strings.Contains(r.stdout, "  FAIL  stream RATH_SESSIONS: RATH_SESSIONS does not exist") ||
		!strings.Contains(r.stdout, "fix: start a ledger") || !strings.Contains(r.stderr, "the NATS deployment has problems") {
		t.Fatalf("doctor of a server without a ledger: %+v", r)
	}
	if r := rath(t, noNATS, "doctor"); r.code != exitUnavailable || !strings.Contains(r.stdout, "FAIL  not reachable") {
		t.Fatalf("doctor of a --nats that is not there: %+v", r)
	}
}

// A move to local where the operator keeps sessions isolated says it is not
// allowed, and how the operator allows it; local itself works here.
func TestMoveToLocalNotAllowed(t *testing.T) {
	needBwrap(t)
	cfg := demoConfig(t.TempDir())
	cfg.ToolRunner.Backend = "bwrap"
	rt, err := startRuntime(context.Background(), cfg, "rath-to-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	rt.StartLoop()
	upCreds.Store(rt.URL, rt.Creds)
	waitReady(t, rt.URL)

	ok(t, rt.URL, "start", "--id", "s1")
	r := rath(t, rt.URL, "to", "s1", "local", "--reason", "debug on the host")
	if r.code != exitRefused || !strings.Contains(r.stderr, "sandbox backend local is not allowed on this tool runner") ||
		!strings.Contains(r.stderr, "--sandbox-allow-local") || strings.Contains(r.stderr, "does not work") || strings.Contains(r.stderr, "--help") {
		t.Errorf("a move to local without --sandbox-allow-local: %+v, want exit %d saying it is not allowed and naming the flag", r, exitRefused)
	}
}
