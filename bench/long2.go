package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Figure L2: one scripted session of l2Turns turns (at scale 1), each
// running a command that prints l2ResultBytes, timed from its log.
const (
	l2Turns       = 2000
	l2ResultBytes = 16_000 // a tool result at the inline limit (16 KiB)
)

func (c config) l2Turns() int { return max(100, int(float64(l2Turns)*c.scale)) }

// l2Workflow writes L2's workflow and script into dir: an agent that runs
// the same command turns times, and a rule that closes the session at the
// last result.
func l2Workflow(dir string, turns int) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	wf := fmt.Sprintf(`name: bench-l2
description: Figure L2, a long scripted session of tool results at the inline limit.
agents:
  - name: reader
    provider: scripted
    model: scripted-1
    system: You print the file again.
    tools: [run]
    script: reader.yaml
rules:
  - name: enough
    when: event.type == "rath.tool.call.completed" && state.turns >= %d
    route: {close: {outcome: succeeded, reason: all turns taken}}
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: reader}
budgets:
  max_turns: %d
`, turns, turns+10)
	var script strings.Builder
	for range turns + 10 {
		fmt.Fprintf(&script, "- content: Printing the file.\n  tool_calls:\n    - name: run\n      arguments: {command: [sh, -c, 'yes 0123456789abcde | head -c %d']}\n", l2ResultBytes)
	}
	path := filepath.Join(dir, "l2.yaml")
	if err := os.WriteFile(path, []byte(wf), 0o644); err != nil {
		return "", err
	}
	return path, os.WriteFile(filepath.Join(dir, "reader.yaml"), []byte(script.String()), 0o644)
}

// runL2 runs figure L2 with the section's workers: the session must close,
// and its last twentieth of turns must take at most 1.5 times as long as its
// first twentieth (turns 1,900–2,000 against 1–100 at scale 1).
func (h *harness) runL2(ctx context.Context) error {
	turns := h.cfg.l2Turns()
	path, err := l2Workflow(filepath.Join(h.dir, "l2"), turns)
	if err != nil {
		return err
	}
	start, err := h.uploadWorkflow(ctx, path)
	if err != nil {
		return err
	}
	var a attempt
	id := fmt.Sprintf("l2-%d", time.Now().UnixNano())
	h.logf("L2: %s: %d turns, each with a %d-byte tool result", id, turns, l2ResultBytes)
	cpu := h.cpuStart()
	began := time.Now()
	if _, err := h.cli.Start(ctx, id, start); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	ov, err := h.waitOverview(ctx, id, func(ov *session.Overview) bool { return ov.Status.Ended() }, 60*time.Minute, "L2")
	if err != nil {
		return err
	}
	took := time.Since(began)
	use := a.timed(cpu.stop())
	if ov.Status != session.StatusClosed || ov.Outcome != "succeeded" {
		return fmt.Errorf("L2: %s ended %s/%s after %d turns, want closed/succeeded", id, ov.Status, ov.Outcome, ov.Counts.Turns)
	}
	var log []events.Stored
	for from := uint64(1); from <= ov.Seq; {
		page, err := h.cli.Log(ctx, id, client.Range{From: from, To: ov.Seq, Limit: api.MaxLogPage})
		if err != nil {
			return fmt.Errorf("L2: log of %s: %w", id, err)
		}
		if len(page) == 0 {
			break
		}
		log = append(log, page...)
		from = page[len(page)-1].Seq + 1
	}
	ends := []time.Time{log[0].Time}
	for _, ev := range log {
		if ev.Type == events.TypeTurnCompleted {
			ends = append(ends, ev.Time)
		}
	}
	if len(ends)-1 < turns {
		return fmt.Errorf("L2: %s closed after %d completed turns, want %d", id, len(ends)-1, turns)
	}
	w := turns / 20
	first := ends[w].Sub(ends[0])
	last := ends[turns].Sub(ends[turns-w])
	ratio := float64(last) / float64(first)
	verdict := "**met**"
	if ratio > 1.5 {
		verdict = "**missed**"
	}
	h.logf("L2: closed after %s, %d events; turns 1–%d took %s, turns %d–%d took %s (%.2f×)", took.Round(time.Millisecond), len(log), w, first, turns-w+1, turns, last, ratio)
	a.rows = append(a.rows, row{
		id:   "L2",
		what: fmt.Sprintf("a scripted session of %d turns, each with a %d-byte tool result (%d events, closed after %s)", turns, l2ResultBytes, len(log), took.Round(time.Second)),
		rath: fmt.Sprintf("turns 1–%d: %s (%s a turn); turns %d–%d: %s (%s a turn); %s", w, first.Round(time.Millisecond), (first / time.Duration(w)).Round(time.Microsecond),
			turns-w+1, turns, last.Round(time.Millisecond), (last / time.Duration(w)).Round(time.Microsecond), use.perEvent(len(log))),
		ratio:  fmt.Sprintf("%.2f (last ÷ first)", ratio),
		target: "≤ 1.5: " + verdict,
	})
	h.rep.add(a.rows...)
	return nil
}

// waitOverview polls a session's overview until done says so, logging
// progress every 10 s.
func (h *harness) waitOverview(ctx context.Context, id string, done func(*session.Overview) bool, limit time.Duration, what string) (*session.Overview, error) {
	deadline, logged := time.Now().Add(limit), time.Now()
	for {
		ov, err := h.cli.Overview(ctx, api.StateRequest{Session: id, Tail: 1, Clip: 1})
		if err != nil {
			return nil, err
		}
		if done(ov) {
			return ov, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %s not done after %s: %s at %d, %d turns", what, id, limit, ov.Status, ov.Seq, ov.Counts.Turns)
		}
		if time.Since(logged) > 10*time.Second {
			h.logf("%s: %s at %d, %d turns", what, id, ov.Seq, ov.Counts.Turns)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// wants reports whether the run measures a figure.
func (h *harness) wants(figure string) bool {
	return len(h.cfg.figures) == 0 || slices.Contains(h.cfg.figures, figure)
}
