package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/services/tool-runner/service"
)

// needBwrap fails a test that needs the isolating backend on a machine
// without bubblewrap: such tests are never skipped (CI installs it).
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs the bwrap sandbox backend, and bubblewrap (bwrap) is not installed: run scripts/install-sandbox.sh (apt-get install bubblewrap): %v", err)
	}
}

// needBackend fails a test that needs an isolating backend on a machine
// without its program: such tests are never skipped (CI installs them).
func needBackend(t *testing.T, backend string) {
	t.Helper()
	if backend != events.BackendGVisor {
		needBwrap(t)
		return
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatalf("this test needs the gvisor sandbox backend, and gVisor's runsc is not installed: run scripts/install-sandbox.sh (apt-get install runsc): %v", err)
	}
}

// sandboxUIDs keeps the sandbox users of these tests apart from those of
// the sandbox package's tests, which count the processes of theirs.
func sandboxUIDs(c *service.Config) { c.Isolation.UIDBase = 300000 }

// allowLocal lets sessions go to local while the default isolates.
func allowLocal(c *service.Config) { c.AllowLocal = true }

// noBwrap makes the bwrap backend fail to start: its program is missing.
func noBwrap(c *service.Config) { c.Isolation.Bwrap = "/nonexistent/bwrap" }

// backendWorkflow is a workflow of two agents: "plain" names no sandbox,
// "dev" asks for local; sandbox, if not empty, is the workflow's.
func backendWorkflow(sandbox string) string {
	wf := "name: boxes\n"
	if sandbox != "" {
		wf += "sandbox: " + sandbox + "\n"
	}
	return wf + `agents:
  - name: plain
    provider: scripted
    script: plain.yaml
    tools: [run, write_file, read_file, list_files]
  - name: dev
    provider: scripted
    script: dev.yaml
    sandbox: local
    tools: [run, list_files]
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`
}

// call requests a tool call by an agent and waits for its end; it returns
// the completion (nil when the call failed) and the failure (nil when it
// completed).
func (r *rig) call(t *testing.T, id, callID, agent, tool, args string) (*events.ToolCompleted, *events.ToolFailed) {
	t.Helper()
	req := &events.ToolRequested{CallID: callID, Tool: tool, Agent: agent, Arguments: []byte(args)}
	if _, err := r.c.Emit(context.Background(), id, req); err != nil {
		t.Fatal(err)
	}
	log := r.finish(t, id, callID)
	switch d := decode(t, log[len(log)-1]).(type) {
	case *events.ToolCompleted:
		return d, nil
	case *events.ToolFailed:
		return nil, d
	}
	t.Fatalf("call %s ended with %s", callID, log[len(log)-1].Type)
	return nil, nil
}

// ok is call for a call that must complete.
func (r *rig) ok(t *testing.T, id, callID, agent, tool, args string) *events.ToolCompleted {
	t.Helper()
	done, failed := r.call(t, id, callID, agent, tool, args)
	if failed != nil {
		t.Fatalf("%s %s failed: %s", callID, tool, failed.Error)
	}
	return done
}

// move asks the runner to move a session and waits for its answer: the
// placement, or the refusal.
func (r *rig) move(t *testing.T, id, backend string) (*events.SandboxPlaced, *events.SandboxRefused) {
	t.Helper()
	return r.moveReq(t, id, &events.SandboxRequested{Backend: backend, Reason: "test"})
}

// moveReq asks for a move as req says and waits for its answer.
func (r *rig) moveReq(t *testing.T, id string, req *events.SandboxRequested) (*events.SandboxPlaced, *events.SandboxRefused) {
	t.Helper()
	backend := req.Backend
	ack, err := r.c.Emit(context.Background(), id, req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var answer any
	found := errors.New("found")
	err = r.c.Watch(ctx, id, func(ev events.Stored) error {
		if ev.Causation == ack.ID && (ev.Type == events.TypeSandboxPlaced || ev.Type == events.TypeSandboxRefused) {
			answer = decode(t, ev)
			return found
		}
		return nil
	}, client.From(ack.Seq+1))
	if !errors.Is(err, found) {
		t.Fatalf("no answer to the move of %s to %s: %v", id, backend, err)
	}
	placed, _ := answer.(*events.SandboxPlaced)
	refused, _ := answer.(*events.SandboxRefused)
	return placed, refused
}

// placements returns the session's own placements, in order.
func (r *rig) placements(t *testing.T, id string) []*events.SandboxPlaced {
	t.Helper()
	log, err := r.c.Log(context.Background(), id, client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.SandboxPlaced
	for _, ev := range log {
		if ev.Type == events.TypeSandboxPlaced && ev.Session == id {
			out = append(out, decode(t, ev).(*events.SandboxPlaced))
		}
	}
	return out
}

func decode(t *testing.T, ev events.Stored) any {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (r *rig) startWith(t *testing.T, id string, labels map[string]string) {
	t.Helper()
	if _, err := r.c.Start(context.Background(), id, events.SessionStarted{Workflow: "boxes", WorkflowRef: r.ref, Labels: labels}); err != nil {
		t.Fatal(err)
	}
}

// The backend of a session's first placement is the one its first tool
// call's agent asks for, else the workflow's, else the runner's default; a
// later call by another agent does not move it.
func TestFirstPlacementChoosesTheBackend(t *testing.T) {
	needBwrap(t)
	t.Run("workflow", func(t *testing.T) {
		r := setupWith(t, backendWorkflow("bwrap"), sandboxUIDs, func(c *service.Config) { c.Backend = "local" })
		r.startWith(t, "w1", nil)
		done := r.ok(t, "w1", "c1", "plain", "run", `{"command":["id","-u"]}`)
		if done == nil || done.Sandbox.Backend != "bwrap" || done.Sandbox.SandboxID != "bwrap-w1" || done.Result == "" {
			t.Fatalf("first call %+v", done)
		}
		// Commands run as the sandbox's user: uid 1000 inside.
		if !strings.Contains(done.Result, "1000") {
			t.Errorf("id -u in the sandbox: %q", done.Result)
		}
		// The agent that asks for local comes second: the session stays.
		done = r.ok(t, "w1", "c2", "dev", "list_files", `{}`)
		if done == nil || done.Sandbox.Backend != "bwrap" {
			t.Fatalf("second call %+v", done)
		}
		p := r.placements(t, "w1")
		if len(p) != 1 || p[0].Backend != "bwrap" || !strings.Contains(p[0].Reason, "asked by workflow boxes") ||
			filepath.Base(filepath.Dir(p[0].Workspace)) != service.BwrapDir || !strings.HasPrefix(p[0].Isolation, "bwrap: ") {
			t.Fatalf("placements %+v", p)
		}
	})
	t.Run("agent", func(t *testing.T) {
		r := setupWith(t, backendWorkflow("bwrap"), sandboxUIDs, allowLocal)
		r.startWith(t, "a1", nil)
		done := r.ok(t, "a1", "c1", "dev", "list_files", `{}`)
		if done == nil || done.Sandbox.Backend != "local" {
			t.Fatalf("call %+v", done)
		}
		p := r.placements(t, "a1")
		if len(p) != 1 || !strings.Contains(p[0].Reason, "asked by agent dev") || p[0].Isolation != events.IsolationNone {
			t.Fatalf("placements %+v", p)
		}
	})
	t.Run("default", func(t *testing.T) {
		r := setupWith(t, backendWorkflow(""), sandboxUIDs, allowLocal, func(c *service.Config) { c.Backend = "bwrap" })
		r.startWith(t, "d1", nil)
		done := r.ok(t, "d1", "c1", "plain", "list_files", `{}`)
		if done == nil || done.Sandbox.Backend != "bwrap" {
			t.Fatalf("call %+v", done)
		}
		if p := r.placements(t, "d1"); len(p) != 1 || !strings.Contains(p[0].Reason, "the tool runner's default") {
			t.Fatalf("placements %+v", p)
		}
	})
}

// A workflow that asks for a backend the runner cannot run fails its tool
// calls with the reason, naming the backend; nothing runs on local instead.
func TestWorkflowAskingForAnUnavailableBackend(t *testing.T) {
	r := setupWith(t, backendWorkflow("bwrap"), noBwrap)
	r.startWith(t, "u1", nil)
	done, failed := r.call(t, "u1", "c1", "plain", "run", `{"command":["true"]}`)
	if done != nil || failed == nil {
		t.Fatalf("the call ran: %+v", done)
	}
	for _, want := range []string{"bwrap", "asked by workflow boxes", "/nonexistent/bwrap", "not found"} {
		if !strings.Contains(failed.Error, want) {
			t.Errorf("error %q does not say %q", failed.Error, want)
		}
	}
	if p := r.placements(t, "u1"); len(p) != 0 {
		t.Fatalf("placed: %+v", p)
	}
	// The runner itself fell back to local for sessions that ask nothing.
	done = r.ok(t, "u1", "c2", "dev", "list_files", `{}`)
	if done == nil || done.Sandbox.Backend != "local" {
		t.Fatalf("call of the agent asking for local: %+v", done)
	}
}

// A session moves between backends between tool calls: the new workspace
// starts at the old one's head commit, the placement says where it came
// from, and the calls after the move run on the new backend. Moves that
// make no sense are refused, and the refusal is in the session's log.
func TestMoveBetweenBackends(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal)
	r.startWith(t, "m1", nil)
	wrote := r.ok(t, "m1", "w1", "plain", "write_file", `{"path":"notes.txt","content":"before the move\n"}`)
	if wrote == nil || wrote.Sandbox.Backend != "local" {
		t.Fatalf("write %+v", wrote)
	}

	placed, refused := r.move(t, "m1", "bwrap")
	if refused != nil {
		t.Fatalf("move refused: %s", refused.Reason)
	}
	if placed.Backend != "bwrap" || placed.SandboxID != "bwrap-m1" || placed.Commit != wrote.CommitAfter ||
		placed.From == nil || *placed.From != (events.Sandbox{Backend: "local", SandboxID: "local-m1"}) ||
		!strings.HasPrefix(placed.Isolation, "bwrap: ") || !strings.Contains(placed.Reason, "moved from local (local-m1) at commit "+wrote.CommitAfter) {
		t.Fatalf("placed %+v", placed)
	}
	read := r.ok(t, "m1", "r1", "plain", "run", `{"command":["cat","notes.txt"]}`)
	if read == nil || read.Sandbox.Backend != "bwrap" || !strings.Contains(read.Result, "before the move") || read.CommitBefore != wrote.CommitAfter {
		t.Fatalf("after the move %+v", read)
	}
	st, err := r.c.State(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Sandbox == nil || st.Sandbox.Backend != "bwrap" || st.Sandbox.Isolation != placed.Isolation {
		t.Fatalf("state's placement %+v", st.Sandbox)
	}

	for _, tc := range []struct{ backend, want string }{
		{"bwrap", "on bwrap already (bwrap-m1)"},
		{"docker", `unknown sandbox backend "docker" (backends: bwrap, gvisor, remote, local)`},
	} {
		if placed, refused := r.move(t, "m1", tc.backend); refused == nil || !strings.Contains(refused.Reason, tc.want) || refused.Backend != tc.backend {
			t.Errorf("move to %s: placed %+v refused %+v, want a refusal saying %q", tc.backend, placed, refused, tc.want)
		}
	}

	// Back to local, where the session was at the commit it left with: the
	// workspace there is taken up again.
	placed, refused = r.move(t, "m1", "local")
	if refused != nil || placed.Backend != "local" || placed.From.Backend != "bwrap" || placed.Commit != wrote.CommitAfter {
		t.Fatalf("back to local: placed %+v refused %+v", placed, refused)
	}
	// Once it changed there, it cannot go back to bwrap's older workspace.
	wrote2 := r.ok(t, "m1", "w2", "plain", "write_file", `{"path":"notes.txt","content":"after\n"}`)
	if wrote2 == nil || wrote2.Sandbox.Backend != "local" {
		t.Fatalf("write after the move back %+v", wrote2)
	}
	if _, refused := r.move(t, "m1", "bwrap"); refused == nil || !strings.Contains(refused.Reason, "only while nothing changed since it left") {
		t.Fatalf("move back to a stale workspace: refused %+v", refused)
	}

	// A closed session takes no request: the ledger refuses it.
	if _, err := r.c.Emit(context.Background(), "m1", &events.SessionClosed{Outcome: "done"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.c.Emit(context.Background(), "m1", &events.SandboxRequested{Backend: "bwrap"})
	if !errors.Is(err, api.ErrClosed) {
		t.Fatalf("move of a closed session: %v", err)
	}
}

// A session moves to gvisor as to bwrap (rath.sandbox.requested), and its
// calls after the move run in a gVisor sandbox at the commit it left with.
func TestMoveToGVisor(t *testing.T) {
	needBackend(t, events.BackendGVisor)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal)
	r.startWith(t, "g1", nil)
	wrote := r.ok(t, "g1", "w1", "plain", "write_file", `{"path":"notes.txt","content":"before the move\n"}`)
	if wrote == nil || wrote.Sandbox.Backend != "local" {
		t.Fatalf("write %+v", wrote)
	}
	placed, refused := r.move(t, "g1", "gvisor")
	if refused != nil {
		t.Fatalf("move refused: %s", refused.Reason)
	}
	if placed.Backend != "gvisor" || placed.SandboxID != "gvisor-g1" || placed.Commit != wrote.CommitAfter ||
		!strings.HasPrefix(placed.Isolation, "gvisor: gVisor's kernel in user space") {
		t.Fatalf("placed %+v", placed)
	}
	// The kernel the command sees is gVisor's, and the workspace is the
	// one it left with.
	read := r.ok(t, "g1", "r1", "plain", "run", `{"command":["sh","-c","cat notes.txt; dmesg | head -n 1"]}`)
	if read == nil || read.Sandbox.Backend != "gvisor" || !strings.Contains(read.Result, "before the move") || !strings.Contains(read.Result, "gVisor") {
		t.Fatalf("after the move %+v", read)
	}
	if _, refused := r.move(t, "g1", "gvisor"); refused == nil || !strings.Contains(refused.Reason, "on gvisor already (gvisor-g1)") {
		t.Fatalf("move to gvisor again: refused %+v", refused)
	}
}

// A request delivered again after it was answered is not answered twice:
// the second delivery would otherwise find the session on the backend it
// asked for and refuse. (Handed over on the runner's hand-over subject,
// which runs it as a redelivery would.)
func TestMoveAnsweredOnce(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal)
	r.startWith(t, "o1", nil)
	r.ok(t, "o1", "c1", "plain", "list_files", `{}`)
	placed, refused := r.move(t, "o1", "bwrap")
	if refused != nil {
		t.Fatalf("refused: %s", refused.Reason)
	}
	log, err := r.c.Log(context.Background(), "o1", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	var req events.Stored
	for _, ev := range log {
		if ev.Type == events.TypeSandboxRequested {
			req = ev
		}
	}
	// The subject the runner holding the bwrap workspace answers on.
	sum := sha256.Sum256([]byte(placed.Host + "\x00" + filepath.Dir(placed.Workspace)))
	reply, err := r.c.Conn().Request("rath.toolrunner."+hex.EncodeToString(sum[:8]), req.Raw, 30*time.Second)
	if err != nil || len(reply.Data) != 0 {
		t.Fatalf("hand-over: %v %q", err, reply.Data)
	}
	log, err = r.c.Log(context.Background(), "o1", client.Range{From: req.Seq + 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		if ev.Causation == req.ID && ev.Type != events.TypeSandboxPlaced {
			t.Errorf("a second answer: %s %s", ev.Type, ev.Data)
		}
	}
}

// Before its first tool call a session moves by being placed where the
// request says, from its seed.
func TestMoveBeforeTheFirstCall(t *testing.T) {
	r := setupWith(t, backendWorkflow("bwrap"), noBwrap)
	r.startWith(t, "f1", nil)
	placed, refused := r.move(t, "f1", "local")
	if refused != nil || placed.Backend != "local" || placed.From != nil || !strings.Contains(placed.Reason, "on request before the first tool call") {
		t.Fatalf("placed %+v refused %+v", placed, refused)
	}
	// The workflow's bwrap no longer matters: the session is placed.
	done := r.ok(t, "f1", "c1", "plain", "list_files", `{}`)
	if done == nil || done.Sandbox.Backend != "local" {
		t.Fatalf("call %+v", done)
	}
	// A backend the runner cannot run is refused with why.
	if _, refused := r.move(t, "f1", "bwrap"); refused == nil || !strings.Contains(refused.Reason, "sandbox backend bwrap does not work on this tool runner") ||
		!strings.Contains(refused.Reason, "/nonexistent/bwrap") {
		t.Fatalf("move to a broken backend: refused %+v", refused)
	}
}

// A fork keeps its parent's backend (here not the workflow's: the parent
// moved), at the fork point's commit; moving the fork leaves the parent
// where it is.
func TestForkKeepsItsOwnPlacement(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal)
	r.startWith(t, "p1", nil)
	r.ok(t, "p1", "w0", "plain", "list_files", `{}`)
	if _, refused := r.move(t, "p1", "bwrap"); refused != nil {
		t.Fatalf("parent's move refused: %s", refused.Reason)
	}
	wrote := r.ok(t, "p1", "w1", "plain", "write_file", `{"path":"a.txt","content":"shared\n"}`)
	if wrote.Sandbox.Backend != "bwrap" {
		t.Fatalf("parent's write %+v", wrote)
	}
	st, err := r.c.State(context.Background(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Fork(context.Background(), api.ForkRequest{Parent: "p1", At: st.Seq, ID: "p1-b"}); err != nil {
		t.Fatal(err)
	}
	r.ok(t, "p1", "w2", "plain", "write_file", `{"path":"a.txt","content":"parent only\n"}`)
	read := r.ok(t, "p1-b", "r1", "plain", "read_file", `{"path":"a.txt"}`)
	if read == nil || read.Sandbox.Backend != "bwrap" || read.Sandbox.SandboxID != "bwrap-p1-b" || !strings.Contains(read.Result, "shared") || read.CommitBefore != wrote.CommitAfter {
		t.Fatalf("fork's read %+v", read)
	}
	if p := r.placements(t, "p1-b"); len(p) != 1 || p[0].Backend != "bwrap" || !strings.Contains(p[0].Reason, "fork of p1 at commit "+wrote.CommitAfter) {
		t.Fatalf("fork's placements %+v", p)
	}

	placed, refused := r.move(t, "p1-b", "local")
	if refused != nil || placed.Backend != "local" || placed.SandboxID != "local-p1-b" || placed.From.SandboxID != "bwrap-p1-b" {
		t.Fatalf("fork's move: placed %+v refused %+v", placed, refused)
	}
	parent := r.ok(t, "p1", "r2", "plain", "read_file", `{"path":"a.txt"}`)
	if parent == nil || parent.Sandbox.Backend != "bwrap" || !strings.Contains(parent.Result, "parent only") {
		t.Fatalf("parent after the fork moved %+v", parent)
	}
	fork := r.ok(t, "p1-b", "r3", "plain", "read_file", `{"path":"a.txt"}`)
	if fork == nil || fork.Sandbox.Backend != "local" || !strings.Contains(fork.Result, "shared") {
		t.Fatalf("fork after its move %+v", fork)
	}
}

// A fork that was never placed moves from its parent's workspace, at the
// fork point's commit.
func TestUnplacedForkMoves(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs, allowLocal)
	r.startWith(t, "q1", nil)
	wrote := r.ok(t, "q1", "w1", "plain", "write_file", `{"path":"a.txt","content":"shared\n"}`)
	st, err := r.c.State(context.Background(), "q1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Fork(context.Background(), api.ForkRequest{Parent: "q1", At: st.Seq, ID: "q1-b"}); err != nil {
		t.Fatal(err)
	}
	placed, refused := r.move(t, "q1-b", "bwrap")
	if refused != nil || placed.Backend != "bwrap" || placed.Commit != wrote.CommitAfter || placed.From.SandboxID != "local-q1" {
		t.Fatalf("placed %+v refused %+v", placed, refused)
	}
	read := r.ok(t, "q1-b", "r1", "plain", "run", `{"command":["cat","a.txt"]}`)
	if read == nil || read.Sandbox.Backend != "bwrap" || !strings.Contains(read.Result, "shared") {
		t.Fatalf("fork's read %+v", read)
	}
}

// What a bwrap placement says about its user is what the sandbox does: as
// root, the tenant's commands run as the host user it names.
func TestIsolationNamesTheHostUser(t *testing.T) {
	needBwrap(t)
	if os.Geteuid() != 0 {
		t.Fatalf("this test checks the sandbox user the runner picks as root; run it as root (CI does)")
	}
	r := setupWith(t, backendWorkflow("bwrap"), sandboxUIDs, allowLocal)
	r.startWith(t, "i1", nil)
	done := r.ok(t, "i1", "c1", "plain", "run", `{"command":["sh","-c","echo x > made-inside"]}`)
	if done == nil || done.ExitCode != 0 {
		t.Fatalf("run %+v", done)
	}
	// The call's evidence names every limit it ran under: its processes',
	// its own as a whole (a control group: the runner is root) and the
	// system-call filter.
	for _, want := range []string{"nproc=256", "call-memory=", "call-processes=", "call-cpu=", "cgroup v", "seccomp="} {
		if !strings.Contains(done.Limits, want) {
			t.Errorf("the completion's limits %q do not name %s", done.Limits, want)
		}
	}
	p := r.placements(t, "i1")
	if len(p) != 1 {
		t.Fatalf("placements %+v", p)
	}
	for _, want := range []string{"per call, all its processes together (cgroup v", "seccomp filter: "} {
		if !strings.Contains(p[0].Isolation, want) {
			t.Errorf("the placement's isolation %q does not say %q", p[0].Isolation, want)
		}
	}
	fi, err := os.Stat(filepath.Join(p[0].Workspace, "made-inside"))
	if err != nil {
		t.Fatal(err)
	}
	uid := fi.Sys().(*syscall.Stat_t).Uid
	if want := "host uid " + strconv.Itoa(int(uid)) + " (tenant "; !strings.Contains(p[0].Isolation, want) {
		t.Fatalf("the file was made by uid %d; isolation says %q", uid, p[0].Isolation)
	}
}

// What the runner finds about its backends: auto takes bwrap where it
// works and says why not where it does not; a backend asked for by name
// must work.
func TestCheckSandboxes(t *testing.T) {
	needBwrap(t)
	needBackend(t, events.BackendGVisor)
	cfg := service.DefaultConfig()
	cfg.Sandbox.Root = t.TempDir()
	cfg.Sandbox.Path = os.Getenv("PATH")
	s, err := service.CheckSandboxes(context.Background(), cfg)
	if err != nil || s.Err() != nil || s.Default != "bwrap" || s.Warning != "" || len(s.Backends) != 3 {
		t.Fatalf("%+v %v %v", s, err, s.Err())
	}
	for _, b := range s.Backends {
		if !b.Works || b.Why != "" || b.Development != (b.Name == "local") || b.Isolation == "" {
			t.Errorf("backend %+v", b)
		}
		if !strings.HasPrefix(b.CallLimits, "cgroup v") || (b.Filter != "") != (b.Name == "bwrap") {
			t.Errorf("backend %s holds a call's limits by %q, filters by %q; want a control group (the tests run as root) and bwrap's filter", b.Name, b.CallLimits, b.Filter)
		}
	}

	// gvisor is there when asked for, never auto's choice; without runsc
	// it says so.
	cfg.Isolation.Runsc = "/nonexistent/runsc"
	s, err = service.CheckSandboxes(context.Background(), cfg)
	if gv := s.Backends[1]; err != nil || s.Default != "bwrap" || gv.Name != "gvisor" || gv.Works || !strings.Contains(gv.Why, "/nonexistent/runsc") || !strings.Contains(gv.Program, "not installed") {
		t.Fatalf("gvisor without runsc: %+v %v", s, err)
	}
	cfg.Backend = "gvisor"
	if s, _ = service.CheckSandboxes(context.Background(), cfg); s.Err() == nil || !strings.Contains(s.Err().Error(), "default sandbox backend gvisor does not work") {
		t.Fatalf("gvisor asked for without runsc: %+v %v", s, s.Err())
	}
	cfg.Backend = service.BackendAuto
	cfg.Isolation.Runsc = ""

	noBwrap(&cfg)
	s, err = service.CheckSandboxes(context.Background(), cfg)
	if err != nil || s.Err() != nil || s.Default != "local" || !strings.Contains(s.Warning, "/nonexistent/bwrap") || !strings.Contains(s.Warning, "no isolation") {
		t.Fatalf("auto without bwrap: %+v %v", s, err)
	}
	cfg.Backend = "bwrap"
	s, err = service.CheckSandboxes(context.Background(), cfg)
	if err != nil || s.Default != "" || s.Err() == nil || !strings.Contains(s.Err().Error(), "default sandbox backend bwrap does not work") {
		t.Fatalf("bwrap asked for without bwrap: %+v %v %v", s, err, s.Err())
	}
	cfg.Backend = "docker"
	if _, err := service.CheckSandboxes(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `sandbox backend "docker"`) {
		t.Fatalf("unknown backend: %v", err)
	}
}

// A session's MCP server runs in the session's sandbox, and moves with it:
// on bwrap it is the first processes of a pid namespace of its own, on
// local a process of the host.
func TestMCPServerFollowsTheSession(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, `name: calc
sandbox: bwrap
agents:
  - name: a
    provider: scripted
    script: a.yaml
    tools: [calc.pid, calc.write]
mcp_servers:
  - name: calc
    command: [`+calcServer(t)+`]
rules:
  - name: never
    when: "false"
    route: {close: {outcome: done}}
`, sandboxUIDs, allowLocal, func(c *service.Config) { c.Backend = "bwrap" })
	r.start(t, "x1")
	pid := func(callID string) (int, *events.ToolCompleted) {
		t.Helper()
		r.request(t, "x1", callID, "calc.pid", "")
		log := r.finish(t, "x1", callID)
		done, ok := decode(t, log[len(log)-1]).(*events.ToolCompleted)
		if !ok {
			t.Fatalf("%s: %s", callID, log[len(log)-1].Data)
		}
		n, err := strconv.Atoi(done.Result)
		if err != nil {
			t.Fatal(err)
		}
		return n, done
	}
	n, done := pid("p1")
	if done.Sandbox.Backend != "bwrap" || n > 10 {
		t.Fatalf("on bwrap the server is pid %d (%+v): not in a pid namespace of its own", n, done.Sandbox)
	}
	if placed, refused := r.move(t, "x1", "local"); refused != nil || placed.Backend != "local" {
		t.Fatalf("move: %+v %+v", placed, refused)
	}
	n, done = pid("p2")
	if done.Sandbox.Backend != "local" || syscall.Kill(n, 0) != nil {
		t.Fatalf("on local the server is pid %d (%+v), which is no process of this host", n, done.Sandbox)
	}
}

// Where the default isolates, a client of the bus cannot take a session out
// of isolation unless the operator allows it: a workflow asking for local
// fails its calls, and a move to local is refused, both naming the flag.
func TestLocalOnlyWhereTheOperatorAllowsIt(t *testing.T) {
	needBwrap(t)
	r := setupWith(t, backendWorkflow("local"), sandboxUIDs)
	r.start(t, "l1")
	done, failed := r.call(t, "l1", "c1", "plain", "list_files", `{}`)
	if done != nil || !strings.Contains(failed.Error, "--sandbox-allow-local") {
		t.Fatalf("a call on local: %+v %+v, want failed naming --sandbox-allow-local", done, failed)
	}
	r2 := setupWith(t, backendWorkflow(""), sandboxUIDs)
	r2.start(t, "l2")
	if done := r2.ok(t, "l2", "c1", "plain", "list_files", `{}`); done.Sandbox.Backend != "bwrap" {
		t.Fatalf("placed on %s", done.Sandbox.Backend)
	}
	if _, refused := r2.move(t, "l2", "local"); refused == nil || !strings.Contains(refused.Reason, "--sandbox-allow-local") {
		t.Errorf("move to local: %+v, want refused naming --sandbox-allow-local", refused)
	}
}
