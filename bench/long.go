package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// longWorkflow is section L1's workflow, beside the agents workflow (same
// scripts, same workspace seed).
const longWorkflow = "long.yaml"

// Section L1 runs this many sessions without a prefix and with one.
const (
	longShortSessions = 4
	longLongSessions  = 2
	longPrefix        = 10_000 // events before the first turn, at scale 1
)

// longPrefixEvents is the prefix length of a long session at the run's
// scale (at least 100).
func (c config) longPrefixEvents() int { return max(100, int(float64(longPrefix)*c.scale)) }

// runLong is section L1: the per-hop latency of the selector, the agent
// worker and the tool runner in a session whose first turn comes after
// longPrefix events (chunks and model calls that route nothing), against the
// same hops at the start of a session. The workers run in this process, as
// in 5a. A worker whose cost per hop grows with the session shows a ratio
// well above 1.
func (h *harness) runLong(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "bench", agentWorkflow)
	start, err := h.uploadWorkflow(ctx, filepath.Join(dir, longWorkflow))
	if err != nil {
		return err
	}
	live, err := h.connect("client", "rath-bench-live-long", false)
	if err != nil {
		return err
	}
	feed, err := followLive(live)
	if err != nil {
		return err
	}
	defer feed.close()
	stop, err := h.startAgentsInProcess(dir)
	if err != nil {
		return err
	}
	defer stop()
	if !h.wants("L1") {
		return nil
	}
	prefix := h.cfg.longPrefixEvents()
	a, err := h.quietly(ctx, "L1", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		short := agentIDs(fmt.Sprintf("long-short%d", try), longShortSessions)
		long := agentIDs(fmt.Sprintf("long-long%d", try), longLongSessions)
		cpu := h.cpuStart()
		for _, id := range short {
			if err := h.longSession(ctx, start, feed, id, 0); err != nil {
				return a, err
			}
		}
		a.timed(cpu.stop())
		hs := feed.hops(short)
		hl := hopTimes{}
		for _, id := range long {
			// The prefix is written and routed untimed; only the hops of the
			// turns after it are compared.
			if err := h.longPrefix(ctx, start, feed, id, prefix); err != nil {
				return a, err
			}
			cpu := h.cpuStart()
			if err := h.longGo(ctx, feed, id); err != nil {
				return a, err
			}
			a.timed(cpu.stop())
		}
		hl = feed.hops(long)
		if err := errorsOf(hs.err(), hl.err()); err != nil {
			return a, err
		}
		hop := func(what string, s, l latencies) row {
			ratio := 0.0
			if s.median() > 0 {
				ratio = float64(l.median()) / float64(s.median())
			}
			verdict := "**met**"
			if ratio > 1.5 || ratio == 0 {
				verdict = "**missed**"
			}
			return row{id: "L1",
				what:  fmt.Sprintf("%s: at ~%d events (%d hops) vs at ~10 (%d hops)", what, prefix, len(l), len(s)),
				rath:  fmt.Sprintf("at %d: %s; at 10: %s", prefix, l, s),
				ratio: fmt.Sprintf("%.2f (long ÷ short p50)", ratio), target: "≤ 1.5: " + verdict}
		}
		a.rows = append(a.rows,
			hop("selector hop (trigger stored → decision stored)", hs.selector, hl.selector),
			hop("agent worker hop (turn requested → model call stored)", hs.worker, hl.worker),
			hop("tool runner hop (tool call requested → completed)", hs.tool, hl.tool),
		)
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return nil
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// longSession runs one session of the long workflow after a prefix of n
// events.
func (h *harness) longSession(ctx context.Context, start events.SessionStarted, feed *liveFeed, id string, n int) error {
	if err := h.longPrefix(ctx, start, feed, id, n); err != nil {
		return err
	}
	return h.longGo(ctx, feed, id)
}

// longPrefix starts a session and appends n events that route nothing: user
// and assistant chunks, and a model call every tenth event (the transcript
// and the usage grow), then waits until the selector has handled them all.
func (h *harness) longPrefix(ctx context.Context, start events.SessionStarted, feed *liveFeed, id string, n int) error {
	feed.expect(id)
	if _, err := h.cli.Start(ctx, id, start); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	if n == 0 {
		return nil
	}
	h.logf("L1: %s: %d prefix events", id, n)
	pad := strings.Repeat("x", max(h.cfg.chunkBytes-16, 0))
	for i := 0; i < n; i += api.MaxBatch {
		var batch []event.Event
		for j := i; j < min(n, i+api.MaxBatch); j++ {
			var data any
			switch {
			case j%10 == 9:
				data = &events.ModelCalled{Agent: "filler", Provider: "bench", Model: "m", TokensIn: 10, TokensOut: 5}
			case j%2 == 0:
				data = &events.ChunkAppended{Role: "user", Content: fmt.Sprintf("filler %d %s", j, pad)}
			default:
				data = &events.ChunkAppended{Role: "assistant", Agent: "filler", Content: fmt.Sprintf("filler %d %s", j, pad)}
			}
			ev, err := events.New(id, data, events.WithSource(source))
			if err != nil {
				return err
			}
			batch = append(batch, ev)
		}
		res, err := h.cli.AppendBatch(ctx, batch)
		if err != nil {
			return fmt.Errorf("prefix of %s: %w", id, err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("prefix of %s: %w", id, r.Err)
			}
		}
	}
	began := time.Now()
	if err := h.waitHandled(ctx, "selector"); err != nil {
		return err
	}
	h.logf("L1: %s: the selector handled the prefix %s after it was stored", id, time.Since(began).Round(time.Millisecond))
	return nil
}

// longGo starts the turns with the "go" chunk and waits for the close.
func (h *harness) longGo(ctx context.Context, feed *liveFeed, id string) error {
	if _, err := h.cli.Emit(ctx, id, &events.ChunkAppended{Role: "user", Content: "go"}, events.WithSource(source)); err != nil {
		return fmt.Errorf("go %s: %w", id, err)
	}
	return h.waitClosed(ctx, feed, []string{id})
}

// waitHandled waits until a durable consumer on the sessions stream has
// nothing pending or unacknowledged.
func (h *harness) waitHandled(ctx context.Context, durable string) error {
	logged := time.Now()
	for {
		c, err := h.js.Consumer(ctx, events.StreamSessions, durable)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", durable, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", durable, err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Since(logged) > 10*time.Second {
			h.logf("L1: %s: %d pending, %d unacknowledged", durable, info.NumPending, info.NumAckPending)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
