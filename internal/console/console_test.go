package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// rig is a ledger on a test server, a client of the client role and the
// console on it.
type rig struct {
	c   *client.Client
	web *httptest.Server
}

func start(t *testing.T, opts ...console.Option) *rig {
	t.Helper()
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(c, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	return &rig{c: c, web: web}
}

// session starts id and appends n user messages after the start.
func (r *rig) session(t *testing.T, id string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.c.Start(ctx, id, events.SessionStarted{Task: "look at " + id}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r.say(t, id, fmt.Sprintf("message %d", i+1))
	}
}

func (r *rig) say(t *testing.T, id, text string) {
	t.Helper()
	if _, err := r.c.Emit(context.Background(), id, &events.ChunkAppended{Role: events.RoleUser, Content: text}); err != nil {
		t.Fatal(err)
	}
}

// get fetches path and returns the status and body.
func (r *rig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.web.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (r *rig) want(t *testing.T, path string, code int, contains ...string) string {
	t.Helper()
	got, body := r.get(t, path)
	if got != code {
		t.Fatalf("GET %s: %d, want %d:\n%s", path, got, code, body)
	}
	for _, s := range contains {
		if !strings.Contains(body, s) {
			t.Errorf("GET %s does not contain %q:\n%s", path, s, body)
		}
	}
	return body
}

// The pages and the JSON the timeline pages with show what the ledger
// holds, and refuse what they cannot answer with a status and a reason.
func TestPagesAndTimeline(t *testing.T) {
	r := start(t)
	r.session(t, "s1", 3) // events 1–4
	if _, err := r.c.Fork(context.Background(), api.ForkRequest{Parent: "s1", At: 2, ID: "s1-fork"}); err != nil {
		t.Fatal(err)
	}

	r.want(t, "/", 200, `href="/s/s1"`, `href="/s/s1-fork"`, "2 sessions", `<a href="/s/s1#graph" title="1 session was forked from s1">1</a>`,
		`<b class="branch">root</b> <span class="id">s1</span>`, `<b class="branch">fork-1@2</b> <span class="id">s1-fork</span>`)
	r.want(t, "/?q=fork", 200, "1 session matches", "s1-fork")
	r.want(t, "/?q=nothing-like-it", 200, "No sessions match the filter")
	r.want(t, "/s/s1", 200, "look at s1", "dossier.md", `data-src="/api/s/s1/verify"`)
	var rep struct {
		OK      bool
		Checked int
	}
	decode(t, r.want(t, "/api/s/s1/verify", 200), &rep)
	if !rep.OK || rep.Checked != 4 {
		t.Errorf("verify: %+v, want 4 events that verify", rep)
	}
	r.want(t, "/s/s1-fork", 200, `Forked from</dt><dd><a href="/s/s1">root (s1)</a> at 2`, `<span class="branch">fork-1@2</span> <span class="id">s1-fork</span>`)
	r.want(t, "/s/no..such", 400, "session")
	r.want(t, "/s/nosuch", 404, "session_not_found")

	var page struct {
		Head   uint64 `json:"head"`
		Events []struct {
			Seq     uint64 `json:"seq"`
			Session string `json:"session"`
			Type    string `json:"type"`
			Summary string `json:"summary"`
		} `json:"events"`
	}
	decode(t, r.want(t, "/api/s/s1/events?limit=2", 200), &page)
	if page.Head != 4 || len(page.Events) != 2 || page.Events[0].Seq != 3 || page.Events[1].Seq != 4 {
		t.Fatalf("last page of 2: %+v", page)
	}
	if page.Events[1].Summary != "user: message 3" {
		t.Errorf("summary of a user message: %q", page.Events[1].Summary)
	}
	decode(t, r.want(t, "/api/s/s1-fork/events?from=1&limit=10", 200), &page)
	if len(page.Events) != 3 || page.Events[0].Session != "s1" || page.Events[2].Session != "s1-fork" || page.Events[2].Type != events.TypeSessionForked {
		t.Fatalf("the fork's log (two inherited events, then its fork event): %+v", page)
	}
	r.want(t, "/api/s/s1/events?limit=0", 400, "limit")
	r.want(t, "/api/s/s1/events?from=x", 400, "from")

	var one struct {
		Row   struct{ Seq uint64 }
		Event map[string]any
	}
	decode(t, r.want(t, "/api/s/s1/event/2", 200), &one)
	if one.Row.Seq != 2 || one.Event["rathseq"] != float64(2) || one.Event["type"] != events.TypeChunkAppended {
		t.Fatalf("event 2: %+v", one)
	}
	r.want(t, "/api/s/s1/event/99", 404)
	r.want(t, "/api/s/s1/event/x", 400)

	var st struct{ Seq uint64 }
	decode(t, r.want(t, "/api/s/s1/state?at=2", 200), &st)
	if st.Seq != 2 {
		t.Fatalf("state at 2 has seq %d", st.Seq)
	}
	r.want(t, "/api/s/s1/state?at=99", 404, "out_of_range")

	md := r.want(t, "/s/s1/dossier.md", 200, "s1")
	if !strings.HasPrefix(md, "#") {
		t.Errorf("dossier.md does not start with a heading:\n%.200s", md)
	}
	r.want(t, "/s/s1/graph.svg", 200, "<svg")
	r.want(t, "/assets/app.js", 200, "EventSource")
}

// The live timeline streams the events after the one asked for, then each
// new one; a reconnect with Last-Event-ID resumes after it, with no gap and
// no repeat.
func TestLiveResumesWithoutGapsOrRepeats(t *testing.T) {
	r := start(t)
	r.session(t, "s1", 2) // events 1–3
	ctx, cancel := context.WithCancel(context.Background())
	ids, stop := r.live(t, ctx, "/api/s/s1/live?after=1", "")
	for _, want := range []uint64{2, 3} {
		if got := <-ids; got != want {
			t.Fatalf("live event %d, want %d", got, want)
		}
	}
	r.say(t, "s1", "while watching") // event 4
	if got := <-ids; got != 4 {
		t.Fatalf("live event %d, want 4", got)
	}
	cancel()
	stop()

	// The browser reconnects saying the last event it got.
	r.say(t, "s1", "while away") // event 5
	ctx, cancel = context.WithCancel(context.Background())
	ids, stop = r.live(t, ctx, "/api/s/s1/live?after=1", "4")
	defer func() { cancel(); stop() }()
	if got := <-ids; got != 5 {
		t.Fatalf("after a reconnect from 4, first event %d, want 5", got)
	}
	r.want(t, "/api/s/s1/live?after=x", 400, "after")
}

// live opens the live stream and sends the ID of each event it carries;
// stop waits for the reader to end (cancel ctx first).
func (r *rig) live(t *testing.T, ctx context.Context, path, lastID string) (<-chan uint64, func()) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.web.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	ids := make(chan uint64, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				var id uint64
				fmt.Sscan(v, &id)
				ids <- id
			}
		}
	}()
	return ids, func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the live stream did not end after its request was cancelled")
		}
	}
}

// Decisions go through the ledger, which refuses an unknown approval; a
// rejection needs a reason; a cross-origin form post is refused before it.
func TestDecisionsAreRefusedWithReasons(t *testing.T) {
	r := start(t)
	r.session(t, "s1", 0)
	post := func(path string, header http.Header, form string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, r.web.URL+path, strings.NewReader(form))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/s/s1/approvals/nope/approve", http.Header{}, "reason=ok"); code != 404 || !strings.Contains(body, "unknown_approval") {
		t.Errorf("approving an unknown approval: %d %s", code, body)
	}
	if code, body := post("/s/s1/approvals/nope/reject", http.Header{}, ""); code != 400 || !strings.Contains(body, "needs a reason") {
		t.Errorf("rejecting without a reason: %d %s", code, body)
	}
	if code, body := post("/s/s1/approvals/nope/maybe", http.Header{}, "reason=x"); code != 400 || !strings.Contains(body, "approve or reject") {
		t.Errorf("an unknown decision: %d %s", code, body)
	}
	cross := http.Header{"Origin": {"http://elsewhere.example"}, "Sec-Fetch-Site": {"cross-site"}}
	if code, _ := post("/s/s1/approvals/nope/approve", cross, "reason=ok"); code != http.StatusForbidden {
		t.Errorf("a cross-origin approval: %d, want 403", code)
	}
	r.want(t, "/approvals", 200, "Nothing is waiting for approval")
}

// Fork at a sequence with a message, pause, resume, close and compare act
// through the ledger and open the page they lead to.
func TestActions(t *testing.T) {
	r := start(t)
	r.session(t, "s1", 3)
	ctx := context.Background()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path, form string) (int, string) {
		t.Helper()
		resp, err := noRedirect.Post(r.web.URL+path, "application/x-www-form-urlencoded", strings.NewReader(form))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusSeeOther {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		return resp.StatusCode, string(b)
	}

	code, to := post("/s/s1/fork", "at=2&id=s1-retry&message=try+it+the+other+way")
	if code != http.StatusSeeOther || to != "/s/s1-retry" {
		t.Fatalf("fork: %d %s", code, to)
	}
	fork, err := r.c.State(ctx, "s1-retry")
	if err != nil {
		t.Fatal(err)
	}
	last, err := r.c.Log(ctx, "s1-retry", client.Range{From: fork.Seq})
	if err != nil || len(last) != 1 || last[0].Type != events.TypeChunkAppended || !strings.Contains(string(last[0].Data), "try it the other way") ||
		!strings.Contains(string(last[0].Data), `"correction":true`) {
		t.Fatalf("the fork's last event: %+v, %v", last, err)
	}
	if fork.Lineage.Parent != "s1" || fork.Lineage.ForkSeq != 2 {
		t.Fatalf("fork lineage: %+v", fork.Lineage)
	}
	if code, body := post("/s/s1/fork", "at=x"); code != 400 || !strings.Contains(body, "at must be") {
		t.Errorf("fork at x: %d %s", code, body)
	}
	if code, body := post("/s/s1/fork", "at=99"); code != 404 || !strings.Contains(body, "out_of_range") {
		t.Errorf("fork beyond the head: %d %s", code, body)
	}

	for _, step := range []struct{ action, status string }{{"pause", "paused"}, {"resume", "active"}, {"close", "closed"}} {
		if code, to := post("/s/s1/lifecycle/"+step.action, "reason=from+the+test"); code != http.StatusSeeOther || to != "/s/s1" {
			t.Fatalf("%s: %d %s", step.action, code, to)
		}
		if st, err := r.c.State(ctx, "s1"); err != nil || string(st.Status) != step.status {
			t.Fatalf("after %s: %v, %v; want %s", step.action, st.Status, err, step.status)
		}
	}
	if code, body := post("/s/s1/lifecycle/resume", ""); code != http.StatusConflict {
		t.Errorf("resume a closed session: %d %s", code, body)
	}
	if code, body := post("/s/s1/lifecycle/explode", ""); code != 400 || !strings.Contains(body, "pause, resume or close") {
		t.Errorf("an unknown action: %d %s", code, body)
	}

	r.want(t, "/compare?a=s1&b=s1-retry", 200, "Common ancestry: sequences 1–2", "try it the other way")
	r.want(t, "/compare?a=s1&b=no..pe", 400, "compare")
	r.want(t, "/s/s1-retry", 200, `<option value="s1">root (s1)</option>`)
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%v:\n%s", err, body)
	}
}

// An event's panel names what the event records: a model call's tokens and
// latency; a tool call's arguments (from its request), exit code, attempt
// and result; a routing decision's rule and inputs.
func TestEventFacts(t *testing.T) {
	r := start(t)
	r.session(t, "f1", 0)
	ctx := context.Background()
	for _, d := range []any{
		&events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m1", TokensIn: 120, TokensOut: 7, LatencyMS: 42},
		&events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{"command":"echo hi"}`)},
		&events.ToolCompleted{CallID: "c1", Tool: "run", Attempt: 1, Result: "hi\n", ExitCode: 3, DurationMS: 5},
		&events.SelectorDecided{Rule: "retry", Route: "fork", Inputs: json.RawMessage(`{"failures":2}`)},
	} {
		if _, err := r.c.Emit(ctx, "f1", d); err != nil {
			t.Fatal(err)
		}
	}
	facts := func(seq int) map[string]string {
		var one struct {
			Facts []struct{ Name, Value string } `json:"facts"`
		}
		decode(t, r.want(t, fmt.Sprintf("/api/s/f1/event/%d", seq), 200), &one)
		m := map[string]string{}
		for _, f := range one.Facts {
			m[f.Name] = f.Value
		}
		return m
	}
	check := func(seq int, want map[string]string) {
		t.Helper()
		got := facts(seq)
		for k, v := range want {
			if !strings.Contains(got[k], v) {
				t.Errorf("event %d: %s = %q, want it to contain %q (all: %v)", seq, k, got[k], v, got)
			}
		}
	}
	check(2, map[string]string{"Model": "scripted/m1", "Tokens": "120 in, 7 out", "Latency": "42 ms", "Agent": "coder"})
	check(4, map[string]string{"Tool": "run", "Arguments": `"command": "echo hi"`, "Exit code": "3", "Attempt": "1", "Result": "hi", "Agent": "coder"})
	check(5, map[string]string{"Rule": "retry", "Route": "fork", "Inputs": `"failures":2`})
}

// What a tenant writes into its sessions (a task, labels, messages, a
// tool's arguments) is text on every page, never markup: a stored script
// or attribute injection comes out escaped, the JSON the timeline reads is
// served as JSON, and every response forbids inline script.
func TestStoredMarkupIsEscaped(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	const script = `<script>alert(1)</script>`
	const attr = `"><img src=x onerror=alert(2)>`
	if _, err := r.c.Start(ctx, "x1", events.SessionStarted{Task: script + " " + attr, Labels: map[string]string{"k" + attr: attr}}); err != nil {
		t.Fatal(err)
	}
	r.say(t, "x1", script+attr)
	if _, err := r.c.Emit(ctx, "x1", &events.ToolRequested{CallID: "c1", Tool: "run", Arguments: []byte(`{"command":["` + strings.ReplaceAll(attr, `"`, `\"`) + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/?q=" + url.QueryEscape(script), "/s/x1", "/approvals", "/s/x1/dossier.md", "/s/x1/graph.svg"} {
		resp, err := http.Get(r.web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		ct := resp.Header.Get("Content-Type")
		if strings.HasPrefix(ct, "text/html") || strings.HasPrefix(ct, "image/svg") {
			if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
				t.Errorf("GET %s (%s) carries the stored markup unescaped:\n%s", path, ct, body)
			}
			if (path == "/" || path == "/s/x1") && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("GET %s does not show the task as text:\n%s", path, body)
			}
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !scriptsOnlyFromSelf(csp) {
			t.Errorf("GET %s: Content-Security-Policy %q allows inline or foreign script", path, csp)
		}
	}
	resp, err := http.Get(r.web.URL + "/api/s/x1/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("the timeline's JSON is served as %q (nosniff %q)", ct, resp.Header.Get("X-Content-Type-Options"))
	}
}

// scriptsOnlyFromSelf reports whether a Content-Security-Policy lets scripts
// load from the console only: its script-src, or else its default-src, is
// 'self' or 'none' with no 'unsafe-inline' and no other source.
func scriptsOnlyFromSelf(csp string) bool {
	directives := map[string][]string{}
	for d := range strings.SplitSeq(csp, ";") {
		if f := strings.Fields(d); len(f) > 0 {
			directives[f[0]] = f[1:]
		}
	}
	src, ok := directives["script-src"]
	if !ok {
		src, ok = directives["default-src"]
	}
	if !ok || len(src) == 0 {
		return false
	}
	for _, s := range src {
		if s != "'self'" && s != "'none'" {
			return false
		}
	}
	return true
}

// The sessions list shows a workspace seed's reference cut short (the
// whole reference in the title); other labels whole.
func TestLabelReferencesAreShortened(t *testing.T) {
	r := start(t)
	ref := "sha256:" + strings.Repeat("ab", 32)
	if _, err := r.c.Start(context.Background(), "l1", events.SessionStarted{Labels: map[string]string{"workspace": ref, "team": "blue"}}); err != nil {
		t.Fatal(err)
	}
	body := r.want(t, "/", http.StatusOK, "workspace=sha256:abababababab…", `title="workspace=`+ref+`"`, "team=blue")
	if strings.Contains(body, ">workspace="+ref+"<") {
		t.Errorf("the whole reference is shown:\n%s", body)
	}
}

// The live stream carries the session's token deltas as "delta" events
// without an ID (a reconnecting browser resumes after the last stored
// event), and the page shows them below the timeline.
func TestLiveCarriesDeltas(t *testing.T) {
	r := start(t)
	r.session(t, "s1", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.web.URL+"/api/s/s1/live?after=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the live stream ended")
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no line from the live stream")
		}
		return ""
	}
	for next() != "id: 1" { // the watch is subscribed once it sends the history
	}
	b, _ := json.Marshal(events.Delta{Session: "s1", Answer: "turn-9", Agent: "coder", Text: "Hello"})
	if err := r.c.Conn().Publish(events.DeltaSubject(events.DefaultTenant, "s1"), b); err != nil {
		t.Fatal(err)
	}
	for {
		l := next()
		if strings.HasPrefix(l, "id: ") {
			continue
		}
		if l == "event: delta" {
			if data := next(); !strings.Contains(data, `"text":"Hello"`) || !strings.Contains(data, `"answer":"turn-9"`) {
				t.Fatalf("delta data %q", data)
			}
			break
		}
	}
	r.want(t, "/assets/app.js", 200, `addEventListener("delta"`)
	r.want(t, "/s/s1", 200, `id="growing"`)
}
