package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// sectionEngine measures what ADR 0038 (issue 32, one engine) sets targets
// for, against `rath up` as users run it: the binary built from this tree,
// one process with its own NATS server, started in the harness's temporary
// directory. It is optional: it measures no Rath figure against raw
// JetStream, and its first run on a tree is that tree's "before".
//
//   - O3: the process's resident memory fresh and with many active sessions
//     that the services hold folded in their caches;
//   - O5: client.State of a 500- and a 5,000-event session;
//   - O6: one session appending 16 KB tool results one at a time, each
//     waiting for its signed ack (CPU per step), and its log read back.
const sectionEngine = "engine"

// engineWorkflow is O3's workflow, under bench/testdata: two scripted turns,
// then the session waits.
const engineWorkflow = "testdata/engine/idle.yaml"

// engineStateCalls is how many client.State calls each O5 figure times.
const engineStateCalls = 20

// engineResultBytes is the size of each O6 tool result: the tool runner's
// inline limit, the largest result an event carries itself.
const engineResultBytes = 16 << 10

// upRun is a `rath up` process and the section's connections to it.
type upRun struct {
	p     *ledgerRun
	nc    *nats.Conn // client identity
	admin *nats.Conn // admin identity: consumer state
	c     *client.Client
	js    jetstream.JetStream // on admin
}

func (h *harness) runEngine(ctx context.Context) error {
	h.logf("building ./cmd/rath")
	// With --profile, built with the hook: a heap profile after O3
	// (rath-up-O3-heap.pprof), CPU profiles of O6 and O6r (rath-up-O6.pprof,
	// rath-up-O6r.pprof). --figures picks among O3, O5, O6 and O6r.
	bin, err := buildMain(ctx, h.dir, "./cmd/rath", h.cfg.profileDir != "")
	if err != nil {
		return err
	}
	up, err := h.startUp(ctx, bin)
	if err != nil {
		return err
	}
	// Its CPU is measured, not counted as other processes' noise.
	h.setWorkers([]*ledgerRun{up.p})
	defer func() {
		h.setWorkers(nil)
		up.stop(h)
	}()
	if h.wants("O3") {
		if err := h.engineMemory(ctx, up); err != nil {
			return fmt.Errorf("O3: %w", err)
		}
	}
	if h.wants("O5") {
		if err := h.engineState(ctx, up); err != nil {
			return fmt.Errorf("O5: %w", err)
		}
	}
	if h.wants("O6") || h.wants("O6r") {
		if err := h.engineResults(ctx, up); err != nil {
			return fmt.Errorf("O6: %w", err)
		}
	}
	return nil
}

// startUp runs `rath up` with its data in the harness's directory, a NATS
// server on a free loopback port, no web console, and no quota on starts
// (the section starts a thousand sessions in a minute), and connects to it
// with the credentials it wrote, once its agent loop pulls.
func (h *harness) startUp(ctx context.Context, bin string) (*upRun, error) {
	data := filepath.Join(h.dir, "up")
	args := []string{"up", "--data", data, "--listen", "127.0.0.1:0", "--http", "",
		"--sandbox", events.BackendLocal, "--workspaces", filepath.Join(data, "workspaces"),
		fmt.Sprintf("--quota-starts-per-minute=%d", noStartsQuota)}
	p, err := startCommand("rath-up", filepath.Join(h.dir, "rath-up.log"), bin, args, []string{"RATH_NATS_URL="}, h.cfg.profileDir)
	if err != nil {
		return nil, err
	}
	up := &upRun{p: p}
	if err := up.connect(ctx, filepath.Join(data, "creds")); err != nil {
		up.stop(h)
		return nil, err
	}
	h.logf("rath up (%s) ready", p.where())
	return up, nil
}

// upReady is the line `rath up` prints once its server and services run.
const upReady = "rath: NATS with JetStream at "

func (up *upRun) connect(ctx context.Context, creds string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var url string
	for url == "" {
		if line := up.p.logLine(upReady); line != "" {
			url, _, _ = strings.Cut(strings.TrimPrefix(line, upReady), " ")
			break
		}
		select {
		case <-up.p.exited:
			return fmt.Errorf("rath up exited before it was ready: %v (log %s)", up.p.waitErr, up.p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("rath up not ready after a minute (log %s)", up.p.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	dial := func(r auth.Role) (*nats.Conn, error) {
		opts, _, err := auth.Options(filepath.Join(creds, auth.FileName(r)))
		if err != nil {
			return nil, err
		}
		nc, err := nats.Connect(url, append(opts, nats.Name("rath-bench-engine-"+string(r)))...)
		if err != nil {
			return nil, fmt.Errorf("connect to rath up at %s as %s: %w", url, r, err)
		}
		return nc, nil
	}
	var err error
	if up.nc, err = dial(auth.RoleClient); err != nil {
		return err
	}
	if up.admin, err = dial(auth.RoleAdmin); err != nil {
		return err
	}
	if up.js, err = jetstream.New(up.admin); err != nil {
		return err
	}
	if up.c, err = client.New(up.nc, client.WithSource(source), client.WithTimeout(appendTimeout), client.WithRetryFor(appendRetry)); err != nil {
		return err
	}
	return waitPullingOn(ctx, up.js, 1)
}

// stop stops the process (SIGTERM, then a kill) and notes the errors it
// logged.
func (up *upRun) stop(h *harness) {
	for _, nc := range []*nats.Conn{up.nc, up.admin} {
		if nc != nil {
			nc.Close()
		}
	}
	if err := up.p.stop(30 * time.Second); err != nil {
		h.rep.note("engine: rath up stopped with %v (log %s)", err, up.p.logPath)
	}
	if n := up.p.logCount("level=ERROR"); n > 0 {
		h.rep.note("engine: rath up logged %d errors; first: `%s`", n, up.p.logLine("level=ERROR"))
	}
}

// settled waits until every durable consumer of the sessions stream has
// been delivered, and has acked, every event: the services are done with
// what was appended.
func (up *upRun) settled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		busy := ""
		s, err := up.js.Stream(ctx, events.StreamSessions)
		if err == nil {
			l := s.ListConsumers(ctx)
			for ci := range l.Info() {
				// Durable consumers are the services'; an ephemeral one
				// is a reader's (a watch, a read's ordered consumer) and
				// may idle until it is dropped.
				if ci.Config.Durable != "" && (ci.NumPending > 0 || ci.NumAckPending > 0) {
					busy = fmt.Sprintf("%s: %d pending, %d unacked", ci.Name, ci.NumPending, ci.NumAckPending)
				}
			}
			err = l.Err()
		}
		if busy == "" && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("services not settled after 5 min: %s (%v)", busy, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// disturbed flags a figure timed while other processes used the CPUs.
func disturbed(u cpuUse) string {
	if n := u.cores(u.others); n >= noisyCores {
		return fmt.Sprintf("⚠ disturbed: other processes used %.2f cores on average", n)
	}
	return ""
}

// engineMemory is O3: the resident memory of `rath up` fresh, and with n
// active sessions that ran two scripted turns each and wait, folded in the
// selector's, the agent worker's and the ledger's caches.
func (h *harness) engineMemory(ctx context.Context, up *upRun) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	wf, err := workflow.Load(filepath.Join(root, "bench", engineWorkflow))
	if err != nil {
		return err
	}
	ref, err := workflow.Store(ctx, wf, up.c.PutBlob)
	if err != nil {
		return err
	}
	start := events.SessionStarted{Task: "bench engine", Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}
	rss0, _, err := up.p.memory()
	if err != nil {
		return err
	}
	n, inFlight := h.cfg.n(1000, 20), 32
	idle, err := watchIdle(up.nc, "bench-engine-", 2)
	if err != nil {
		return err
	}
	defer idle.close()
	h.logf("O3: %d sessions of two scripted turns, %d starts in flight; RSS %s", n, inFlight, fmtBytes(rss0))
	t0 := time.Now()
	if err := parallel(ctx, n, inFlight, func(ctx context.Context, i int) error {
		_, err := up.c.Start(ctx, sessionID("engine", i), start)
		return err
	}); err != nil {
		return err
	}
	if err := idle.wait(ctx, n, 10*time.Minute); err != nil {
		return err
	}
	loaded := time.Since(t0)
	if err := up.settled(ctx); err != nil {
		return err
	}
	rss1, hwm1, err := up.p.memory()
	if err != nil {
		return err
	}
	h.logf("O3: %d sessions waiting after %s; RSS %s → %s, peak %s", n, fmtDur(loaded), fmtBytes(rss0), fmtBytes(rss1), fmtBytes(hwm1))
	if h.cfg.profileDir != "" {
		// After the RSS figures: the profile's GC must not change them.
		if err := up.p.heapProfile(filepath.Join(h.cfg.profileDir, "rath-up-O3-heap.pprof")); err != nil {
			return err
		}
	}
	scaled := ""
	if n != 1000 {
		scaled = " (scaled down from 1,000 by --quick/--scale: not comparable with the target's 1,000)"
	}
	h.rep.add(row{
		id: "O3",
		what: fmt.Sprintf("`rath up` (one process: NATS, ledger, selector, agent worker, tool runner, memory) resident memory (VmRSS), fresh → with %d active sessions%s (2 scripted turns each, then waiting; %d starts in flight)",
			n, scaled, inFlight),
		rath: fmt.Sprintf("%s → %s (+%s, %s per session); peak (VmHWM) %s; loaded in %s (%.1f sessions/s)",
			fmtBytes(rss0), fmtBytes(rss1), fmtBytes(rss1-rss0), fmtBytes((rss1-rss0)/int64(n)), fmtBytes(hwm1), fmtDur(loaded), float64(n)/loaded.Seconds()),
		target: "≤ ½ of before (ADR 0038: one cache instead of four)",
	})
	return nil
}

// idleSessions counts, from the live feed, the sessions (of one ID prefix)
// whose turns have all completed.
type idleSessions struct {
	sub     *nats.Subscription
	mu      sync.Mutex
	turns   map[string]int
	idle    int
	failed  error
	changed chan struct{}
}

// watchIdle follows the live feed of the default tenant's sessions whose
// IDs start with prefix and counts a session idle when it has completed
// turns turns.
func watchIdle(nc *nats.Conn, prefix string, turns int) (*idleSessions, error) {
	w := &idleSessions{turns: map[string]int{}, changed: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(events.TenantLiveWildcard(events.DefaultTenant), func(m *nats.Msg) {
		ev, err := events.ParseStored(m.Data)
		if err != nil || !strings.HasPrefix(ev.Session, prefix) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch ev.Type {
		case events.TypeTurnCompleted:
			if w.turns[ev.Session]++; w.turns[ev.Session] == turns {
				w.idle++
			}
		case events.TypeTurnFailed, events.TypeSessionClosed:
			if w.failed == nil {
				w.failed = fmt.Errorf("session %s: %s at %d", ev.Session, ev.Type, ev.Seq)
			}
		default:
			return
		}
		select {
		case w.changed <- struct{}{}:
		default:
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", events.TenantLiveWildcard(events.DefaultTenant), err)
	}
	w.sub = sub
	return w, nil
}

// wait waits until n sessions are idle, one fails, or limit passes.
func (w *idleSessions) wait(ctx context.Context, n int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		w.mu.Lock()
		idle, failed := w.idle, w.failed
		w.mu.Unlock()
		if failed != nil {
			return failed
		}
		if idle >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d sessions idle after %s: %w", idle, n, limit, ctx.Err())
		case <-w.changed:
		}
	}
}

func (w *idleSessions) close() { _ = w.sub.Unsubscribe() }

// engineState is O5: client.State (the whole state, folded in the client
// from the session's log) of a session of 500 and of 5,000 events (a start
// and chunks), timed over engineStateCalls calls each after one untimed.
func (h *harness) engineState(ctx context.Context, up *upRun) error {
	var (
		lat  = map[int]latencies{}
		cpus = map[int]cpuUse{}
	)
	sizes := []int{500, 5_000}
	for _, size := range sizes {
		id := sessionID(fmt.Sprintf("state%d", size), 0)
		if _, err := up.c.Start(ctx, id, events.SessionStarted{Task: "bench engine state"}); err != nil {
			return err
		}
		for left := size - 1; left > 0; {
			k := min(left, h.cfg.batch)
			evs, err := h.pay.chunks(id, k)
			if err != nil {
				return err
			}
			res, err := up.c.AppendBatch(ctx, evs)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
			left -= k
		}
		if err := up.settled(ctx); err != nil {
			return err
		}
		h.logf("O5: client.State of %s (%d events), %d calls", id, size, engineStateCalls)
		var l latencies
		var cpu *cpuMeter
		for i := range engineStateCalls + 1 {
			if i == 1 {
				cpu = h.cpuStart()
			}
			t := time.Now()
			st, err := up.c.State(ctx, id)
			if err != nil {
				return err
			}
			if i > 0 {
				l = append(l, time.Since(t))
			}
			if st.Seq != uint64(size) {
				return fmt.Errorf("state of %s at %d, want %d", id, st.Seq, size)
			}
		}
		lat[size], cpus[size] = l, cpu.stop()
	}
	per := func(size int) string {
		u, l := cpus[size], lat[size]
		return fmt.Sprintf("p50 %s, p95 %s (runtime %s CPU/call, client %s CPU/call)", fmtDur(l.median()), fmtDur(l.pct(95)),
			fmtDur(u.workers/engineStateCalls), fmtDur(u.self/engineStateCalls))
	}
	small, big := sizes[0], sizes[1]
	p50 := lat[big].median()
	h.rep.add(
		row{id: fmt.Sprintf("O5@%d", small), what: fmt.Sprintf("client.State of a %d-event session (a start and chunks), %d calls one at a time", small, engineStateCalls),
			rath: per(small), target: disturbed(cpus[small])},
		row{id: fmt.Sprintf("O5@%d", big), what: fmt.Sprintf("client.State of a %d-event session (a start and chunks), %d calls one at a time", big, engineStateCalls),
			rath: per(big), rawWhat: fmt.Sprintf("O5@%d: the same at %d events (1× is flat in the session's length)", small, small),
			raw: fmtDur(lat[small].median()), ratio: fmtRatio(latencyRatio(p50, lat[small].median())),
			target: joinCell(fmt.Sprintf("p50 ≤ 20 ms: %s", verdict(p50 <= 20*time.Millisecond)), disturbed(cpus[big]))},
	)
	return nil
}

// engineResults is O6: one session appending steps tool results of
// engineResultBytes through the Go client (client.Emit of
// rath.tool.completed), one at a time, each waiting for its signed ack;
// CPU per step is the runtime's (the `rath up` process) and this
// process's (the client's) over the appends and until the services have
// taken every event. Then the session's whole log read back with
// client.Log (O6r). --figures O6r alone still appends the results, without
// O6's row.
func (h *harness) engineResults(ctx context.Context, up *upRun) error {
	steps := h.cfg.n(5_000, 100)
	id := sessionID("results", 0)
	if _, err := up.c.Start(ctx, id, events.SessionStarted{Task: "bench engine results"}); err != nil {
		return err
	}
	const line = "tool output: a line of a command's result, as it printed it\n"
	result := strings.Repeat(line, engineResultBytes/len(line)+1)[:engineResultBytes]
	if err := up.settled(ctx); err != nil {
		return err
	}
	h.logf("O6: %d tool results of %s, one at a time", steps, fmtBytes(engineResultBytes))
	stopProfile := up.p.profile(filepath.Join(h.cfg.profileDir, "rath-up-O6.pprof"))
	var l latencies
	cpu := h.cpuStart()
	for i := range steps {
		t := time.Now()
		ack, err := up.c.Emit(ctx, id, &events.ToolCompleted{CallID: fmt.Sprintf("call-%05d", i), Tool: "bench_result",
			Result: result, DurationMS: 1})
		if err != nil {
			return err
		}
		l = append(l, time.Since(t))
		if ack.Sig == "" {
			return fmt.Errorf("ack of %s at %d has no signature", id, ack.Seq)
		}
	}
	acked := cpu.stop()
	if err := up.settled(ctx); err != nil {
		return err
	}
	u := cpu.stop()
	if err := stopProfile(); err != nil {
		return err
	}
	h.logf("O6: the services were done %s after the last ack", fmtDur(u.wall-acked.wall))
	perStep := (u.workers + u.self) / time.Duration(steps)
	scaled := ""
	if steps != 5_000 {
		scaled = " (scaled down from 5,000 by --quick/--scale)"
	}
	if h.wants("O6") {
		h.rep.add(row{id: "O6",
			what: fmt.Sprintf("one session appending %d tool results of 16 KB%s (client.Emit of rath.tool.completed, one at a time, each waiting for its signed ack): CPU per step, runtime (`rath up`) + client, until the services took every event", steps, scaled),
			rath: fmt.Sprintf("%s CPU/step (runtime %s, client %s); until the last ack %s CPU/step (runtime %s), the services done %s after it; per append p50 %s, p99 %s",
				fmtDur(perStep), fmtDur(u.workers/time.Duration(steps)), fmtDur(u.self/time.Duration(steps)),
				fmtDur((acked.workers+acked.self)/time.Duration(steps)), fmtDur(acked.workers/time.Duration(steps)), fmtDur(u.wall-acked.wall),
				fmtDur(l.median()), fmtDur(l.pct(99))),
			target: joinCell(fmt.Sprintf("≤ 1.9 ms/step: %s", verdict(perStep <= 1900*time.Microsecond)), disturbed(u))})
	}
	if !h.wants("O6r") {
		return nil
	}
	h.logf("O6: reading the %d-event log back", steps+1)
	stopProfile = up.p.profile(filepath.Join(h.cfg.profileDir, "rath-up-O6r.pprof"))
	cpu = h.cpuStart()
	t := time.Now()
	evs, err := up.c.Log(ctx, id, client.Range{})
	if err != nil {
		return err
	}
	read := time.Since(t)
	u = cpu.stop()
	if err := stopProfile(); err != nil {
		return err
	}
	if len(evs) != steps+1 {
		return fmt.Errorf("read %d events of %s back, want %d", len(evs), id, steps+1)
	}
	h.rep.add(row{id: "O6r",
		what:   fmt.Sprintf("reading that %d-event log (%s of results) back with client.Log: the runtime's CPU", len(evs), fmtBytes(int64(steps)*engineResultBytes)),
		rath:   fmt.Sprintf("runtime %.2f s CPU (client %.2f s CPU; %s wall)", u.workers.Seconds(), u.self.Seconds(), fmtDur(read)),
		target: joinCell(fmt.Sprintf("≤ 0.5 s runtime CPU: %s", verdict(u.workers <= 500*time.Millisecond)), disturbed(u))})
	return nil
}
