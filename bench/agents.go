package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// The worker kinds of the agent loop, named as their binaries under
// ./services. Each kind's processes share one durable consumer on the
// sessions stream, named as the binary (each service's Durable constant, in
// an internal package the harness cannot import).
var agentKinds = []string{"selector", "agent-worker", "tool-runner"}

// agentProcs are the numbers of processes of each worker kind section 5b
// measures.
var agentProcs = []int{1, 2, 4}

// agentWorkflow is the scripted workflow of section 5, under bench/testdata,
// with its workspace seed "repo" beside it.
const agentWorkflow = "testdata/agents"

// agentsInFlight is how many session starts section 5b keeps in flight.
const agentsInFlight = 32

// runAgents is section 5: the agent loop on top of the ledger. 5a runs the
// selector, agent worker and tool runner in this process (internal/runtime,
// as `rath up` does) and times each hop of sessions run one at a time from
// the live feed; 5b runs them as 1, 2 and 4 OS processes of each kind and
// counts completed sessions per second.
func (h *harness) runAgents(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "bench", agentWorkflow)
	start, err := h.uploadWorkflow(ctx, filepath.Join(dir, "agents.yaml"))
	if err != nil {
		return err
	}
	live, err := h.connect(auth.RoleClient, "rath-bench-live", false)
	if err != nil {
		return err
	}
	feed, err := followLive(live)
	if err != nil {
		return err
	}
	defer feed.close()
	if h.wants("5a") {
		if err := h.agentLatency(ctx, dir, start, feed); err != nil {
			return fmt.Errorf("5a: %w", err)
		}
	}
	if h.wants("5b") {
		if err := h.agentThroughput(ctx, dir, start, feed); err != nil {
			return fmt.Errorf("5b: %w", err)
		}
	}
	return nil
}

// uploadWorkflow stores a workflow bundle and the workspace seed "repo" of
// testdata/agents, and returns the start event of a session running it
// there.
func (h *harness) uploadWorkflow(ctx context.Context, path string) (events.SessionStarted, error) {
	wf, err := workflow.Load(path)
	if err != nil {
		return events.SessionStarted{}, err
	}
	if err := wf.CheckScripts(); err != nil {
		return events.SessionStarted{}, err
	}
	ref, err := workflow.Store(ctx, wf, h.store.PutBlob)
	if err != nil {
		return events.SessionStarted{}, err
	}
	root, err := moduleRoot()
	if err != nil {
		return events.SessionStarted{}, err
	}
	seed, err := client.PackWorkspace(filepath.Join(root, "bench", agentWorkflow, "repo"))
	if err != nil {
		return events.SessionStarted{}, err
	}
	seedRef, err := h.store.PutBlob(ctx, seed)
	if err != nil {
		return events.SessionStarted{}, fmt.Errorf("workspace seed: %w", err)
	}
	return events.SessionStarted{
		Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref,
		Task: "bench agents", Labels: map[string]string{client.LabelWorkspace: seedRef},
	}, nil
}

// agentLatency is 5a: sessions one after another through in-process
// services, each hop timed between the arrivals of its two events on the
// live feed.
func (h *harness) agentLatency(ctx context.Context, dir string, start events.SessionStarted, feed *liveFeed) error {
	stop, err := h.startAgentsInProcess(dir)
	if err != nil {
		return err
	}
	defer stop()
	n := h.cfg.agentSessions()
	// One warm-up session: the first workspace, the first bundle fetch.
	if err := h.runSessions(ctx, start, feed, []string{"agents-warm"}, 1); err != nil {
		return err
	}
	a, err := h.quietly(ctx, "5a", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		ids := agentIDs(fmt.Sprintf("agents-lat%d", try), n)
		h.logf("5a: %d sessions one at a time, services in this process", n)
		cpu := h.cpuStart()
		if err := h.runSessions(ctx, start, feed, ids, 1); err != nil {
			return a, err
		}
		use := a.timed(cpu.stop())
		hp := feed.hops(ids)
		if err := hp.err(); err != nil {
			return a, err
		}
		rawLat, err := h.rawRoundTrips(ctx, h.cfg.rawRoundTrips(), try)
		if err != nil {
			return a, err
		}
		raw := fmt.Sprintf("%s (%d round trips)", rawLat, len(rawLat))
		hop := func(id, what string, l latencies) row {
			return row{id: id, what: fmt.Sprintf("%s (%d hops)", what, len(l)), rath: l.String(),
				rawWhat: "JetStream publish (acked) → delivery to a pull consumer", raw: raw,
				ratio: fmtRatio(latencyRatio(l.median(), rawLat.median()))}
		}
		perSession := hp.events / max(len(hp.session), 1)
		a.rows = append(a.rows,
			hop("5a", "selector hop: trigger stored → decision stored", hp.selector),
			hop("5a′", "agent worker hop: turn requested → model call stored", hp.worker),
			hop("5a″", "tool runner hop: tool call requested → completed (list_files, run echo)", hp.tool),
			row{id: "5a‴",
				what: fmt.Sprintf("whole session: started → closed (%d sessions of 10 steps: 6 turns, 3 tool calls, the close; %d events each), one at a time, services in this process",
					len(hp.session), perSession),
				rath:    fmt.Sprintf("%s (%s)", hp.session, use.perEvent(hp.events)),
				rawWhat: fmt.Sprintf("%d raw round trips one after another (p50 × %d)", perSession, perSession),
				raw:     fmtDur(rawLat.median() * time.Duration(perSession)),
				ratio:   fmtRatio(latencyRatio(hp.session.median(), rawLat.median()*time.Duration(perSession)))},
		)
		// The same sessions' messages on JetStream alone: the floor of
		// 5a‴'s CPU per event.
		floor, err := h.agentFloor(ctx, &a, ids[0], n, try, (use.self+use.ledger+use.workers)/time.Duration(max(hp.events, 1)))
		if err != nil {
			return a, fmt.Errorf("5a‴ raw: %w", err)
		}
		a.rows = append(a.rows, floor...)
		if missing := n*perSession - hp.events; perSession > 0 && missing != 0 {
			h.rep.note("5a: the live feed missed %d events (it is at-most-once); hops that need them are not counted", missing)
		}
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return nil
}

// agentThroughput is 5b: the same sessions started agentsInFlight at a
// time through k processes of each worker kind, for each k. With
// profiling, the binaries carry the profiling hook and the worker processes
// of the first row are profiled while its sessions run, into
// 5b-<kind>.pprof.
func (h *harness) agentThroughput(ctx context.Context, dir string, start events.SessionStarted, feed *liveFeed) error {
	profile := h.cfg.profileDir != ""
	h.logf("5b: building %s", strings.Join(agentKinds, ", "))
	bins, err := buildServices(ctx, filepath.Join(h.dir, "bin"), profile, agentKinds...)
	if err != nil {
		return err
	}
	n := h.cfg.agentRate()
	var first float64
	for _, k := range agentProcs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		profDir := ""
		if profile && k == agentProcs[0] {
			profDir = h.cfg.profileDir
		}
		procs, err := h.startAgentProcesses(ctx, bins, dir, k, profDir)
		if err != nil {
			h.stopAgentProcesses(procs)
			return err
		}
		ids := agentIDs(fmt.Sprintf("agents-p%d", k), n)
		h.logf("5b: %d sessions, %d in flight, %d process(es) of each worker kind", n, agentsInFlight, k)
		var stopProfiles []func() error
		for _, p := range procs { // nothing without profDir
			stopProfiles = append(stopProfiles, p.profile(filepath.Join(h.cfg.profileDir, "5b-"+p.prog()+".pprof")))
		}
		cpu := h.cpuStart()
		began := time.Now()
		err = h.runSessions(ctx, start, feed, ids, agentsInFlight)
		took := time.Since(began)
		use := cpu.stop()
		for _, stop := range stopProfiles {
			err = errors.Join(err, stop())
		}
		if err := errors.Join(err, h.stopAgentProcesses(procs)); err != nil {
			return err
		}
		hp := feed.hops(ids)
		if err := hp.err(); err != nil {
			return err
		}
		perSec := float64(n) / took.Seconds()
		if k == agentProcs[0] {
			first = perSec
		}
		target := fmt.Sprintf("%.2f× the rate with %d", perSec/first, agentProcs[0])
		if c := use.cores(use.others); c >= noisyCores {
			target = joinCell(target, fmt.Sprintf("⚠ disturbed: other processes used %.2f cores", c))
		}
		h.rep.add(row{
			id: fmt.Sprintf("5b/%d", k),
			what: fmt.Sprintf("completed sessions per second, %d sessions (%d starts in flight), %d OS process(es) each of selector, agent worker, tool runner; ledger %s",
				n, agentsInFlight, k, h.ledger.where()),
			rath: fmt.Sprintf("%.1f sessions/s (%s ev/s; all closed %s after the first start); session p50 %s, p99 %s; CPU cores: workers %.2f, server+ledger+harness %.2f, others %.2f",
				perSec, fmtRate(float64(hp.events)/took.Seconds()), fmtDur(took), fmtDur(hp.session.pct(50)), fmtDur(hp.session.pct(99)),
				use.cores(use.workers), use.cores(use.self), use.cores(use.others)),
			target: target,
		})
	}
	return nil
}

// runSessions starts the sessions, inFlight starts at a time, and waits
// until every one of them is closed.
func (h *harness) runSessions(ctx context.Context, start events.SessionStarted, feed *liveFeed, ids []string, inFlight int) error {
	for _, id := range ids {
		feed.expect(id)
	}
	if inFlight == 1 {
		for _, id := range ids {
			if _, err := h.cli.Start(ctx, id, start); err != nil {
				return fmt.Errorf("start %s: %w", id, err)
			}
			if err := h.waitClosed(ctx, feed, []string{id}); err != nil {
				return err
			}
		}
		return nil
	}
	err := parallel(ctx, len(ids), inFlight, func(ctx context.Context, i int) error {
		if _, err := h.cli.Start(ctx, ids[i], start); err != nil {
			return fmt.Errorf("start %s: %w", ids[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return h.waitClosed(ctx, feed, ids)
}

// waitClosed waits until the live feed has shown every session closed. The
// feed is at-most-once: when no session has closed for a second, the ones
// still open are asked for their state.
func (h *harness) waitClosed(ctx context.Context, feed *liveFeed, ids []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	asked := time.Now()
	for {
		open := feed.open(ids)
		if len(open) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d sessions not closed after 2m, first %s", len(open), len(ids), open[0])
		}
		if time.Since(asked) > time.Second && feed.quietFor() > time.Second {
			for _, id := range open {
				st, err := h.qcli.Overview(ctx, api.StateRequest{Session: id, Tail: 1})
				if err == nil && st.Status == session.StatusClosed {
					if st.Outcome != "succeeded" {
						return fmt.Errorf("session %s closed %s: %s", id, st.Outcome, st.CloseReason)
					}
					feed.closed(id)
				}
			}
			asked = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-feed.changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func agentIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ids
}

// sandboxHelper is the tool runner's spawn helper binary (its
// sandbox.HelperName), which the runner finds beside its executable. In
// this process it is built and named in the runner's configuration: the
// harness binary itself would be the helper otherwise, and its start
// (100 MB) would be most of a tool call's CPU.
const sandboxHelper = "rath-sandbox-exec"

// startAgentsInProcess runs the selector, the agent worker and the tool
// runner in this process, as `rath up` does (internal/runtime, each service
// on an in-process connection of its role, against the harness's server
// and ledger), and returns the function that stops them (which also reports
// errors they logged or returned).
func (h *harness) startAgentsInProcess(dir string) (func(), error) {
	cfg := runtime.DefaultConfig()
	cfg.NATSURL, cfg.CredsDir, cfg.Data = h.ns.ClientURL(), filepath.Join(h.dir, "creds"), filepath.Join(h.dir, "inproc")
	// The agent loop's figures compare with runs before sandboxes isolated
	// (all on local); what isolation costs a call is BenchmarkRunEcho's.
	cfg.ToolRunner.Backend = events.BackendLocal
	cfg.ToolRunner.Sandbox.Root = filepath.Join(h.dir, "workspaces-inproc")
	bin := filepath.Join(h.dir, "helper-bin")
	if _, err := buildServices(context.Background(), bin, false, "tool-runner/"+sandboxHelper); err != nil {
		return nil, fmt.Errorf("the sandbox helper: %w", err)
	}
	cfg.ToolRunner.Sandbox.Helper = filepath.Join(bin, sandboxHelper)
	var logs []*os.File
	closeLogs := func() {
		for _, f := range logs {
			f.Close()
			if n := countLines(f.Name(), `"level":"ERROR"`); n > 0 {
				h.rep.note("5a: %s logged %d errors (%s)", filepath.Base(f.Name()), n, f.Name())
			}
		}
	}
	loggers := map[auth.Role]*slog.Logger{}
	for _, kind := range agentKinds {
		logf, err := os.Create(filepath.Join(h.dir, "inproc-"+kind+".log"))
		if err != nil {
			closeLogs()
			return nil, err
		}
		logs = append(logs, logf)
		loggers[auth.Role(kind)] = slog.New(slog.NewJSONHandler(logf, nil))
	}
	roles := make([]auth.Role, len(agentKinds))
	for i, kind := range agentKinds {
		roles[i] = auth.Role(kind)
	}
	rt, err := runtime.Start(context.Background(), cfg, runtime.WithServer(h.ns), runtime.WithRoles(roles...),
		runtime.WithServiceLogger(func(r auth.Role) *slog.Logger { return loggers[r] }))
	if err != nil {
		closeLogs()
		return nil, err
	}
	rt.StartLoop()
	stop := func() {
		if err := rt.Stop(); err != nil {
			h.rep.note("5a: the agent loop (in this process) stopped with %v", err)
		}
		closeLogs()
	}
	return stop, h.waitPulling(context.Background(), 1)
}

// startAgentProcesses runs k processes of each worker kind and waits until
// each kind's consumer has k pull requests waiting. With profDir, binaries
// built with the profiling hook write their profiles there (profile): the
// hook names the files after the binary, so only one process of each kind
// may be profiled at a time.
func (h *harness) startAgentProcesses(ctx context.Context, bins map[string]string, dir string, k int, profDir string) ([]*ledgerRun, error) {
	var procs []*ledgerRun
	for _, kind := range agentKinds {
		for i := 1; i <= k; i++ {
			name := fmt.Sprintf("%s-%d-of-%d", kind, i, k)
			args := []string{"--nats", h.ns.ClientURL(), "--creds", h.creds.Path(auth.Role(kind))}
			if kind == "tool-runner" {
				args = append(args, "--workspaces", filepath.Join(h.dir, "workspaces-"+name), "--timeout", "30s", "--sandbox", events.BackendLocal)
			}
			p, err := startCommand(name, filepath.Join(h.dir, name+".log"), bins[kind], args, []string{"RATH_NATS_URL="}, profDir)
			if err != nil {
				return procs, err
			}
			procs = append(procs, p)
		}
	}
	h.setWorkers(procs)
	return procs, h.waitPulling(ctx, k)
}

// stopAgentProcesses stops the processes with SIGTERM, each within 30 s,
// and notes what they logged as errors.
func (h *harness) stopAgentProcesses(procs []*ledgerRun) error {
	var errs []error
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if err := p.stop(30 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (log %s)", p.name, err, p.logPath))
		}
		if n := p.logCount(`"level":"ERROR"`); n > 0 {
			h.rep.note("5b: %s logged %d errors; first: %s", p.name, n, p.logSummary(`"level":"ERROR"`))
		}
	}
	h.setWorkers(nil)
	return errors.Join(errs...)
}

// waitPulling waits until every worker kind's consumer has at least k pull
// requests waiting. A stopped process's requests may still count until
// they expire, so this can return before every new process pulls; the
// processes start in well under the time a measurement takes.
func (h *harness) waitPulling(ctx context.Context, k int) error {
	return waitPullingOn(ctx, h.js, k)
}

// waitPullingOn is waitPulling on the server js reaches (the engine
// section's `rath up` runs one of its own).
func waitPullingOn(ctx context.Context, js jetstream.JetStream, k int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, kind := range agentKinds {
		for {
			c, err := js.Consumer(ctx, events.StreamSessions, kind)
			if err == nil {
				var ci *jetstream.ConsumerInfo
				if ci, err = c.Info(ctx); err == nil && ci.NumWaiting >= k {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %d process(es) not pulling after 30s (last: %v)", kind, k, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func (h *harness) setWorkers(procs []*ledgerRun) {
	h.workerMu.Lock()
	defer h.workerMu.Unlock()
	h.workers = procs
}

// workerPIDs are the process IDs of the worker processes running now.
func (h *harness) workerPIDs() []string {
	h.workerMu.Lock()
	defer h.workerMu.Unlock()
	var out []string
	for _, p := range h.workers {
		out = append(out, strconv.Itoa(p.pid()))
	}
	return out
}

// buildServices builds the service binaries of kinds (their directories
// under ./services) into dir with one go build. With profile, the binaries
// of kinds (not the tool runner's spawn helper) carry the profiling hook.
func buildServices(ctx context.Context, dir string, profile bool, kinds ...string) (map[string]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	var pkgs []string
	bins := map[string]string{}
	for _, k := range kinds {
		pkgs = append(pkgs, "./services/"+k)
		bins[k] = filepath.Join(dir, filepath.Base(k))
	}
	if profile {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		ov, err := writeProfileOverlay(dir, root, pkgs...)
		if err != nil {
			return nil, err
		}
		args = append(args, "-overlay", ov)
	}
	args = append(args, pkgs...)
	for _, k := range kinds {
		if k == "tool-runner" { // its spawn helper, found beside it
			args = append(args, "./services/tool-runner/"+sandboxHelper)
		}
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bins, nil
}

// rawRoundTrips publishes n messages one at a time to the raw stream, each
// waiting for its ack and then for its delivery to a pull consumer with
// explicit acks (as the workers' consumers are): the JetStream part of one
// hop.
func (h *harness) rawRoundTrips(ctx context.Context, n, try int) (latencies, error) {
	subject := fmt.Sprintf("bench.rt.%d", try)
	cons, err := h.js.CreateConsumer(ctx, rawStream, jetstream.ConsumerConfig{
		FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("raw round trip consumer: %w", err)
	}
	got := make(chan struct{}, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		got <- struct{}{}
	})
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	body := []byte(`{"bench":"round trip"}`)
	lats := make(latencies, 0, n)
	for range n {
		t := time.Now()
		if _, err := h.js.Publish(ctx, subject, body); err != nil {
			return nil, fmt.Errorf("raw round trip publish: %w", err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			return nil, errors.New("raw round trip: no delivery within 10s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		lats = append(lats, time.Since(t))
	}
	return lats, nil
}

// liveFeed follows every stored event on the live subjects
// (rath.session.<id>.<kind>) on a connection of its own and keeps, per
// session, each event with the time it arrived: the harness's one clock for
// every hop.
type liveFeed struct {
	nc *nats.Conn

	mu     sync.Mutex
	seen   map[string][]arrival
	done   map[string]bool // sessions expected, true once closed
	last   time.Time       // when the last close arrived
	notify chan struct{}
}

type arrival struct {
	at time.Time
	ev events.Stored
}

func followLive(nc *nats.Conn) (*liveFeed, error) {
	f := &liveFeed{nc: nc, seen: map[string][]arrival{}, done: map[string]bool{}, notify: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(events.TenantLiveWildcard(events.DefaultTenant), func(m *nats.Msg) {
		at := time.Now()
		ev, err := events.ParseStored(m.Data)
		if err != nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.done[ev.Session]; !ok {
			return
		}
		f.seen[ev.Session] = append(f.seen[ev.Session], arrival{at: at, ev: ev})
		if ev.Type == events.TypeSessionClosed {
			f.markClosed(ev.Session)
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("follow %s: %w", events.TenantLiveWildcard(events.DefaultTenant), err)
	}
	return f, nil
}

func (f *liveFeed) close() { f.nc.Close() }

// expect makes the feed keep the events of session id.
func (f *liveFeed) expect(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done[id] = false
}

func (f *liveFeed) closed(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.markClosed(id)
}

func (f *liveFeed) markClosed(id string) {
	f.done[id] = true
	f.last = time.Now()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

func (f *liveFeed) changed() <-chan struct{} { return f.notify }

func (f *liveFeed) quietFor() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Since(f.last)
}

func (f *liveFeed) open(ids []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, id := range ids {
		if !f.done[id] {
			out = append(out, id)
		}
	}
	return out
}

// hopTimes are the hops of some sessions by kind, and the sessions'
// durations from start to close.
type hopTimes struct {
	selector, worker, tool, session latencies
	events                          int
	// failed lists the sessions that closed with another outcome than
	// succeeded: the workflow did not run as scripted.
	failed []string
}

func (h hopTimes) err() error {
	if len(h.failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d sessions did not succeed, first: %s", len(h.failed), h.failed[0])
}

// hops times each hop of the sessions from the arrivals of its two events:
// a decision after the event it was caused by; a model call after the turn
// request it answers; a tool call's completion after its request (matched
// by call ID).
func (f *liveFeed) hops(ids []string) hopTimes {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h hopTimes
	for _, id := range ids {
		evs := f.seen[id]
		h.events += len(evs)
		byID := make(map[string]arrival, len(evs))
		calls := map[string]time.Time{}
		var started, closed time.Time
		for _, a := range evs {
			byID[a.ev.ID] = a
		}
		for _, a := range evs {
			cause, caused := byID[a.ev.Causation]
			switch a.ev.Type {
			case events.TypeSessionStarted:
				started = a.at
			case events.TypeSessionClosed:
				closed = a.at
				var d struct {
					Outcome string `json:"outcome"`
					Reason  string `json:"reason"`
				}
				if json.Unmarshal(a.ev.Data, &d) == nil && d.Outcome != "succeeded" {
					h.failed = append(h.failed, fmt.Sprintf("%s (%s: %s)", id, d.Outcome, d.Reason))
				}
			case events.TypeSelectorDecided:
				if caused {
					h.selector = append(h.selector, a.at.Sub(cause.at))
				}
			case events.TypeModelCalled:
				if caused && cause.ev.Type == events.TypeTurnRequested {
					h.worker = append(h.worker, a.at.Sub(cause.at))
				}
			case events.TypeToolRequested, events.TypeToolCompleted:
				var d struct {
					CallID string `json:"call_id"`
				}
				if json.Unmarshal(a.ev.Data, &d) != nil || d.CallID == "" {
					continue
				}
				if a.ev.Type == events.TypeToolRequested {
					calls[d.CallID] = a.at
				} else if t, ok := calls[d.CallID]; ok {
					h.tool = append(h.tool, a.at.Sub(t))
				}
			}
		}
		if !started.IsZero() && !closed.IsZero() {
			h.session = append(h.session, closed.Sub(started))
		}
	}
	return h
}

// countLines counts the occurrences of substr in a file: the lines of a
// JSON log that contain it.
func countLines(path, substr string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), substr)
}
