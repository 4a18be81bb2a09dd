package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// On a shared machine other processes can take the CPUs in the middle of a
// figure. Each figure records how many cores they used while it was timed; a
// figure measured while they used more than noisyCores is measured again, up
// to --tries times, after waiting for the machine to calm down, and the
// least disturbed try is reported (flagged if it was still disturbed).
const noisyCores = 0.25

// attempt is one try at measuring some rows.
type attempt struct {
	rows []row
	// noise is the most cores other processes used during any timed part.
	noise float64
	// median is the try's headline latency, where a later row compares
	// with it.
	median time.Duration
}

// timed records the CPU use of one timed part of the attempt.
func (a *attempt) timed(u cpuUse) cpuUse {
	if u.wall > 0 {
		a.noise = max(a.noise, u.cores(u.others))
	}
	return u
}

// measureQuietly runs fn until one try is undisturbed (at most --tries)
// and reports the rows of the least disturbed try. fn gets the try number
// so that each try can use fresh sessions.
func (h *harness) measureQuietly(ctx context.Context, name string, fn func(ctx context.Context, try int) (attempt, error)) error {
	if !h.wants(name) {
		return nil
	}
	a, err := h.quietly(ctx, name, fn)
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return nil
}

// quietly is measureQuietly returning the chosen try instead of reporting
// it; its rows are flagged if it was disturbed.
func (h *harness) quietly(ctx context.Context, name string, fn func(ctx context.Context, try int) (attempt, error)) (attempt, error) {
	var best attempt
	for try := range h.cfg.tries {
		a, err := fn(ctx, try)
		if err != nil {
			return attempt{}, err
		}
		if try == 0 || a.noise < best.noise {
			best = a
		}
		if a.noise < noisyCores {
			break
		}
		h.logf("%s: other processes used %.2f cores while it was timed", name, a.noise)
		if try+1 < h.cfg.tries {
			h.waitQuiet(ctx, time.Minute)
		}
	}
	if best.noise >= noisyCores {
		for i := range best.rows {
			best.rows[i].target = joinCell(best.rows[i].target,
				fmt.Sprintf("⚠ disturbed: other processes used up to %.2f cores while timed", best.noise))
		}
	}
	return best, nil
}

func joinCell(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// wants reports whether the run measures a figure.
func (h *harness) wants(figure string) bool {
	return len(h.cfg.figures) == 0 || slices.Contains(h.cfg.figures, figure)
}
