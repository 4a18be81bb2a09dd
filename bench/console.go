package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

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

	// K3: the same 10,000-event session opened in Chromium, as a person
	// sees it: until the newest event's row is drawn, then Home until the
	// first event's is.
	if h.wants("K3") {
		for _, n := range []int{10, h.cfg.n(10_000, 10)} {
			if err := h.consoleInBrowser(ctx, web.URL, sessionID(fmt.Sprintf("console%d", n), 0), n); err != nil {
				return err
			}
		}
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

// consoleInBrowser times K3: a session of n events opened in headless
// Chromium until its newest row is drawn, and Home until its first is.
func (h *harness) consoleInBrowser(ctx context.Context, base, id string, n int) error {
	path, err := exec.LookPath("chromium")
	if err != nil {
		return fmt.Errorf("K3 needs Chromium (Debian's package chromium; scripts/install-chromium.sh): %w", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil {
		return fmt.Errorf("K3: start Chromium: %w", err)
	}
	drawn := func(seq int) string {
		return fmt.Sprintf(`(() => { const r = document.getElementById('ev-%d'); return !!r && !r.classList.contains('loading'); })()`, seq)
	}
	// focus focuses a row; the rows are redrawn as pages come in, so a node
	// found by one step may be gone by the next.
	focus := func(seq int) string {
		return fmt.Sprintf(`(() => { const r = document.getElementById('ev-%d'); if (r) r.focus(); return !!r && document.activeElement === r; })()`, seq)
	}
	return h.measureQuietly(ctx, "K3", func(ctx context.Context, _ int) (attempt, error) {
		var a attempt
		var open, home, settled latencies
		for range consoleTries / 2 {
			start := time.Now()
			if _, err := chromedp.Run(bctx, chromedp.Steps(chromedp.Navigate(base+"/"+"s/"+id))); err != nil {
				return a, fmt.Errorf("K3: open: %w", err)
			}
			if _, err := chromedp.Run(bctx, chromedp.Poll[bool](drawn(n))); err != nil {
				return a, fmt.Errorf("K3: the newest row: %w", err)
			}
			open = append(open, time.Since(start))
			start = time.Now()
			if _, err := chromedp.Run(bctx, chromedp.Poll[bool](focus(n))); err != nil {
				return a, fmt.Errorf("K3: focus: %w", err)
			}
			if _, err := chromedp.Run(bctx, chromedp.KeyEvent(kb.Home)); err != nil {
				return a, fmt.Errorf("K3: Home: %w", err)
			}
			if _, err := chromedp.Run(bctx, chromedp.Poll[bool](drawn(1))); err != nil {
				return a, fmt.Errorf("K3: the first row: %w", err)
			}
			home = append(home, time.Since(start))
			// The graph and the verification, which read the whole
			// tree, finish before the next open.
			if _, err := chromedp.Run(bctx, chromedp.Steps(chromedp.WaitVisible(chromedp.CSS(`#verify [data-done]`)), chromedp.WaitVisible(chromedp.CSS(`#graph svg`)))); err != nil {
				return a, fmt.Errorf("K3: the verification and the graph: %w", err)
			}
			settled = append(settled, time.Since(start))
		}
		rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#timeline tbody tr[data-seq]').length`))
		if err != nil {
			return a, fmt.Errorf("K3: count rows: %w", err)
		}
		a.median = open.median()
		verdict := "**met**"
		if a.median > time.Second {
			verdict = "**missed**"
		}
		a.rows = []row{{id: fmt.Sprintf("K3@%d", n), what: fmt.Sprintf("console in headless Chromium: open a session of %d events until its newest row is drawn; then Home until its first is; then until the tree's graph and verification are in (%d times; %d rows in the page after)", n, consoleTries/2, rows),
			rath: fmt.Sprintf("open %s; Home %s; graph and verification in after Home %s", open, home, settled), rawWhat: "—", raw: "—", ratio: "—", target: fmt.Sprintf("≤ 1 s: %s, %s", fmtDur(a.median), verdict)}}
		if n <= 10 {
			a.rows[0].target = "— (what opening any page costs this browser here)"
		}
		return a, nil
	})
}
