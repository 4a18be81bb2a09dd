package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
)

// runAppend measures append throughput through the ledger three ways, each
// against raw JetStream publishing the same sealed bodies.
func (h *harness) runAppend(ctx context.Context) error {
	if err := h.measureQuietly(ctx, "1a", h.appendSequential); err != nil {
		return fmt.Errorf("request/reply: %w", err)
	}
	if err := h.measureQuietly(ctx, "1b", h.appendPipelined); err != nil {
		return fmt.Errorf("pipelined: %w", err)
	}
	if err := h.measureQuietly(ctx, "1d", h.appendBatched); err != nil {
		return fmt.Errorf("batched: %w", err)
	}
	if err := h.measureQuietly(ctx, "1c", h.appendInbox); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	if err := h.runTrustCost(ctx); err != nil {
		return fmt.Errorf("trust cost: %w", err)
	}
	return nil
}

// appendSequential is 1a: client.Append one at a time on one session, against
// one session's conditional publishes one at a time.
func (h *harness) appendSequential(ctx context.Context, try int) (attempt, error) {
	var a attempt
	n := h.cfg.seqAppends()
	id := sessionID(fmt.Sprintf("seq%d", try), 0)
	if _, err := h.cli.Start(ctx, id, events.SessionStarted{Task: "bench"}); err != nil {
		return a, err
	}
	evs, err := h.pay.chunks(id, n)
	if err != nil {
		return a, err
	}
	h.logf("1a: %d appends, request/reply, one session", n)
	lats := make(latencies, 0, n)
	cpu := h.cpuStart()
	start := time.Now()
	for _, ev := range evs {
		t := time.Now()
		if _, err := h.cli.Append(ctx, ev); err != nil {
			return a, err
		}
		lats = append(lats, time.Since(t))
	}
	rath := rate{n: n, d: time.Since(start)}
	use := a.timed(cpu.stop())

	msgs, err := h.pay.sealedChain(rawPrefixSeq, id, n)
	if err != nil {
		return a, err
	}
	h.logf("1a raw: %d conditional publishes, one session", n)
	cpu = h.cpuStart()
	raw, rawLats, err := rawCondSequential(ctx, h.js, msgs, rawPrefixSeq+"."+id+".>")
	if err != nil {
		return a, err
	}
	a.timed(cpu.stop())
	h.logf("1a: Rath %s (%s; %s); raw %s (%s)", rath, lats, use.perEvent(n), raw, rawLats)
	a.rows = append(a.rows, row{
		id:      "1a",
		what:    fmt.Sprintf("append, request/reply one at a time (client.Append, 1 session, %d events)", n),
		rath:    fmt.Sprintf("%s (%s; %s)", rath, lats, use.perEvent(n)),
		rawWhat: "sync publish with expected-last-subject-seq + Nats-Msg-Id, 1 session",
		raw:     fmt.Sprintf("%s (%s)", raw, rawLats),
		ratio:   fmtRatio(speedRatio(rath, raw)),
	})
	return a, nil
}

// appendPipelined is 1b: one goroutine per session, each appending its
// session's events one at a time, all sessions at once; against raw async
// publish of the same bodies, and against conditional publishes with the
// same concurrency (the ceiling of any per-session-linear appender).
func (h *harness) appendPipelined(ctx context.Context, try int) (attempt, error) {
	var a attempt
	n, s := h.cfg.pipeAppends(), h.cfg.sessions
	ids, rath, lats, use, err := h.pipelined(ctx, fmt.Sprintf("pipe%d", try), n, s)
	if err != nil {
		return a, err
	}
	a.timed(use)
	h.logf("1b: Rath %s (%s; %s)", rath, lats, use.perEvent(n))

	h.logf("1b raw: %d async publishes, window %d", n, asyncWindow)
	rawAsyncRate, err := h.timedRawAsync(ctx, &a, ids, n)
	if err != nil {
		return a, err
	}
	cond, filters, err := h.condChains(ids, n)
	if err != nil {
		return a, err
	}
	h.logf("1b raw: %d conditional publishes, %d sessions in flight", n, s)
	cpu := h.cpuStart()
	rawCond, err := rawCondConcurrent(ctx, h.js, cond, filters)
	if err != nil {
		return a, err
	}
	a.timed(cpu.stop())
	h.logf("1b: raw async %s; raw conditional x%d %s", rawAsyncRate, s, rawCond)
	x := speedRatio(rath, rawAsyncRate)
	a.rows = append(a.rows, row{
		id:      "1b",
		what:    fmt.Sprintf("append, pipelined: %d sessions, one request in flight each (%d events)", s, n),
		rath:    fmt.Sprintf("%s (%s; %s)", rath, lats, use.perEvent(n)),
		rawWhat: fmt.Sprintf("async publish, window %d, stall wait %s, no msg ID", asyncWindow, asyncStallWait),
		raw:     rawAsyncRate.String(),
		ratio:   fmtRatio(x),
		target:  atLeast(x, 0.5, "0.8×"),
	}, row{
		id:      "1b′",
		what:    "same Rath run as 1b",
		rath:    rath.String(),
		rawWhat: fmt.Sprintf("sync publish with expected-last-subject-seq + Nats-Msg-Id, %d sessions in flight", s),
		raw:     rawCond.String(),
		ratio:   fmtRatio(speedRatio(rath, rawCond)),
	})
	return a, nil
}

// pipelined appends n events over s new sessions (named after tag), one
// goroutine per session with one request in flight: the Rath part of 1b.
func (h *harness) pipelined(ctx context.Context, tag string, n, s int) ([]string, rate, latencies, cpuUse, error) {
	ids, err := h.startSessions(ctx, tag, s)
	if err != nil {
		return nil, rate{}, nil, cpuUse{}, err
	}
	per := make([][]event.Event, s)
	for i, id := range ids {
		if per[i], err = h.pay.chunks(id, share(n, s, i)); err != nil {
			return nil, rate{}, nil, cpuUse{}, err
		}
	}
	h.logf("%s: %d appends over %d sessions, one in flight per session", tag, n, s)
	r, lats, use, err := h.timedParallel(ctx, s, n, func(ctx context.Context, i int) (latencies, error) {
		own := make(latencies, 0, len(per[i]))
		for _, ev := range per[i] {
			t := time.Now()
			if _, err := h.cli.Append(ctx, ev); err != nil {
				return own, err
			}
			own = append(own, time.Since(t))
		}
		return own, nil
	})
	return ids, r, lats, use, err
}

// timedParallel runs work(i) for every i below k at once and returns the rate
// of n events over the time they took together, the latencies each reported
// and the CPU used.
func (h *harness) timedParallel(ctx context.Context, k, n int, work func(ctx context.Context, i int) (latencies, error)) (rate, latencies, cpuUse, error) {
	var (
		mu   sync.Mutex
		lats latencies
	)
	cpu := h.cpuStart()
	start := time.Now()
	err := parallel(ctx, k, k, func(ctx context.Context, i int) error {
		own, err := work(ctx, i)
		mu.Lock()
		lats = append(lats, own...)
		mu.Unlock()
		return err
	})
	d := time.Since(start)
	use := cpu.stop()
	if err != nil {
		return rate{}, nil, cpuUse{}, err
	}
	return rate{n: n, d: d}, lats, use, nil
}

// appendBatched is 1d: the same work as 1b, sent with client.AppendBatch:
// batchInflight requests in flight, each for its own share of the sessions,
// each carrying up to batch events taken from its sessions in turn; against
// raw async publish of the same bodies in the same run.
func (h *harness) appendBatched(ctx context.Context, try int) (attempt, error) {
	var a attempt
	n, s, g := h.cfg.pipeAppends(), h.cfg.sessions, h.cfg.batchInflight
	ids, rath, lats, use, err := h.batched(ctx, fmt.Sprintf("batch%d", try), n, s, g)
	if err != nil {
		return a, err
	}
	a.timed(use)
	h.logf("1d: Rath %s (per batch %s; %s)", rath, lats, use.perEvent(n))

	raw, err := h.timedRawAsync(ctx, &a, ids, n)
	if err != nil {
		return a, err
	}
	cond, filters, err := h.condChains(ids, n)
	if err != nil {
		return a, err
	}
	cpu := h.cpuStart()
	rounds, err := rawCondRounds(ctx, h.ncRaw, cond, filters)
	if err != nil {
		return a, err
	}
	a.timed(cpu.stop())
	// The same JetStream work stored as atomic batches of k events per
	// session: k = what one of 1d's batches holds per session, and larger.
	perBatch := max(1, h.cfg.batch*g/s)
	atomicRows := make([]row, 0, 2)
	for _, k := range []int{perBatch, 8 * perBatch} {
		chains, filters, err := h.atomicChains(ids, n, k)
		if err != nil {
			return a, err
		}
		cpu = h.cpuStart()
		r, err := rawCondAtomic(ctx, h.ncRaw, chains, filters, k)
		if err != nil {
			return a, err
		}
		use := a.timed(cpu.stop())
		h.logf("1d: raw atomic batches of %d per session: %s (%s)", k, r, use.perEvent(n))
		atomicRows = append(atomicRows, row{
			id:      fmt.Sprintf("1d‴ k=%d", k),
			what:    "same Rath run as 1d",
			rath:    rath.String(),
			rawWhat: fmt.Sprintf("atomic batches of %d events per session, the first expecting the session's last stream seq, Nats-Msg-Id on each, %d batches open at once (%d sessions)", k, atomicInflight, s),
			raw:     fmt.Sprintf("%s (%s)", r, use.perEvent(n)),
			ratio:   fmtRatio(speedRatio(rath, r)),
		})
	}
	x := speedRatio(rath, raw)
	h.logf("1d: raw async %s; raw conditional async in rounds %s", raw, rounds)
	a.rows = append(a.rows, row{
		id:      "1d",
		what:    fmt.Sprintf("append, batched: client.AppendBatch, %d sessions, batches of %d, %d in flight (%d events)", s, h.cfg.batch, g, n),
		rath:    fmt.Sprintf("%s (per batch %s; %s)", rath, lats, use.perEvent(n)),
		rawWhat: fmt.Sprintf("async publish, window %d, stall wait %s, no msg ID", asyncWindow, asyncStallWait),
		raw:     raw.String(),
		ratio:   fmtRatio(x),
		target:  atLeast(x, 0.5, "0.8×"),
	}, row{
		id:      "1d′",
		what:    "same Rath run as 1d",
		rath:    rath.String(),
		rawWhat: fmt.Sprintf("async publish with expected-last-subject-seq + Nats-Msg-Id in rounds of one per session (%d sessions): the JetStream work of 1d without the ledger", s),
		raw:     rounds.String(),
		ratio:   fmtRatio(speedRatio(rath, rounds)),
	})
	a.rows = append(a.rows, atomicRows...)
	return a, nil
}

// batched appends n events over s new sessions (named after tag) with
// client.AppendBatch: g requests in flight, each for its own share of the
// sessions, each carrying up to --batch events taken from its sessions in
// turn: the Rath part of 1d.
func (h *harness) batched(ctx context.Context, tag string, n, s, g int) ([]string, rate, latencies, cpuUse, error) {
	ids, err := h.startSessions(ctx, tag, s)
	if err != nil {
		return nil, rate{}, nil, cpuUse{}, err
	}
	// Client k sends the events of sessions k, k+g, k+2g, … interleaved,
	// cut into batches.
	work := make([][][]event.Event, g)
	for k := range g {
		var mine [][]event.Event
		for i := k; i < s; i += g {
			evs, err := h.pay.chunks(ids[i], share(n, s, i))
			if err != nil {
				return nil, rate{}, nil, cpuUse{}, err
			}
			mine = append(mine, evs)
		}
		var all []event.Event
		for j := 0; ; j++ {
			added := false
			for _, evs := range mine {
				if j < len(evs) {
					all = append(all, evs[j])
					added = true
				}
			}
			if !added {
				break
			}
		}
		for len(all) > 0 {
			m := min(h.cfg.batch, len(all))
			work[k] = append(work[k], all[:m])
			all = all[m:]
		}
	}
	h.logf("%s: %d appends over %d sessions, batches of %d, %d in flight", tag, n, s, h.cfg.batch, g)
	r, lats, use, err := h.timedParallel(ctx, g, n, func(ctx context.Context, k int) (latencies, error) {
		own := make(latencies, 0, len(work[k]))
		for _, b := range work[k] {
			t := time.Now()
			res, err := h.cli.AppendBatch(ctx, b)
			if err != nil {
				return own, err
			}
			for i, r := range res {
				if r.Err != nil {
					return own, fmt.Errorf("event %s: %w", b[i].ID(), r.Err)
				}
			}
			own = append(own, time.Since(t))
		}
		return own, nil
	})
	return ids, r, lats, use, err
}

// appendInbox is 1c: client.Propose of every event (the proposer waits only
// for JetStream to hold the proposal), timed until the ledger has stored all
// of them in the sessions stream.
func (h *harness) appendInbox(ctx context.Context, try int) (attempt, error) {
	var a attempt
	n, s := h.cfg.inboxAppends(), h.cfg.sessions
	ids, err := h.startSessions(ctx, fmt.Sprintf("inbox%d", try), s)
	if err != nil {
		return a, err
	}
	per := make([][]event.Event, s)
	for i, id := range ids {
		if per[i], err = h.pay.chunks(id, share(n, s, i)); err != nil {
			return a, err
		}
	}
	base, err := h.streamMsgs(ctx)
	if err != nil {
		return a, err
	}
	rejectsBefore := h.rejections(ctx)
	h.logf("1c: %d proposals through the inbox over %d sessions", n, s)
	var proposed atomic.Int64
	cpu := h.cpuStart()
	start := time.Now()
	var proposeDone time.Duration
	errc := make(chan error, 1)
	go func() {
		err := parallel(ctx, s, s, func(ctx context.Context, i int) error {
			for _, ev := range per[i] {
				if err := h.cli.Propose(ctx, ev); err != nil {
					return err
				}
				proposed.Add(1)
			}
			return nil
		})
		proposeDone = time.Since(start)
		errc <- err
	}()
	deadline := time.Now().Add(max(2*time.Minute, time.Duration(n)*time.Millisecond))
	for {
		stored, err := h.streamMsgs(ctx)
		if err != nil {
			return a, err
		}
		if stored >= base+uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("%d of %d proposals stored (%d proposed) after %s", stored-base, n, proposed.Load(), time.Since(start).Round(time.Second))
		}
		time.Sleep(10 * time.Millisecond)
	}
	rath := rate{n: n, d: time.Since(start)}
	use := a.timed(cpu.stop())
	if err := <-errc; err != nil {
		return a, err
	}
	rejected := h.rejections(ctx) - rejectsBefore
	proposeRate := rate{n: n, d: proposeDone}
	h.logf("1c: stored %s; proposals accepted by JetStream %s; rejected %d", rath, proposeRate, rejected)

	raw, err := h.timedRawAsync(ctx, &a, ids, n)
	if err != nil {
		return a, err
	}
	a.rows = append(a.rows, row{
		id:      "1c",
		what:    fmt.Sprintf("append, fire-and-forget: client.Propose to the inbox from %d goroutines, timed until all %d are stored", s, n),
		rath:    fmt.Sprintf("%s (proposals acked by JetStream at %s; %d rejected; %s)", rath, proposeRate, rejected, use.perEvent(n)),
		rawWhat: fmt.Sprintf("async publish, window %d", asyncWindow),
		raw:     raw.String(),
		ratio:   fmtRatio(speedRatio(rath, raw)),
	})
	return a, nil
}

// startSessions starts count sessions of a group through the ledger.
func (h *harness) startSessions(ctx context.Context, group string, count int) ([]string, error) {
	ids := make([]string, count)
	for i := range ids {
		ids[i] = sessionID(group, i)
	}
	err := parallel(ctx, count, 64, func(ctx context.Context, i int) error {
		_, err := h.cli.Start(ctx, ids[i], events.SessionStarted{Task: "bench"})
		return err
	})
	return ids, err
}

// rawChains seals each session's share of n events on prefix subjects.
func (h *harness) rawChains(prefix string, ids []string, n int) ([][]rawMsg, error) {
	out := make([][]rawMsg, len(ids))
	for i, id := range ids {
		var err error
		if out[i], err = h.pay.sealedChain(prefix, id, share(n, len(ids), i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// timedRawAsync seals n events over the sessions as valid chains and times
// raw async publishing of them, interleaved as concurrent producers would
// send them; the CPU it used counts toward the attempt.
func (h *harness) timedRawAsync(ctx context.Context, a *attempt, ids []string, n int) (rate, error) {
	chains, err := h.rawChains(rawPrefixAsync, ids, n)
	if err != nil {
		return rate{}, err
	}
	cpu := h.cpuStart()
	r, err := rawAsync(ctx, h.ncRaw, interleave(chains))
	if err != nil {
		return rate{}, err
	}
	a.timed(cpu.stop())
	return r, nil
}

// condChains seals each session's share of n events for the conditional
// raw runs, with each session's subject filter.
func (h *harness) condChains(ids []string, n int) ([][]rawMsg, []string, error) {
	chains, err := h.rawChains(rawPrefixCond, ids, n)
	if err != nil {
		return nil, nil, err
	}
	filters := make([]string, len(ids))
	for i, id := range ids {
		filters[i] = rawPrefixCond + "." + id + ".>"
	}
	return chains, filters, nil
}

// atomicChains is condChains on subjects of their own for the atomic
// batches of k (each run starts on empty subjects).
func (h *harness) atomicChains(ids []string, n, k int) ([][]rawMsg, []string, error) {
	prefix := fmt.Sprintf("%s.k%d", rawPrefixAtomic, k)
	chains, err := h.rawChains(prefix, ids, n)
	if err != nil {
		return nil, nil, err
	}
	filters := make([]string, len(ids))
	for i, id := range ids {
		filters[i] = prefix + "." + id + ".>"
	}
	return chains, filters, nil
}

// rejections counts the recorded rejections.
func (h *harness) rejections(ctx context.Context) uint64 {
	s, err := h.js.Stream(ctx, events.StreamRejects)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// share is session i's part of n events spread over s sessions.
func share(n, s, i int) int {
	q, r := n/s, n%s
	if i < r {
		return q + 1
	}
	return q
}

// interleave takes one message of each session in turn, as concurrent
// producers would.
func interleave(chains [][]rawMsg) []rawMsg {
	var out []rawMsg
	for k := 0; ; k++ {
		added := false
		for _, c := range chains {
			if k < len(c) {
				out = append(out, c[k])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}
