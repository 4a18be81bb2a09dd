package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// sectionConsole times the web console (issue 16's targets) against the
// ledger of the run: opening a session of 10 and of 10,000 events (the page
// and the timeline's first page), and the sessions page with 100,000
// sessions in the index. It is optional: it starts 100,000 sessions.
const sectionConsole = "console"

// consoleTries is how many times each page is fetched.
const consoleTries = 20

func (h *harness) runConsole(ctx context.Context) error {
	srv, err := console.New(h.qcli, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer srv.Close()
	web := httptest.NewServer(srv)
	defer web.Close()

	// K1: a session at 10 and at 10,000 events.
	var at10 time.Duration
	for _, n := range []int{10, h.cfg.n(10_000, 10)} {
		hs, err := h.writeHistory(ctx, sessionID(fmt.Sprintf("console%d", n), 0), n)
		if err != nil {
			return err
		}
		a, err := h.quietly(ctx, fmt.Sprintf("K1@%d", n), func(ctx context.Context, _ int) (attempt, error) {
			var a attempt
			var lats latencies
			m := h.cpuStart()
			for range consoleTries {
				start := time.Now()
				for _, path := range []string{"/s/" + hs.id, "/api/s/" + hs.id + "/events"} {
					if err := fetch(ctx, web.URL+path, hs.id); err != nil {
						return a, err
					}
				}
				lats = append(lats, time.Since(start))
			}
			u := a.timed(m.stop())
			a.median = lats.median()
			r := row{id: fmt.Sprintf("K1@%d", n), what: fmt.Sprintf("console: open a session of %d events (its page, then the timeline's last %d events), %d times", n, min(n, 200), consoleTries),
				rath: fmt.Sprintf("%s (%s)", lats, u.perEvent(0)), rawWhat: "—", raw: "—", ratio: "—"}
			if n > 10 {
				verdict := "**met**"
				if a.median > time.Second {
					verdict = "**missed**"
				}
				r.target = fmt.Sprintf("≤ 1 s: %s, %s; ÷ at 10 events: %.2f×", fmtDur(a.median), verdict, float64(a.median)/float64(max(at10, 1)))
			}
			a.rows = []row{r}
			return a, nil
		})
		if err != nil {
			return err
		}
		if n == 10 {
			at10 = a.median
		}
		h.rep.add(a.rows...)
	}

	// K2: the sessions page with many sessions.
	if !h.wants("K2") {
		return nil
	}
	n := h.cfg.n(100_000, 100)
	h.logf("starting %d sessions for the sessions page", n)
	started := time.Now()
	err = parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := h.cli.Start(ctx, sessionID("console-many", i), events.SessionStarted{Task: "bench console"})
		return err
	})
	if err != nil {
		return err
	}
	h.logf("started %d sessions in %s", n, time.Since(started).Round(time.Millisecond))
	return h.measureQuietly(ctx, "K2", func(ctx context.Context, _ int) (attempt, error) {
		var a attempt
		var page, filtered latencies
		m := h.cpuStart()
		for range consoleTries {
			start := time.Now()
			if err := fetch(ctx, web.URL+"/", "sessions"); err != nil {
				return a, err
			}
			page = append(page, time.Since(start))
			start = time.Now()
			if err := fetch(ctx, web.URL+"/?q=console-many-1&status=active", "sessions"); err != nil {
				return a, err
			}
			filtered = append(filtered, time.Since(start))
		}
		u := a.timed(m.stop())
		start := time.Now()
		all, err := h.qcli.List(ctx, api.ListRequest{})
		if err != nil {
			return a, err
		}
		whole := time.Since(start)
		verdict := "**met**"
		if page.median() > time.Second {
			verdict = "**missed**"
		}
		a.rows = []row{{id: "K2", what: fmt.Sprintf("console: the sessions page (the 500 active last) with %d sessions in the index, %d times; then filtered by a match and a status", len(all), consoleTries),
			rath:    fmt.Sprintf("page %s; filtered %s; the whole list paged by the client (rath ls): %s (%s)", page, filtered, fmtDur(whole), u.perEvent(0)),
			rawWhat: "—", raw: "—", ratio: "—", target: fmt.Sprintf("responsive (≤ 1 s): %s, %s", fmtDur(page.median()), verdict)}}
		return a, nil
	})
}

// fetch gets a console page and checks it answered and mentions want.
func fetch(ctx context.Context, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		return fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, b)
	}
	return nil
}
