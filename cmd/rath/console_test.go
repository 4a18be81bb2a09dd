package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// chromium finds the browser the console's tests drive, or fails naming it:
// scripts/install-sandbox.sh (the README's test command) installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console's browser test needs Chromium (Debian's package chromium): run scripts/install-sandbox.sh, or install it")
	return ""
}

// browser starts a fresh headless Chromium for the test and returns a
// context of its one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,             // the tests may run as root; the pages are the console's own
		chromedp.WindowSize(1280, 900), // a laptop's screen
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	// Every page must run without a console error or exception.
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				t.Errorf("browser console: %s (%s)", m, m.URL)
			}
		}
	}()
	return ctx
}

// run runs one browser action within a minute, failing the test on error.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// checkConsole opens the console on the demo's runtime in Chromium: the
// sessions page lists both branches, the root's page draws the lineage with
// the fork and the memory edge from the root's write to the fork's recall,
// verifies, and opens a tool call's diff from the timeline.
func checkConsole(t *testing.T, c *client.Client, root, fork, forkName string) {
	srv, err := console.New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	// Cleanups run last first: the browser closes, then the live streams
	// end, then the server.
	t.Cleanup(web.Close)
	t.Cleanup(srv.Close)
	shots := os.Getenv("RATH_SCREENSHOTS") // keep the screenshots there
	if shots == "" {
		shots = t.TempDir()
	}

	ctx := browser(t)
	run(t, ctx, "open the sessions page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#sessions tbody tr`)),
	))
	list := run(t, ctx, "read the sessions", chromedp.Text(chromedp.CSS(`#sessions`)))
	page1 := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))

	run(t, ctx, "open the root's page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/"+root),
		chromedp.WaitVisible(chromedp.CSS(`#graph svg`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tbody tr`)),
	))
	graph := run(t, ctx, "read the graph", chromedp.TextContent(chromedp.CSS(`#graph svg`)))
	memoryEdges := run(t, ctx, "count memory edges", chromedp.Evaluate[int](`document.querySelectorAll('#graph path[marker-end="url(#recall)"]').length`))
	run(t, ctx, "wait for verification", chromedp.WaitVisible(chromedp.CSS(`#verify [data-done]`)))
	verified := run(t, ctx, "read verification", chromedp.Text(chromedp.CSS(`#verify`)))
	// A tool call that changed files, opened from the timeline.
	clicked := run(t, ctx, "click a tool call with a diff", chromedp.Evaluate[bool](`(() => {
		const rows = [...document.querySelectorAll('#timeline tbody tr')];
		const r = rows.find(r => r.cells[2].textContent === 'tool.call.completed' && r.cells[4].querySelector('.badge'));
		if (!r) return false;
		r.click();
		return true;
	})()`))
	if !clicked {
		t.Fatal("the root's timeline shows no tool.call.completed that changed files")
	}
	run(t, ctx, "open the diff", chromedp.WaitVisible(chromedp.CSS(`#detail pre.diff`)))
	diff := run(t, ctx, "read the diff", chromedp.TextContent(chromedp.CSS(`#detail pre.diff`)))
	page2 := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))

	// The fork's recall of the root's failure pattern links to where it
	// was written.
	run(t, ctx, "open the fork's page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/"+fork),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tbody tr`)),
	))
	recalled := run(t, ctx, "open the fork's recall", chromedp.Evaluate[bool](`(() => {
		const r = [...document.querySelectorAll('#timeline tbody tr')].find(r =>
			r.cells[2].textContent === 'memory.recalled' && !r.cells[4].textContent.includes(': 0 items') && r.cells[4].className !== 'inherited');
		if (!r) return false;
		r.click();
		return true;
	})()`))
	if !recalled {
		t.Fatal("the fork's timeline shows no recall of its own that found something")
	}
	run(t, ctx, "read the recall", chromedp.WaitVisible(chromedp.CSS(`#detail ul.recalled a`)))
	writer := run(t, ctx, "read the writer", chromedp.Text(chromedp.CSS(`#detail ul.recalled`)))
	if !strings.Contains(writer, "written on "+root) {
		t.Errorf("the recall does not say the root wrote what it recalled:\n%s", writer)
	}

	// A live session: an event arrives while the page is open, a fork is
	// made from a step with a message, and a pending approval is granted.
	bg := context.Background()
	if _, err := c.Start(bg, "console-live", events.SessionStarted{Task: "watch me"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Emit(bg, "console-live", &events.ApprovalRequested{ApprovalID: "ship-it", Action: "deploy to production"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "open the live session", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/console-live"),
		chromedp.WaitVisible(chromedp.CSS(`#ev-2`)),
		chromedp.WaitVisible(chromedp.CSS(`#live-status`)),
	))
	run(t, ctx, "wait for the live stream", chromedp.Poll[bool](`document.getElementById('live-status').textContent.includes('live')`))
	if _, err := c.Emit(bg, "console-live", &events.ChunkAppended{Role: events.RoleUser, Content: "hello from the test"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "see the live event", chromedp.WaitVisible(chromedp.CSS(`#ev-3`)))
	arrived := run(t, ctx, "read the live event", chromedp.Text(chromedp.CSS(`#ev-3`)))
	if !strings.Contains(arrived, "hello from the test") {
		t.Errorf("the live event shows %q", arrived)
	}
	// Fork from step 1 with the keyboard: focus the event, Enter, type.
	run(t, ctx, "fork from step 1", chromedp.Steps(
		chromedp.Focus(chromedp.CSS(`#ev-1`)),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`#detail form.fork`)),
		chromedp.SendKeys(chromedp.CSS(`#detail form.fork input[name=message]`), "try the other way"),
		chromedp.Submit(chromedp.CSS(`#detail form.fork`)),
		chromedp.WaitVisible(chromedp.CSS(`#ev-2`)),
	))
	forkURL := run(t, ctx, "read the fork's address", chromedp.Location())
	forkText := run(t, ctx, "read the fork's timeline", chromedp.Text(chromedp.CSS(`#timeline`)))
	if !strings.Contains(forkURL, "/s/") || strings.HasSuffix(forkURL, "/s/console-live") || !strings.Contains(forkText, "try the other way") || !strings.Contains(forkText, "session.forked") {
		t.Errorf("after forking: at %s, timeline:\n%s", forkURL, forkText)
	}
	run(t, ctx, "approve", chromedp.Steps(
		chromedp.Navigate(web.URL+"/approvals"),
		chromedp.WaitVisible(chromedp.CSS(`form.decide`)),
		chromedp.SendKeys(chromedp.CSS(`form.decide input[name=reason]`), "looks right"),
		chromedp.Click(chromedp.CSS(`form.decide button.approve`)),
		chromedp.WaitVisible(chromedp.CSS(`p.empty`)),
	))
	st, err := c.State(bg, "console-live")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Approvals["ship-it"]; a.Outcome != "granted" || a.Actor != c.Principal().String() {
		t.Errorf("the approval after the console granted it: %+v, want granted by %s", a, c.Principal())
	}

	// The two branches compared: the rejected root and the accepted fork.
	run(t, ctx, "open the comparison", chromedp.Steps(
		chromedp.Navigate(web.URL+"/compare?a="+root+"&b="+fork),
		chromedp.WaitVisible(chromedp.CSS(`table.compare`)),
	))
	compared := run(t, ctx, "read the comparison", chromedp.Text(chromedp.CSS(`main`)))
	page3 := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))

	for name, b := range map[string][]byte{"sessions.png": page1, "session.png": page2, "compare.png": page3} {
		if err := os.WriteFile(filepath.Join(shots, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", shots)
	for _, id := range []string{root, fork} {
		if !strings.Contains(list, id) {
			t.Errorf("the sessions page does not list %s:\n%s", id, list)
		}
	}
	if !strings.Contains(graph, "root") || !strings.Contains(graph, forkName) {
		t.Errorf("the lineage graph does not name both branches (root, %s):\n%s", forkName, graph)
	}
	if memoryEdges == 0 {
		t.Error("the lineage graph draws no memory edge from a write to a recall")
	}
	if !strings.Contains(verified, "verify") || strings.Contains(verified, "✗") {
		t.Errorf("verification shown: %q", verified)
	}
	if !strings.Contains(compared, "superseded") || !strings.Contains(compared, "accepted") || !strings.Contains(compared, "slug.go") {
		t.Errorf("the comparison does not show the outcomes and the file both changed:\n%s", compared)
	}
	if !strings.Contains(diff, "\n+") && !strings.HasPrefix(diff, "+") {
		t.Errorf("the tool call's diff shows no added line:\n%s", diff)
	}
}
