package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/session-ledger/service"
)

// runMemory is section 4: the resident memory of a fresh ledger process
// before and after it created many sessions (a start and one chunk each,
// pipelined over many in-flight requests).
func (h *harness) runMemory(ctx context.Context) error {
	old := h.ledger
	if err := old.stop(30 * time.Second); err != nil {
		return fmt.Errorf("stop %s: %w", old.name, err)
	}
	if err := h.startLedger(ctx, true); err != nil {
		return err
	}
	time.Sleep(time.Second)
	rss0, _, err := h.ledger.memory()
	if err != nil {
		return err
	}
	stopProfile := h.ledger.profile(filepath.Join(h.cfg.profileDir, "ledger-memory.pprof"))
	m, workers := h.cfg.memSessions(), h.cfg.sessions
	h.logf("4: creating %d sessions (start + 1 chunk) on %s, %d in flight; RSS %s", m, h.ledger.name, workers, fmtBytes(rss0))
	cpu := h.cpuStart()
	start := time.Now()
	err = parallel(ctx, m, workers, func(ctx context.Context, i int) error {
		id := sessionID("mem", i)
		if _, err := h.cli.Start(ctx, id, events.SessionStarted{Task: "bench memory"}); err != nil {
			return err
		}
		ev, err := h.pay.chunk(id)
		if err != nil {
			return err
		}
		_, err = h.cli.Append(ctx, ev)
		return err
	})
	if err != nil {
		return err
	}
	created := rate{n: 2 * m, d: time.Since(start)}
	use := cpu.stop()
	if err := stopProfile(); err != nil {
		return err
	}
	rss1, hwm1, err := h.ledger.memory()
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	rss2, hwm2, err := h.ledger.memory()
	if err != nil {
		return err
	}
	if h.cfg.profileDir != "" {
		// After the RSS figures: the profile's GC must not change them.
		if err := h.ledger.heapProfile(filepath.Join(h.cfg.profileDir, "ledger-memory-heap.pprof")); err != nil {
			return err
		}
	}
	h.logf("4: %s; RSS %s → %s (5 s later %s), peak %s", created, fmtBytes(rss0), fmtBytes(rss1), fmtBytes(rss2), fmtBytes(max(hwm1, hwm2)))
	cached := service.DefaultConfig().Ledger.CacheSessions
	target := ""
	if n := use.cores(use.others); n >= noisyCores {
		target = fmt.Sprintf("⚠ disturbed: other processes used %.2f cores on average", n)
	}
	h.rep.add(row{
		id: "4",
		what: fmt.Sprintf("ledger resident memory (VmRSS, separate process), fresh → after creating %d sessions (start + 1 chunk each, %d in flight)",
			m, workers),
		rath: fmt.Sprintf("%s → %s (+%s: %s per session, %s per cached session, the cache holding at most %d); 5 s later %s; peak (VmHWM) %s",
			fmtBytes(rss0), fmtBytes(rss1), fmtBytes(rss1-rss0), fmtBytes((rss1-rss0)/int64(m)),
			fmtBytes((rss1-rss0)/int64(min(m, cached))), cached, fmtBytes(rss2), fmtBytes(max(hwm1, hwm2))),
		target: target,
	})
	h.rep.add(row{
		id:     "4′",
		what:   fmt.Sprintf("session creation rate during 4 (%d appends: %d starts + %d chunks)", 2*m, m, m),
		rath:   fmt.Sprintf("%s (%s)", created, use.perEvent(2*m)),
		target: target,
	})
	return nil
}
