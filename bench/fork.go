package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// snapshotEvery is the ledger's default snapshot interval K; state-at-N
// samples N among the last 2K events, so that they are not cached heads and
// need a snapshot plus up to K events.
const snapshotEvery = 128

// runFork is section 3: fork latency at sequence 10 and at the head of the
// longest history, and state-at-N latency for each history length.
func (h *harness) runFork(ctx context.Context) error {
	hists, err := h.histories(ctx)
	if err != nil {
		return err
	}
	longest := hists[len(hists)-1]
	short := min(10, longest.n)
	var atShort attempt
	for _, at := range []int{short, longest.n} {
		a, err := h.quietly(ctx, fmt.Sprintf("3a@%d", at), func(ctx context.Context, try int) (attempt, error) {
			return h.forkSeries(ctx, longest, at, try)
		})
		if err != nil {
			return err
		}
		if at == short {
			atShort = a
		} else {
			r := &a.rows[0]
			target := fmt.Sprintf("fork@%d ≤ 2× fork@%d: ", at, short)
			if a.median == 0 || atShort.median == 0 {
				target += "**missed** (no figure)"
			} else {
				x := float64(a.median) / float64(atShort.median)
				verdict := "**met**"
				if x > 2 {
					verdict = "**missed**"
				}
				target += fmt.Sprintf("%.2f×, %s", x, verdict)
			}
			r.target = joinCell(target, r.target)
		}
		h.rep.add(a.rows...)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, hs := range hists {
		lo := max(2, hs.n-2*snapshotEvery)
		ats := make([]uint64, h.cfg.samples)
		for i := range ats {
			ats[i] = uint64(lo + rng.IntN(hs.n-lo)) // in [lo, n-1]: never the head
		}
		err := h.measureQuietly(ctx, fmt.Sprintf("3b@%d", hs.n), func(ctx context.Context, _ int) (attempt, error) {
			return h.stateSeries(ctx, hs, lo, ats)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// forkSeries forks the session at sequence at, samples times, against the
// JetStream work a fork needs at the least: read the parent's event at the
// fork point and write one conditional event on a new subject.
func (h *harness) forkSeries(ctx context.Context, hs *history, at, try int) (attempt, error) {
	var a attempt
	h.logf("3: %d forks of %s at %d", h.cfg.samples, hs.id, at)
	var lats latencies
	failure := ""
	cpu := h.cpuStart()
	for i := range h.cfg.samples {
		lost := h.ledger.logCount("reply lost")
		req := api.ForkRequest{Parent: hs.id, At: uint64(at), ID: sessionID(fmt.Sprintf("fork%d-%d", at, try), i), Reason: "bench"}
		start := time.Now()
		ack, err := h.qcli.Fork(ctx, req)
		d := time.Since(start)
		if err == nil && ack.Seq != uint64(at+1) {
			err = fmt.Errorf("fork at %d acked at sequence %d", at, ack.Seq)
		}
		if err != nil {
			failure = fmt.Sprintf("FAILED after %s: %v", fmtDur(d), err)
			if h.ledger.logCount("reply lost") > lost {
				failure += " — ledger log: " + h.ledger.logSummary("reply lost")
			}
			break
		}
		lats = append(lats, d)
	}
	a.timed(cpu.stop())

	var raw latencies
	cpu = h.cpuStart()
	for i := range h.cfg.samples {
		msgs, err := h.pay.sealedChain(rawPrefixFork, sessionID(fmt.Sprintf("rawfork%d-%d", at, try), i), 1)
		if err != nil {
			return a, err
		}
		d, err := rawFork(ctx, h.js, h.stream, hs.streamSeqs[at-1], msgs[0])
		if err != nil {
			return a, err
		}
		raw = append(raw, d)
	}
	a.timed(cpu.stop())
	r := row{
		id:      fmt.Sprintf("3a@%d", at),
		what:    fmt.Sprintf("fork at N=%d of the %d-event session (client.Fork), median of %d", at, hs.n, h.cfg.samples),
		rawWhat: "get the parent's message at N + one conditional publish",
		raw:     "p50 " + fmtDur(raw.median()),
	}
	if failure != "" {
		r.rath = failure
		a.noise = 0 // a refusal is no disturbance: measuring again cannot help
	} else {
		a.median = lats.median()
		r.rath = fmt.Sprintf("p50 %s (min %s, max %s)", fmtDur(lats.median()), fmtDur(lats.pct(0)), fmtDur(lats.pct(100)))
		r.ratio = fmtRatio(latencyRatio(lats.median(), raw.median()))
	}
	h.logf("3: fork@%d %s %s; raw %s", at, lats, failure, raw)
	a.rows = append(a.rows, r)
	return a, nil
}

// stateSeries reads the session's state at each of ats through the ledger,
// against an ordered consumer reading the session's first N messages.
func (h *harness) stateSeries(ctx context.Context, hs *history, lo int, ats []uint64) (attempt, error) {
	var a attempt
	h.logf("3: state of %s (%d events) at %v", hs.id, hs.n, ats)
	var lats, raw latencies
	failure := ""
	cpu := h.cpuStart()
	for _, at := range ats {
		l, why := h.timeState(ctx, hs.id, at, 1)
		if why != "" {
			failure = why
			break
		}
		lats = append(lats, l...)
	}
	a.timed(cpu.stop())
	cpu = h.cpuStart()
	for _, at := range ats {
		d, err := rawOrderedRead(ctx, h.js, events.StreamSessions, events.SessionFilter(hs.id), int(at))
		if err != nil {
			return a, err
		}
		raw = append(raw, d)
	}
	a.timed(cpu.stop())
	r := row{
		id:      fmt.Sprintf("3b@%d", hs.n),
		what:    fmt.Sprintf("state at N (client.Overview, N random in %d..%d of a %d-event session), median of %d", lo, hs.n-1, hs.n, len(ats)),
		rawWhat: "ordered consumer reading the session's first N messages (replay without a ledger)",
		raw:     "p50 " + fmtDur(raw.median()),
	}
	if failure != "" {
		r.rath = failure
		a.noise = 0 // a refusal is no disturbance: measuring again cannot help
	} else {
		r.rath = "p50 " + fmtDur(lats.median())
		r.ratio = fmtRatio(latencyRatio(lats.median(), raw.median()))
	}
	h.logf("3: state@~%d %s %s; raw %s", hs.n, lats, failure, raw)
	a.rows = append(a.rows, r)
	return a, nil
}
