package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runTrustCost measures what authentication and signing cost (issue 10's
// target: at most 15 % of the pipelined and batched append rates): 1b's and
// 1d's appends against this harness (every connection authenticated as its
// role, every event signed, heads recorded) and, in the same run, against a
// second embedded server with no authentication and a ledger that signs
// nothing and records no heads. Only the Rath part is timed; both servers
// run in this process, the idle one costs nothing.
func (h *harness) runTrustCost(ctx context.Context) error {
	if !h.wants("trust") && !h.wants("T1b") && !h.wants("T1d") {
		return nil
	}
	if h.cfg.ledgerProcess {
		h.rep.note("trust cost not measured: the unsigned baseline runs the ledger in the harness process only")
		return nil
	}
	open := &harness{cfg: h.cfg, logw: h.logw, started: h.started, pay: h.pay, open: true, dir: filepath.Join(h.dir, "open")}
	if err := os.MkdirAll(open.dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err := open.tearDown(); err != nil {
			h.logf("trust: stopping the baseline: %v", err)
		}
	}()
	if err := open.setUp(ctx); err != nil {
		return fmt.Errorf("baseline without authentication or signatures: %w", err)
	}
	n, s, g := h.cfg.pipeAppends(), h.cfg.sessions, h.cfg.batchInflight
	figures := []struct {
		id, what string
		run      func(h *harness, tag string) (rate, cpuUse, error)
	}{
		{"T1b", fmt.Sprintf("1b with authentication and signatures (as `rath up`): %d sessions, one request in flight each (%d events)", s, n),
			func(h *harness, tag string) (rate, cpuUse, error) {
				_, r, _, use, err := h.pipelined(ctx, tag, n, s)
				return r, use, err
			}},
		{"T1d", fmt.Sprintf("1d with authentication and signatures: batches of %d, %d in flight (%d events)", h.cfg.batch, g, n),
			func(h *harness, tag string) (rate, cpuUse, error) {
				_, r, _, use, err := h.batched(ctx, tag, n, s, g)
				return r, use, err
			}},
	}
	for _, f := range figures {
		if !h.wants("trust") && !h.wants(f.id) {
			continue // --figures T1d measures that one alone
		}
		// runs[0] with authentication and signing, runs[1] without.
		var (
			runs [2]struct {
				rates []rate
				cpu   time.Duration
			}
			noise float64
		)
		for i := range 2 * h.cfg.trustPairs {
			// ABBA: the baseline first in even pairs, second in odd ones.
			side, k, name := h, 0, "with"
			if i%4 == 0 || i%4 == 3 {
				side, k, name = open, 1, "without"
			}
			tag := fmt.Sprintf("%s-%s%d", strings.ToLower(f.id), name, i)
			r, use, err := f.run(side, tag)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", f.id, tag, err)
			}
			noise = max(noise, use.cores(use.others))
			h.logf("%s: %s %s (%s)", f.id, name, r, use.perEvent(n))
			runs[k].rates = append(runs[k].rates, r)
			runs[k].cpu += use.self + use.ledger
		}
		with, without := runs[0], runs[1]
		x := speedRatio(sumRates(with.rates), sumRates(without.rates))
		target := fmt.Sprintf("≥ 0.85× (cost ≤ 15 %%): %s", verdict(x >= 0.85))
		if noise >= noisyCores {
			target = joinCell(target, fmt.Sprintf("⚠ disturbed: other processes used up to %.2f cores while timed", noise))
		}
		h.rep.add(row{
			id:      f.id,
			what:    f.what,
			rath:    fmt.Sprintf("%s (%d µs CPU/event)", rates(with.rates), perEventCPU(with.cpu, n*len(with.rates))),
			rawWhat: "the same appends in the same run (alternating ABBA) to a server without authentication and a ledger that signs nothing and records no heads",
			raw:     fmt.Sprintf("%s (%d µs CPU/event)", rates(without.rates), perEventCPU(without.cpu, n*len(without.rates))),
			ratio:   fmtRatio(x),
			target:  target,
		})
	}
	return nil
}

// sumRates is the rate of several runs taken together.
func sumRates(rs []rate) rate {
	var t rate
	for _, r := range rs {
		t.n += r.n
		t.d += r.d
	}
	return t
}

// rates lists the runs' rates: "12.1k, 11.9k ev/s".
func rates(rs []rate) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmtRate(r.perSec())
	}
	return strings.Join(s, ", ") + " ev/s"
}

func perEventCPU(d time.Duration, n int) int64 {
	if n == 0 {
		return 0
	}
	return d.Microseconds() / int64(n)
}
