package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// An eval seen in Chromium: its report.html (a chart, every run with its
// dossier's command line and its console page) and the console's evals
// page (the eval's tasks with their success and a link to every run),
// each kept as a screenshot; the browser test fails on any page error.
func TestEvalInBrowser(t *testing.T) {
	rt, c := evalRuntime(t)
	web, srv := serveConsole(t, c)
	shots := os.Getenv("RATH_SCREENSHOTS") // keep the screenshots there
	if shots == "" {
		shots = t.TempDir()
	}
	out := filepath.Join(t.TempDir(), "report")
	if r := rath(t, rt.URL, "eval", "testdata/eval/gate-worse.yaml", "--runs", "2", "--id", "ev-browser", "--out", out, "--console", web.URL); r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	ctx := browser(t)
	run(t, ctx, "open report.html", chromedp.Steps(
		chromedp.Navigate("file://"+filepath.Join(out, "report.html")),
		chromedp.WaitVisible(chromedp.CSS(`svg rect`)),
	))
	bars := run(t, ctx, "read the chart", chromedp.Evaluate[[]string](`[...document.querySelectorAll('svg rect')].map(r => r.getAttribute('width'))`))
	links := run(t, ctx, "read the links", chromedp.Evaluate[[]string](`[...document.querySelectorAll('a')].map(a => a.href)`))
	report := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	if strings.Join(bars, " ") != "400 0" { // steady passes both tries, flips neither
		t.Errorf("the chart's bars: %q", bars)
	}
	if len(links) != 8 || !strings.HasPrefix(links[0], web.URL+"/s/") {
		t.Errorf("report.html links %q; want each of 4 runs' console page and dossier.md", links)
	}

	signIn(t, ctx, web, srv)
	run(t, ctx, "open the evals page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/evals"),
		chromedp.WaitVisible(chromedp.CSS(`table.evals`)),
	))
	page := run(t, ctx, "read the evals page", chromedp.Text(chromedp.CSS(`main`)))
	evals := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	for _, want := range []string{"ev-browser", "4 runs · succeeded 0.50", "flips\t2\t0\t0.00", "steady\t2\t2\t1.00"} {
		if !strings.Contains(page, want) {
			t.Errorf("the evals page has no %q:\n%s", want, page)
		}
	}
	run(t, ctx, "follow a run's link", chromedp.Steps(
		chromedp.Click(chromedp.CSS(`a.run`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)),
	))
	for name, b := range map[string][]byte{"eval-report.png": report, "evals.png": evals} {
		if err := os.WriteFile(filepath.Join(shots, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", shots)
}
