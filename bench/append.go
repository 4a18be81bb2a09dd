package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
)

// runAppend measures 1d: batched appends through the ledger against raw
// JetStream async publishing of the same sealed bodies.
func (h *harness) runAppend(ctx context.Context) error {
	if err := h.measureQuietly(ctx, "1d", h.appendBatched); err != nil {
		return fmt.Errorf("batched: %w", err)
	}
	return nil
}

// appendBatched is 1d: --sessions new sessions filled with client.AppendBatch:
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
	x := speedRatio(rath, raw)
	h.logf("1d: raw async %s", raw)
	a.rows = append(a.rows, row{
		id:      "1d",
		what:    fmt.Sprintf("append, batched: client.AppendBatch, %d sessions, batches of %d, %d in flight (%d events)", s, h.cfg.batch, g, n),
		rath:    fmt.Sprintf("%s (per batch %s; %s)", rath, lats, use.perEvent(n)),
		rawWhat: fmt.Sprintf("async publish, window %d, stall wait %s, no msg ID", asyncWindow, asyncStallWait),
		raw:     raw.String(),
		ratio:   fmtRatio(x),
		target:  atLeast(x, 0.5, "0.8×"),
	})
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
