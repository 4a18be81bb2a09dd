package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	cloudevent "github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
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

// serveConsole serves the console of c as rath up does: to a browser
// signed in with a one-time link, for its own address only.
func serveConsole(t *testing.T, c *client.Client) (*httptest.Server, *console.Server) {
	t.Helper()
	web := httptest.NewUnstartedServer(nil)
	srv, err := console.New(c, slog.New(slog.DiscardHandler), console.WithHosts(web.Listener.Addr().String()), console.WithLinks(console.Links{}))
	if err != nil {
		t.Fatal(err)
	}
	web.Config.Handler = srv
	web.Start()
	// Cleanups run last first: the browser closes, then the live streams
	// end, then the server.
	t.Cleanup(web.Close)
	t.Cleanup(srv.Close)
	return web, srv
}

// signIn opens a one-time link in the browser, which goes on to the
// sessions page signed in.
func signIn(t *testing.T, ctx context.Context, web *httptest.Server, srv *console.Server) {
	t.Helper()
	link, _, err := srv.Link("/")
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "sign in with a one-time link", chromedp.Steps(
		chromedp.Navigate(web.URL+link),
		chromedp.WaitVisible(chromedp.CSS(`#sessions`)),
	))
}

// checkConsole signs in to the console on the demo's runtime in Chromium:
// the sessions page lists both branches, the root's page draws the lineage
// with the fork and the memory edge from the root's write to the fork's
// recall, verifies, and opens a tool call's diff from the timeline.
func checkConsole(t *testing.T, c *client.Client, root, fork, forkName string) {
	web, srv := serveConsole(t, c)
	shots := os.Getenv("RATH_SCREENSHOTS") // keep the screenshots there
	if shots == "" {
		shots = t.TempDir()
	}

	ctx := browser(t)
	signIn(t, ctx, web, srv)
	run(t, ctx, "open the sessions page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#sessions tbody tr`)),
	))
	list := run(t, ctx, "read the sessions", chromedp.Text(chromedp.CSS(`#sessions`)))
	badges := run(t, ctx, "read the badges", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#sessions tbody .status')].map(b => b.className + ': ' + b.textContent)`))
	page1 := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))

	run(t, ctx, "open the root's page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/"+root),
		chromedp.WaitVisible(chromedp.CSS(`#graph svg`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tbody tr`)),
	))
	// The page opens with its newest event beside the timeline, and the
	// timeline's rows whole: none cut by the header or the bottom edge.
	opened := run(t, ctx, "wait for the newest event in the side panel", chromedp.Poll[string](`(() => {
		const h = document.querySelector('#detail h2');
		return h && h.textContent.startsWith('Event ') ? h.textContent : '';
	})()`))
	cut := run(t, ctx, "look for cut rows", chromedp.Evaluate[[]string](`(() => {
		const box = document.getElementById('timeline-scroll'), b = box.getBoundingClientRect();
		const top = b.top + box.clientTop + document.querySelector('#timeline thead').getBoundingClientRect().height;
		const bottom = b.top + box.clientTop + box.clientHeight;
		return [...document.querySelectorAll('#timeline tbody tr[data-seq]')].filter(r => {
			const a = r.getBoundingClientRect();
			return a.bottom > top + 1 && a.top < bottom - 1 && (a.top < top - 1.5 || a.bottom > bottom + 1.5);
		}).map(r => r.id + ' ' + Math.round(r.getBoundingClientRect().top - top) + '/' + Math.round(bottom - r.getBoundingClientRect().bottom) +
			' (scrolled ' + box.scrollTop + ' of ' + box.scrollHeight + ', view ' + box.clientHeight + ', window ' + window.innerHeight + ', max ' + box.style.maxHeight +
			', head ' + document.querySelector('#timeline thead').getBoundingClientRect().height + ', row ' + r.getBoundingClientRect().height + ')');
	})()`))
	heading := run(t, ctx, "read the heading", chromedp.Text(chromedp.CSS(`h1`)))
	opening := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	graph := run(t, ctx, "read the graph", chromedp.TextContent(chromedp.CSS(`#graph svg`)))
	memoryEdges := run(t, ctx, "count memory edges", chromedp.Evaluate[int](`document.querySelectorAll('#graph path[marker-end="url(#recall)"]').length`))
	run(t, ctx, "wait for verification", chromedp.WaitVisible(chromedp.CSS(`#verify [data-done]`)))
	verified := run(t, ctx, "read verification", chromedp.Text(chromedp.CSS(`#verify`)))
	// A tool call that changed files, found by scrolling the timeline up
	// from the newest events and opened.
	run(t, ctx, "scroll to a tool call with a diff (none: the root's timeline shows no tool.call.completed that changed files)", chromedp.Poll[bool](`(() => {
		const box = document.getElementById('timeline-scroll');
		const inView = (r) => { const a = r.getBoundingClientRect(), b = box.getBoundingClientRect(); return a.top >= b.top && a.bottom <= b.bottom; };
		const r = [...document.querySelectorAll('#timeline tbody tr[data-seq]')].filter(inView).find(r =>
			r.cells[2].textContent === 'tool.call.completed' && r.cells[4] && r.cells[4].querySelector('.badge'));
		if (r) { r.click(); return true; }
		if (!document.querySelector('#timeline tr.loading')) box.scrollTop -= box.clientHeight / 2;
		return false;
	})()`))
	run(t, ctx, "open the diff", chromedp.WaitVisible(chromedp.CSS(`#detail pre.diff`)))
	diff := run(t, ctx, "read the diff", chromedp.TextContent(chromedp.CSS(`#detail pre.diff`)))
	page2 := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))

	// The fork's recall of the root's failure pattern links to where it
	// was written.
	run(t, ctx, "open the fork's page", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/"+fork),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tbody tr`)),
	))
	recalled := run(t, ctx, "open the fork's recall (none: the fork's timeline shows no recall of its own that found something)", chromedp.Poll[bool](`(() => {
		const box = document.getElementById('timeline-scroll');
		const inView = (r) => { const a = r.getBoundingClientRect(), b = box.getBoundingClientRect(); return a.top >= b.top && a.bottom <= b.bottom; };
		const r = [...document.querySelectorAll('#timeline tbody tr[data-seq]')].filter(inView).find(r =>
			r.cells[2].textContent === 'memory.recalled' && r.cells[4] && !r.cells[4].textContent.includes(': 0 items') && r.cells[4].className !== 'inherited');
		if (r) { r.click(); return true; }
		if (!document.querySelector('#timeline tr.loading')) box.scrollTop -= box.clientHeight / 2;
		return false;
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
	// The list says it waits, and for what.
	run(t, ctx, "open the sessions page", chromedp.Navigate(web.URL+"/"))
	waiting := run(t, ctx, "see the session wait", chromedp.Poll[string](`(() => {
		const a = document.querySelector('#sessions a[href="/s/console-live"]'), r = a && a.closest('tr');
		return r && r.querySelector('.status.waiting') ? r.innerText : '';
	})()`))
	if !strings.Contains(waiting, "for approval ship-it (asked of anyone who may approve): deploy to production") {
		t.Errorf("the waiting session's row: %q", waiting)
	}
	pageWaiting := run(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	run(t, ctx, "open the live session", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/console-live"),
		chromedp.WaitVisible(chromedp.CSS(`#ev-2`)),
		chromedp.WaitVisible(chromedp.CSS(`#live-status`)),
	))
	run(t, ctx, "wait for the live stream", chromedp.Poll[bool](`document.getElementById('live-status').textContent.includes('live')`))
	if _, err := c.Emit(bg, "console-live", &events.ChunkAppended{Role: events.RoleUser, Content: "hello from the test"}); err != nil {
		t.Fatal(err)
	}
	arrived := run(t, ctx, "see the live event", chromedp.Poll[string](`(() => { const r = document.getElementById('ev-3'); return r && !r.classList.contains('loading') ? r.innerText : ''; })()`))
	if !strings.Contains(arrived, "hello from the test") {
		t.Errorf("the live event shows %q", arrived)
	}
	// Fork from step 1 with the keyboard: focus the event, Enter, type.
	run(t, ctx, "focus step 1", chromedp.Poll[bool](`(() => { const r = document.getElementById('ev-1'); if (r) r.focus(); return !!r && document.activeElement === r; })()`))
	run(t, ctx, "fork from step 1", chromedp.Steps(
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`#detail form.fork`)),
		chromedp.SendKeys(chromedp.CSS(`#detail form.fork input[name=message]`), "try the other way"),
		chromedp.Submit(chromedp.CSS(`#detail form.fork`)),
	))
	// The post answers with the fork's page: wait for it, not for a row
	// the session's own page has too.
	run(t, ctx, "wait for the fork's page", chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`dd a[href="/s/console-live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#ev-3:not(.loading)`)),
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

	for name, b := range map[string][]byte{"sessions.png": page1, "session-open.png": opening, "session.png": page2, "sessions-waiting.png": pageWaiting, "compare.png": page3} {
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
	// Each branch by its name and outcome, the task's title as text.
	for _, want := range []string{"root " + root, forkName + " " + fork, "Slugs keep capitals and punctuation"} {
		if !strings.Contains(list, want) {
			t.Errorf("the sessions page does not show %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, "# Slugs") {
		t.Errorf("the sessions page shows the task's markdown:\n%s", list)
	}
	if !slices.Contains(badges, "status succeeded: accepted") || !slices.Contains(badges, "status superseded: superseded") || !slices.Contains(badges, "status closed: closed: recorded") {
		t.Errorf("the sessions' badges: %q; want the accepted fork, the superseded root and the notes' outcome told apart", badges)
	}
	if !strings.HasPrefix(heading, "root "+root) || !strings.Contains(heading, "superseded") {
		t.Errorf("the root's page is headed %q", heading)
	}
	rootState, err := c.State(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Event %d: rath.session.closed", rootState.Seq); !strings.HasPrefix(opened, want) {
		t.Errorf("the root's page opens with %q beside the timeline, want %q", opened, want)
	}
	if len(cut) > 0 {
		t.Errorf("the root's timeline opens with rows cut (id, px from the header/bottom): %q", cut)
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

// A long session's timeline is virtualised: the page holds the rows in view,
// opens at the newest, and fetches the pages it moves to, by keyboard or by
// a link to one event.
func TestConsoleLongTimeline(t *testing.T) {
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const id, n = "long", 3000
	if _, err := c.Start(ctx, id, events.SessionStarted{Task: "a long session"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n-1; {
		var batch []cloudevent.Event
		for ; i < n-1 && len(batch) < api.MaxBatch; i++ {
			ev, err := events.New(id, &events.ChunkAppended{Role: events.RoleUser, Content: fmt.Sprintf("message %d", i+2)})
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ev)
		}
		res, err := c.AppendBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	web, srv := serveConsole(t, c)
	b := browser(t)
	signIn(t, b, web, srv)
	rows := `document.querySelectorAll('#timeline tbody tr[data-seq]').length`
	run(t, b, "open the long session", chromedp.Steps(
		chromedp.Navigate(web.URL+"/s/"+id),
		chromedp.WaitVisible(chromedp.CSS(`#ev-3000`)),
	))
	if got := run(t, b, "count the rows", chromedp.Evaluate[int](rows)); got < 10 || got > 150 {
		t.Errorf("the newest events show %d rows of %d; want the rows in view, not the session", got, n)
	}
	// Read a row once it shows its event (a row is redrawn while pages come in).
	text := func(seq int) string {
		return run(t, b, fmt.Sprintf("read event %d", seq), chromedp.Poll[string](fmt.Sprintf(`(() => { const r = document.getElementById('ev-%d'); return r && !r.classList.contains('loading') ? r.innerText : ''; })()`, seq)))
	}
	last := text(3000)
	if !strings.Contains(last, "message 3000") {
		t.Errorf("event 3000 reads %q", last)
	}
	// The rows are redrawn as pages come in: focus by script, which finds
	// the row and focuses it in one step.
	run(t, b, "focus the newest", chromedp.Poll[bool](`(() => { const r = document.getElementById('ev-3000'); if (r) r.focus(); return !!r && document.activeElement === r; })()`))
	run(t, b, "go to the first event with Home", chromedp.KeyEvent(kb.Home))
	run(t, b, "wait for event 1", chromedp.Poll[bool](`(() => { const r = document.getElementById('ev-1'); return r && !r.classList.contains('loading') && document.activeElement === r; })()`))
	first := text(1)
	if !strings.Contains(first, "session.started") {
		t.Errorf("event 1 reads %q", first)
	}
	run(t, b, "move down with the arrow", chromedp.KeyEvent(kb.ArrowDown))
	run(t, b, "wait for the focus on event 2", chromedp.Poll[bool](`document.activeElement && document.activeElement.id === 'ev-2'`))
	// A link to an event within the page, and one that opens the page.
	for _, at := range []struct {
		seq  int
		open chromedp.Action[chromedp.Void]
	}{
		{1500, chromedp.Evaluate[chromedp.Void](`location.hash = '#ev-1500'`)},
		{2500, chromedp.Steps(chromedp.Navigate(web.URL+"/"), chromedp.Navigate(web.URL+"/s/"+id+"#ev-2500"))},
	} {
		run(t, b, fmt.Sprintf("follow a link to event %d", at.seq), at.open)
		run(t, b, fmt.Sprintf("wait for event %d open", at.seq), chromedp.Poll[bool](fmt.Sprintf(`(() => {
			const r = document.getElementById('ev-%[1]d'), h = document.querySelector('#detail h2');
			return r && r.classList.contains('selected') && !r.classList.contains('loading') && h && h.textContent.startsWith('Event %[1]d:');
		})()`, at.seq)))
		got := text(at.seq)
		if !strings.Contains(got, fmt.Sprintf("message %d", at.seq)) {
			t.Errorf("event %d reads %q", at.seq, got)
		}
		if got := run(t, b, "count the rows", chromedp.Evaluate[int](rows)); got > 150 {
			t.Errorf("at event %d the page holds %d rows", at.seq, got)
		}
	}
	shot := run(t, b, "screenshot", chromedp.CaptureScreenshot())
	if dir := os.Getenv("RATH_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "long-timeline.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
