package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// history is a session written through the ledger for the replay, fork and
// state-at-N figures: a start and n-1 chunks, every event sealed and chained
// by the ledger, so the ledger also stored its snapshots as it does in use.
type history struct {
	id string
	n  int
	// streamSeqs[k] is the stream sequence of the event with sequence k+1.
	streamSeqs []uint64
	write      rate
	// deciles are the append rates of each tenth of the history, in order.
	deciles []rate
}

// histories writes (once) the sessions the replay and fork sections read.
func (h *harness) histories(ctx context.Context) ([]*history, error) {
	if h.hist != nil {
		return h.hist, nil
	}
	var out []*history
	for _, n := range h.cfg.histories() {
		hs, err := h.writeHistory(ctx, sessionID(fmt.Sprintf("hist%d", n), 0), n)
		if err != nil {
			return nil, fmt.Errorf("write %d-event history: %w", n, err)
		}
		out = append(out, hs)
	}
	h.hist = out
	return out, nil
}

// writeHistory writes one session of n events through the ledger, with
// history-workers appends to that one session in flight: the ledger
// serialises them, so this is the single-session append rate.
func (h *harness) writeHistory(ctx context.Context, id string, n int) (*history, error) {
	hs := &history{id: id, n: n, streamSeqs: make([]uint64, n)}
	start := time.Now()
	a, err := h.cli.Start(ctx, id, events.SessionStarted{Task: "bench history"})
	if err != nil {
		return nil, err
	}
	hs.streamSeqs[0] = a.StreamSeq
	h.logf("writing a %d-event session %s through the ledger, %d appends in flight", n, id, h.cfg.historyWorkers)
	var (
		mu      sync.Mutex
		done    atomic.Int64
		tenth   = max((n-1+9)/10, 1)
		lastT   = time.Now()
		lastN   int64
		deciles []rate
	)
	err = parallel(ctx, n-1, h.cfg.historyWorkers, func(ctx context.Context, _ int) error {
		ev, err := h.pay.chunk(id)
		if err != nil {
			return err
		}
		a, err := h.cli.Append(ctx, ev)
		if err != nil {
			return err
		}
		if a.Seq < 2 || a.Seq > uint64(n) {
			return fmt.Errorf("ack at sequence %d outside 2..%d", a.Seq, n)
		}
		hs.streamSeqs[a.Seq-1] = a.StreamSeq
		if d := done.Add(1); d%int64(tenth) == 0 || d == int64(n-1) {
			mu.Lock()
			now := time.Now()
			deciles = append(deciles, rate{n: int(d - lastN), d: now.Sub(lastT)})
			lastT, lastN = now, d
			mu.Unlock()
			if n >= 10_000 {
				h.logf("  %s: %d/%d (%s)", id, d+1, n, deciles[len(deciles)-1])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	hs.write = rate{n: n, d: time.Since(start)}
	hs.deciles = deciles
	h.logf("wrote %s: %s", id, hs.write)
	return hs, nil
}

func (hs *history) decileSummary() string {
	var parts []string
	for _, d := range hs.deciles {
		parts = append(parts, fmtRate(d.perSec()))
	}
	return strings.Join(parts, " → ")
}
