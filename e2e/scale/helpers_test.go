package e2e_test

// The scale tests' rig: an embedded JetStream in the test process and every
// Rath service as its own OS process (the binaries `rath up` would run),
// plus a tap on the ledger's append subject that attributes each proposal to
// the process that made it, and a follower of the live feed that notes when
// sessions close. The crash-point test uses an in-process variant.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/testsuite"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// The services run as processes, named as their binaries. The worker kinds'
// durable consumer names are the same strings (each service's Durable
// constant, in an internal package this test cannot import).
const (
	kindLedger   = "session-ledger"
	kindSelector = "selector"
	kindWorker   = "agent-worker"
	kindRunner   = "tool-runner"
)

var workerKinds = []string{kindSelector, kindWorker, kindRunner}

// The binaries are built once per test binary, on first use, so that
// `go test -short` builds nothing.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// serviceBinary returns the path of a service's binary, building all four
// with one `go build` the first time.
func serviceBinary(t *testing.T, kind string) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "rath-scale-bin-")
		if binErr != nil {
			return
		}
		var pkgs []string
		for _, k := range []string{kindLedger, kindSelector, kindWorker, kindRunner} {
			pkgs = append(pkgs, "github.com/openrath/rath/services/"+k)
		}
		binErr = proctest.Build(binDir, pkgs...)
	})
	if binErr != nil {
		t.Fatalf("build the services: %v", binErr)
	}
	return filepath.Join(binDir, kind)
}

// proc is one service OS process.
type proc struct {
	kind, name string
	cmd        *exec.Cmd
	stderr     *proctest.LogBuffer
	exited     chan struct{} // closed once Wait returned
	err        error         // Wait's result, valid after exited
	// inbox is the reply-subject prefix of the process's NATS connection
	// ("_INBOX.<nuid>."): every request the process makes, appends included,
	// carries it, which is how the tap attributes proposals to processes.
	inbox string
	// workspaces is a tool runner's workspace root.
	workspaces string
	killed     time.Time
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL and reaps it.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	<-p.exited
	p.killed = time.Now()
}

// scaleRig is an embedded server, the service processes on it, a client, and
// the tap.
type scaleRig struct {
	ns     *server.Server
	url    string
	nc     *nats.Conn
	c      *client.Client
	js     jetstream.JetStream
	store  *eventstore.Store
	tap    *appendTap
	closes *closeTracker
	procs  []*proc
	seeds  string
	seed   string // the blob reference of the seed "repo" under seeds
}

// startScaleRig runs an embedded JetStream, one ledger process and perKind
// processes of each worker kind, each tool runner with a workspace root of
// its own and all on the same seed root, and waits until every worker
// process pulls from its durable consumer. At the end of the test the
// workers get SIGTERM, then the ledger; each must exit cleanly.
func startScaleRig(t *testing.T, perKind int) *scaleRig {
	t.Helper()
	seeds, err := filepath.Abs(filepath.Join("testdata", "scale"))
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.StartServer(t, t.TempDir())
	r := &scaleRig{ns: ns, url: ns.ClientURL(), nc: natstest.Connect(t, ns.ClientURL()), seeds: seeds}
	t.Cleanup(func() { r.stop(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.store, err = eventstore.Open(ctx, r.nc, eventstore.DefaultConfig()); err != nil {
		t.Fatalf("create streams: %v", err)
	}
	if r.c, err = client.New(r.nc, client.WithTimeout(10*time.Second), client.WithRetryFor(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		t.Fatal(err)
	}
	if r.tap, err = tapAppends(r.nc); err != nil {
		t.Fatal(err)
	}
	if r.closes, err = trackCloses(r.nc); err != nil {
		t.Fatal(err)
	}

	// Its signing key in the test's directory, not the package's.
	r.startProc(t, kindLedger, "ledger", "--name", "ledger", "--key", filepath.Join(t.TempDir(), "keys", "ledger.key"))
	// The sessions' workspace seed, stored through the ledger (the client
	// retries until it answers).
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer pcancel()
	if r.seed, err = r.c.PutWorkspace(pctx, filepath.Join(seeds, "repo")); err != nil {
		t.Fatal(err)
	}
	for _, kind := range workerKinds {
		for i := 1; i <= perKind; i++ {
			var extra []string
			var root string
			if kind == kindRunner {
				root = t.TempDir()
				// The local backend: these tests measure the bus, and
				// count placements by the root they name.
				extra = []string{"--workspaces", root, "--timeout", "30s", "--sandbox", "local"}
			}
			r.startProc(t, kind, fmt.Sprintf("%s-%d", kind, i), extra...).workspaces = root
		}
	}
	for _, kind := range workerKinds {
		testrig.Eventually(t, 30*time.Second, kind+" processes pulling", func() (bool, string) {
			ci := r.consumer(t, kind)
			if ci == nil {
				return false, "no consumer yet"
			}
			return ci.NumWaiting >= perKind, fmt.Sprintf("%d pull requests waiting", ci.NumWaiting)
		})
	}
	return r
}

// startProc runs a service process and waits until its NATS connection is up
// and has made a request (so its reply prefix is known). Processes start one
// at a time, so the new connection of the right name is this process's.
func (r *scaleRig) startProc(t *testing.T, kind, name string, extra ...string) *proc {
	t.Helper()
	p := &proc{kind: kind, name: name, stderr: &proctest.LogBuffer{}, exited: make(chan struct{})}
	role := auth.Role(kind) // the worker kinds are their roles' names
	if kind == kindLedger {
		role = auth.RoleLedger
	}
	args := append([]string{"--nats", r.url, "--creds", natstest.CredsFile(t, r.url, role)}, extra...)
	p.cmd = exec.Command(serviceBinary(t, kind), args...)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = append(os.Environ(), "RATH_NATS_URL=", "RATH_CREDS=") // only the flags count
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	r.procs = append(r.procs, p)
	testrig.Eventually(t, 30*time.Second, name+" connected", func() (bool, string) {
		if !p.running() {
			t.Fatalf("%s exited while starting: %v\n%s", name, p.err, tail(p.stderr.String(), 40))
		}
		p.inbox = r.newInbox(t, "rath-"+kind)
		return p.inbox != "", "no new connection with a reply subscription yet"
	})
	if kind == kindLedger {
		testrig.Eventually(t, 30*time.Second, name+" serving", func() (bool, string) {
			return strings.Contains(p.stderr.String(), `"msg":"ledger serving"`), `no "ledger serving" line yet`
		})
	}
	return p
}

// newInbox returns the reply prefix of the open connection named name that
// no known process has, or "".
func (r *scaleRig) newInbox(t *testing.T, name string) string {
	t.Helper()
	cz, err := r.ns.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatalf("connz: %v", err)
	}
	for _, ci := range cz.Conns {
		if ci.Name != name {
			continue
		}
		for _, sub := range ci.Subs {
			if !strings.HasPrefix(sub, nats.InboxPrefix) || !strings.HasSuffix(sub, ".*") {
				continue
			}
			prefix := strings.TrimSuffix(sub, "*")
			if !slices.ContainsFunc(r.procs, func(p *proc) bool { return p.inbox == prefix }) {
				return prefix
			}
		}
	}
	return ""
}

// stop sends SIGTERM to the worker processes still running, then to the
// ledger, and fails the test if one hangs or exits uncleanly; then checks
// every process's log for data races and errors.
func (r *scaleRig) stop(t *testing.T) {
	var workers, ledgers []*proc
	for _, p := range r.procs {
		if p.kind == kindLedger {
			ledgers = append(ledgers, p)
		} else {
			workers = append(workers, p)
		}
	}
	for _, group := range [][]*proc{workers, ledgers} {
		for _, p := range group {
			if p.running() {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		deadline := time.After(20 * time.Second)
		for _, p := range group {
			select {
			case <-p.exited:
				if p.killed.IsZero() && p.err != nil {
					t.Errorf("%s exited uncleanly after SIGTERM: %v", p.name, p.err)
				}
			case <-deadline:
				t.Errorf("%s did not exit within 20s of SIGTERM", p.name)
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
	}
	var cpu []string
	for _, p := range r.procs {
		if ps := p.cmd.ProcessState; ps != nil {
			cpu = append(cpu, fmt.Sprintf("%s %.1fs", p.name, (ps.UserTime()+ps.SystemTime()).Seconds()))
		}
	}
	t.Logf("CPU time per process: %s", strings.Join(cpu, ", "))
	keep := os.Getenv("RATH_TEST_SCALE_LOGS")
	for _, p := range r.procs {
		out := p.stderr.String()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.name, out)
		}
		if strings.Contains(out, `"level":"ERROR"`) {
			t.Errorf("%s logged an error:\n%s", p.name, tail(grepLines(out, `"level":"ERROR"`), 20))
		}
		if keep != "" {
			f := filepath.Join(keep, fmt.Sprintf("%s-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), p.name))
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				t.Logf("keep log of %s: %v", p.name, err)
			}
		}
		if t.Failed() {
			t.Logf("stderr of %s (pid %d):\n%s", p.name, p.cmd.Process.Pid, tail(out, 15))
		}
	}
}

// consumer returns the info of a worker kind's durable consumer, or nil.
func (r *scaleRig) consumer(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := r.js.Consumer(ctx, events.StreamSessions, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer %s info: %v", durable, err)
	}
	return ci
}

func (r *scaleRig) ofKind(kind string) []*proc {
	var out []*proc
	for _, p := range r.procs {
		if p.kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// uploadWorkflow stores the workflow file and its scripts as one bundle, as
// `rath start --workflow` does, and returns the start event naming it.
func (r *scaleRig) uploadWorkflow(t *testing.T, file string) events.SessionStarted {
	t.Helper()
	return r.uploadWorkflowAt(t, filepath.Join("testdata", "scale", file))
}

// uploadWorkflowAt is uploadWorkflow of a workflow file anywhere.
func (r *scaleRig) uploadWorkflowAt(t *testing.T, path string) events.SessionStarted {
	t.Helper()
	wf, err := workflow.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := wf.CheckScripts(); err != nil {
		t.Fatal(err)
	}
	b, err := workflow.NewBundle(wf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref, err := r.store.PutBlob(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	return events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}
}

// startSessions starts the sessions (see sessionStart), several requests in
// flight at once.
func (r *scaleRig) startSessions(t *testing.T, start events.SessionStarted, ids []string) {
	t.Helper()
	// A bound on a stuck ledger, not a speed test: under go test -race with
	// other packages' tests on two cores, 200 starts have taken over a
	// minute (the ledger logged acks taking 4-5 s).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const inFlight = 32
	var wg sync.WaitGroup
	next := make(chan string)
	errs := make(chan error, len(ids))
	for range inFlight {
		wg.Go(func() {
			for id := range next {
				if _, err := r.c.Start(ctx, id, r.sessionStart(start, id)); err != nil {
					errs <- fmt.Errorf("start %s: %w", id, err)
				}
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// sessionStart is the start event of one session: the workspace seed
// "repo", and the task "scale <id>" unless start names one.
func (r *scaleRig) sessionStart(start events.SessionStarted, id string) events.SessionStarted {
	if start.Task == "" {
		start.Task = "scale " + id
	}
	start.Labels = map[string]string{client.LabelWorkspace: r.seed}
	return start
}

// startPaced starts the sessions one at a time, one every interval, in the
// background, counting them in started; the channel yields the errors and
// is closed once all are started.
func (r *scaleRig) startPaced(start events.SessionStarted, ids []string, every time.Duration, started *atomic.Int64) <-chan error {
	errs := make(chan error, len(ids))
	go func() {
		defer close(errs)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for _, id := range ids {
			if _, err := r.c.Start(ctx, id, r.sessionStart(start, id)); err != nil {
				errs <- fmt.Errorf("start %s: %w", id, err)
				return
			}
			started.Add(1)
			<-tick.C
		}
	}()
	return errs
}

// closeTracker follows the live feed of stored events (each is republished
// once stored) and notes when each session closed, so that waiting for
// hundreds of sessions costs the ledger nothing: listing sessions reads one
// index record per session, and polling it under load competes with the
// work being measured.
type closeTracker struct {
	mu   sync.Mutex
	at   map[string]time.Time
	last time.Time // when the last close arrived
}

func trackCloses(nc *nats.Conn) (*closeTracker, error) {
	ct := &closeTracker{at: map[string]time.Time{}}
	_, err := nc.Subscribe(events.TenantLiveWildcard(events.DefaultTenant), func(m *nats.Msg) {
		var ev struct {
			Type    string `json:"type"`
			Session string `json:"subject"`
		}
		if json.Unmarshal(m.Data, &ev) != nil || ev.Type != events.TypeSessionClosed {
			return
		}
		ct.closed(ev.Session)
	})
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", events.TenantLiveWildcard(events.DefaultTenant), err)
	}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	return ct, nil
}

func (ct *closeTracker) closed(id string) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if _, ok := ct.at[id]; !ok {
		ct.at[id], ct.last = time.Now(), time.Now()
	}
}

// open returns the sessions of ids not known to be closed.
func (ct *closeTracker) open(ids []string) []string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := ct.at[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

func (ct *closeTracker) quietFor() time.Duration {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return time.Since(ct.last)
}

// waitClosed waits until the sessions are closed and returns how long that
// took, and whether they closed before the deadline. The live feed is
// at-most-once, so when no close has arrived for a while the sessions still
// open are asked for their state. If the deadline passes, it logs what the
// first sessions still open are waiting for.
func (r *scaleRig) waitClosed(t *testing.T, ids []string, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	asked := start
	for {
		open := r.closes.open(ids)
		if len(open) == 0 {
			return time.Since(start), true
		}
		if time.Since(asked) > 2*time.Second && r.closes.quietFor() > 2*time.Second {
			asked = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, id := range open {
				if st, err := r.c.Overview(ctx, api.StateRequest{Session: id, Tail: 1}); err == nil && st.Status == session.StatusClosed {
					r.closes.closed(id)
				}
			}
			cancel()
			continue
		}
		if time.Now().After(deadline) {
			t.Logf("%d of %d sessions closed after %s; open: %v", len(ids)-len(open), len(ids), timeout, firstN(open, 20))
			for _, id := range open[:min(3, len(open))] {
				t.Log(r.describe(t, id))
			}
			return time.Since(start), false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustClose is waitClosed that ends the test if the sessions do not close.
func (r *scaleRig) mustClose(t *testing.T, ids []string, timeout time.Duration) time.Duration {
	t.Helper()
	took, ok := r.waitClosed(t, ids, timeout)
	if !ok {
		t.Fatalf("the sessions did not all close within %s", timeout)
	}
	return took
}

// describe sums up an unfinished session for a failure message: its last
// events (type, source, age) and the turn and tool calls its state holds.
func (r *scaleRig) describe(t *testing.T, id string) string {
	t.Helper()
	log := r.readLog(t, id)
	var b strings.Builder
	fmt.Fprintf(&b, "session %s, %d events; last ones:", id, len(log))
	for _, ev := range log[max(0, len(log)-8):] {
		fmt.Fprintf(&b, "\n  %3d %-34s %-18s %s ago", ev.Seq, ev.Type, ev.Source, time.Since(ev.Time).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := r.c.Overview(ctx, api.StateRequest{Session: id}); err == nil {
		fmt.Fprintf(&b, "\n  state: status %s, turn %+v, last agent %q", st.Status, st.Turn, st.LastAgent)
		for _, tc := range append(st.Tools.Open, st.Tools.Last...) {
			fmt.Fprintf(&b, ", tool %s %s (attempts %d)", tc.CallID, tc.Status, tc.Attempts)
		}
	}
	return b.String()
}

// around lists a session's events around seq with their times.
func (r *scaleRig) around(t *testing.T, id string, seq uint64) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range r.readLog(t, id) {
		if ev.Seq+3 >= seq && ev.Seq <= seq+2 {
			fmt.Fprintf(&b, "  %3d %s %-34s %s\n", ev.Seq, ev.Time.Format("15:04:05.000"), ev.Type, ev.Source)
		}
	}
	return b.String()
}

// readLog reads a session's whole log through the ledger.
func (r *scaleRig) readLog(t *testing.T, id string) []events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []events.Stored
	for from := uint64(1); ; {
		evs, err := r.c.Log(ctx, id, client.Range{From: from, Limit: api.MaxLogPage})
		if err != nil {
			t.Fatalf("log of %s from %d: %v", id, from, err)
		}
		out = append(out, evs...)
		if len(evs) < api.MaxLogPage {
			return out
		}
		from = evs[len(evs)-1].Seq + 1
	}
}

// checkChain reports problems with a log's integrity: a sequence gap, an
// event not chained onto the one before, an event ID stored twice, an event
// of another session, and the ledger's own verification disagreeing.
func (r *scaleRig) checkChain(t *testing.T, id string, log []events.Stored) []string {
	t.Helper()
	var bad []string
	seen := make(map[string]uint64, len(log))
	for i, ev := range log {
		if ev.Seq != uint64(i+1) {
			bad = append(bad, fmt.Sprintf("log[%d] has seq %d (gap or reorder)", i, ev.Seq))
		}
		if i > 0 && ev.Prev != log[i-1].Hash {
			bad = append(bad, fmt.Sprintf("seq %d does not chain onto seq %d", ev.Seq, log[i-1].Seq))
		}
		if ev.Session != id {
			bad = append(bad, fmt.Sprintf("seq %d belongs to session %q", ev.Seq, ev.Session))
		}
		if at, dup := seen[ev.ID]; dup {
			bad = append(bad, fmt.Sprintf("event %s (%s) stored twice, at seq %d and %d", ev.ID, ev.Type, at, ev.Seq))
		}
		seen[ev.ID] = ev.Seq
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := r.c.Verify(ctx, id)
	switch {
	case err != nil:
		bad = append(bad, fmt.Sprintf("verify: %v", err))
	case !rep.OK:
		bad = append(bad, fmt.Sprintf("verify: fault %+v", rep.Fault))
	case rep.Head != uint64(len(log)):
		bad = append(bad, fmt.Sprintf("verify: head %d, log has %d events", rep.Head, len(log)))
	}
	return bad
}

// overlappingTurns folds a log's turns: between a turn's request and its
// completion or failure no other turn may be requested, and nothing may end
// a turn that is not in flight. It returns each violation.
func overlappingTurns(log []events.Stored) []string {
	var bad []string
	var open string // turn ID in flight
	var openAt uint64
	for _, ev := range log {
		var turnID string
		switch ev.Type {
		case events.TypeTurnRequested, events.TypeTurnCompleted, events.TypeTurnFailed:
			var d struct {
				TurnID string `json:"turn_id"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				bad = append(bad, fmt.Sprintf("seq %d: %v", ev.Seq, err))
				continue
			}
			turnID = d.TurnID
		default:
			continue
		}
		if ev.Type == events.TypeTurnRequested {
			if open != "" {
				bad = append(bad, fmt.Sprintf("turn %s requested at seq %d while turn %s (requested at seq %d) was in flight", turnID, ev.Seq, open, openAt))
			}
			open, openAt = turnID, ev.Seq
			continue
		}
		if open != turnID {
			bad = append(bad, fmt.Sprintf("seq %d ends turn %s, but the turn in flight is %q", ev.Seq, turnID, open))
		}
		open = ""
	}
	if open != "" && len(log) > 0 && log[len(log)-1].Type == events.TypeSessionClosed {
		bad = append(bad, fmt.Sprintf("session closed with turn %s (seq %d) still in flight", open, openAt))
	}
	return bad
}

// appendTap subscribes to the ledger's append subject beside the ledger's
// queue group and sees every proposal made by request/reply. The reply
// subject's prefix names the connection, so each proposal is attributed to
// its process; retries of one proposal count each time.
type appendTap struct {
	mu      sync.Mutex
	byInbox map[string]int
	// after counts proposals per connection once marked is set.
	marked bool
	after  map[string]int
}

func tapAppends(nc *nats.Conn) (*appendTap, error) {
	tap := &appendTap{byInbox: map[string]int{}, after: map[string]int{}}
	// A single append proposes one event, an atomic append (a model's
	// answer) the events of its array.
	for op, count := range map[string]func([]byte) int{
		events.OpAppend: func([]byte) int { return 1 },
		events.OpAtomic: func(body []byte) int {
			var evs []json.RawMessage
			_ = json.Unmarshal(body, &evs)
			return len(evs)
		},
	} {
		_, err := nc.Subscribe(events.LedgerFilter(op), func(m *nats.Msg) {
			i := strings.LastIndexByte(m.Reply, '.')
			if i < 0 {
				return
			}
			prefix, n := m.Reply[:i+1], count(m.Data)
			tap.mu.Lock()
			defer tap.mu.Unlock()
			tap.byInbox[prefix] += n
			if tap.marked {
				tap.after[prefix] += n
			}
		})
		if err != nil {
			return nil, fmt.Errorf("tap %s: %w", events.LedgerFilter(op), err)
		}
	}
	return tap, nil
}

// proposals returns how many proposals p made in all and since the mark.
func (tap *appendTap) proposals(p *proc) (all, sinceMark int) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.byInbox[p.inbox], tap.after[p.inbox]
}

func (tap *appendTap) setMark() {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	tap.marked = true
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = append([]string{fmt.Sprintf("... (%d lines before)", len(parts)-lines)}, parts[len(parts)-lines:]...)
	}
	return strings.Join(parts, "\n")
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// inProcess is the crash-point test's rig: the ledger, a selector and a tool
// runner run in-process (internal/runtime); agent workers come and go as the
// test says.
type inProcess struct {
	*scaleRig
	stops []func() // in start order; cleanup runs them in reverse
	// workerNC is the agent worker's connection, of its role.
	workerNC *nats.Conn
}

func startInProcess(t *testing.T) *inProcess {
	t.Helper()
	ctx := context.Background()
	ns, nc := natstest.Start(t)
	seeds, err := filepath.Abs(filepath.Join("testdata", "scale"))
	if err != nil {
		t.Fatal(err)
	}
	// The ledger, the selector and the tool runner (on local, as the
	// processes'), as rath up wires them; started before the cleanup that
	// stops the agent workers is registered, so that they stop after it.
	testsuite.Start(t, ns, testsuite.Config(t, ns.ClientURL()), runtime.WithLogger(slog.New(slog.DiscardHandler)),
		runtime.WithRoles(auth.RoleLedger, auth.RoleSelector, auth.RoleToolRunner))
	p := &inProcess{scaleRig: &scaleRig{nc: nc, seeds: seeds}, workerNC: natstest.ConnectAs(t, ns.ClientURL(), auth.RoleAgentWorker)}
	// Workers stop before the ledger.
	t.Cleanup(func() {
		for i := len(p.stops) - 1; i >= 0; i-- {
			p.stops[i]()
		}
	})
	if p.store, err = eventstore.Open(ctx, nc, eventstore.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if p.c, err = client.New(nc); err != nil {
		t.Fatal(err)
	}
	if p.seed, err = p.c.PutWorkspace(ctx, filepath.Join(seeds, "repo")); err != nil {
		t.Fatal(err)
	}
	if p.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if p.closes, err = trackCloses(nc); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a service until the returned func (or the test's cleanup) stops
// it; it must stop without an error.
func (p *inProcess) run(t *testing.T, name string, fn func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	p.stops = append(p.stops, stop)
	return stop
}

func (p *inProcess) runWorker(t *testing.T) func() {
	quiet := slog.New(slog.DiscardHandler)
	return p.run(t, "agent worker", func(ctx context.Context) error {
		return worker.Run(ctx, p.workerNC, worker.DefaultConfig(), quiet)
	})
}

// idle reports whether a worker kind's consumer has nothing undelivered and
// nothing unacked.
func (r *scaleRig) idle(t *testing.T, durable string) (bool, string) {
	t.Helper()
	ci := r.consumer(t, durable)
	if ci == nil {
		return false, durable + ": no consumer yet"
	}
	return ci.NumPending == 0 && ci.NumAckPending == 0,
		fmt.Sprintf("%s: %d undelivered, %d unacked", durable, ci.NumPending, ci.NumAckPending)
}

// workerTurn is one agent turn of a log: its request and the events the
// agent worker stored for it, in log order, each with the name its ID was
// derived from.
type workerTurn struct {
	req    events.Stored
	turnID string
	evs    []workerEvent
}

type workerEvent struct {
	ev   events.Stored
	what string
}

// workerTurns splits a log into its turns. The agent worker derives each
// event's ID from the turn request and what the event is ("chunk", "model",
// "tool-0", "completed", ...), which is what lets a worker that takes a turn
// over store each event once; the name is recovered here by trying the
// worker's names.
func workerTurns(t *testing.T, log []events.Stored) []workerTurn {
	t.Helper()
	names := []string{"chunk", "model", "completed", "failed", "compacted"}
	for i := range 16 {
		names = append(names, fmt.Sprintf("tool-%d", i), fmt.Sprintf("attempt-%d", i+1))
	}
	var turns []workerTurn
	for _, ev := range log {
		if ev.Type == events.TypeTurnRequested {
			var d events.TurnRequested
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			turns = append(turns, workerTurn{req: ev, turnID: d.TurnID})
			continue
		}
		if ev.Source != "rath/agent-worker" {
			continue
		}
		i := slices.IndexFunc(turns, func(w workerTurn) bool { return w.req.ID == ev.Causation })
		if i < 0 {
			t.Fatalf("agent worker event %s at seq %d is caused by no turn request", ev.Type, ev.Seq)
		}
		what := ""
		for _, n := range names {
			if events.DerivedID(kindWorker, ev.Causation, n) == ev.ID {
				what = n
				break
			}
		}
		if what == "" {
			t.Fatalf("agent worker event %s at seq %d has an ID derived from none of %v: the worker names its events differently now; update workerTurns",
				ev.Type, ev.Seq, names)
		}
		turns[i].evs = append(turns[i].evs, workerEvent{ev: ev, what: what})
	}
	return turns
}

// plant appends, for the turn request req of another session, the event a
// worker stored for the reference turn ref: same name, same data (with the
// turn ID replaced), and the ID, source, causation and correlation the
// worker gives it, as if a worker had stored it before dying.
func (r *scaleRig) plant(t *testing.T, req events.Stored, turnID string, ref workerTurn, we workerEvent) {
	t.Helper()
	data, err := events.DecodeData(we.ev.Type, bytes.ReplaceAll(we.ev.Data, []byte(ref.turnID), []byte(turnID)))
	if err != nil {
		t.Fatal(err)
	}
	corr := req.Correlation
	if corr == "" {
		corr = turnID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.c.Emit(ctx, req.Session, data, events.WithID(events.DerivedID(kindWorker, req.ID, we.what)),
		events.WithSource(we.ev.Source), events.WithCausation(req.ID), events.WithCorrelation(corr)); err != nil {
		t.Fatalf("plant %s of %s: %v", we.what, req.Session, err)
	}
}

// sameTurn compares a turn's worker events with the reference turn's: the
// same events, by name and in order, with the same data apart from the turn
// ID and the measured latency. It returns the differences.
func sameTurn(got, ref workerTurn) []string {
	norm := func(w workerTurn, we workerEvent) string {
		var m map[string]any
		if err := json.Unmarshal(bytes.ReplaceAll(we.ev.Data, []byte(w.turnID), []byte("TURN")), &m); err != nil {
			return string(we.ev.Data)
		}
		delete(m, "latency_ms")
		b, _ := json.Marshal(m)
		return we.what + " " + string(b)
	}
	var a, b []string
	for _, we := range got.evs {
		a = append(a, norm(got, we))
	}
	for _, we := range ref.evs {
		b = append(b, norm(ref, we))
	}
	if slices.Equal(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("the worker recorded\n\t\t%s\n\tbut an uninterrupted turn records\n\t\t%s",
		strings.Join(a, "\n\t\t"), strings.Join(b, "\n\t\t"))}
}

// nthTurnRequest waits for a session's turn request number n (0-based) and
// returns it with its turn ID.
func (r *scaleRig) nthTurnRequest(t *testing.T, id string, n int) (events.Stored, string) {
	t.Helper()
	var req events.Stored
	testrig.Eventually(t, 20*time.Second, fmt.Sprintf("turn %d of %s requested", n+1, id), func() (bool, string) {
		k := 0
		for _, ev := range r.readLog(t, id) {
			if ev.Type != events.TypeTurnRequested {
				continue
			}
			if k == n {
				req = ev
				return true, ""
			}
			k++
		}
		return false, fmt.Sprintf("%d turns requested", k)
	})
	var d events.TurnRequested
	if err := json.Unmarshal(req.Data, &d); err != nil {
		t.Fatal(err)
	}
	return req, d.TurnID
}
