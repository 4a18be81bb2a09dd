package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// The sessions list and a session's page tell outcomes apart (a success,
// a failure, a superseded branch, another outcome), say what a stalled
// session waits for, and show a task's first line as plain text.
func TestOutcomesAndWaits(t *testing.T) {
	// The console's clock an hour ahead: every active session has been
	// quiet for an hour.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	r := start(t, console.WithClock(later))
	ctx := context.Background()
	emit := func(id string, data any) {
		t.Helper()
		if _, err := r.c.Emit(ctx, id, data); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	for id, outcome := range map[string]string{"won": "accepted", "lost": "failed", "moved": "superseded", "noted": "recorded", "budget": "budget_exceeded"} {
		r.session(t, id, 0)
		emit(id, &events.SessionClosed{Outcome: outcome, Reason: "because " + id})
	}
	r.session(t, "tool", 0)
	emit("tool", &events.ToolRequested{CallID: "c1", Tool: "run_tests", Agent: "coder"})
	r.session(t, "theirs", 0)
	emit("theirs", &events.ToolRequested{CallID: "c2", Tool: "lookup", Agent: "planner", Runner: events.RunnerCaller})
	r.session(t, "asks", 0)
	emit("asks", &events.ApprovalRequested{ApprovalID: "ship-it", Action: "deploy to production", Approver: "maintainers"})
	r.session(t, "owed", 0)
	emit("owed", &events.WorkPending{WorkID: "w1", Kind: "tool", Description: "turn t1 of coder waits for tool run_tests, which no tool runner offers"})
	if _, err := r.c.Start(ctx, "md", events.SessionStarted{Task: "\n# Fix **the** `slug.Make` [parser](https://example.com/p)\n\nIt keeps *capitals*."}); err != nil {
		t.Fatal(err)
	}

	var list struct {
		Rows []struct {
			ID       string `json:"id"`
			TaskLine string `json:"task_line"`
			Waits    string `json:"waits"`
			Badge    struct{ Text, Class, Title string }
		}
	}
	decode(t, r.want(t, "/api/sessions", 200), &list)
	type shown struct{ text, class, waits string }
	got := map[string]shown{}
	for _, row := range list.Rows {
		got[row.ID] = shown{row.Badge.Text, row.Badge.Class, row.Waits}
		if row.ID == "md" && row.TaskLine != "Fix the slug.Make parser" {
			t.Errorf("the task's line shows %q", row.TaskLine)
		}
	}
	for id, want := range map[string]shown{
		"won":    {"accepted", "succeeded", ""},
		"lost":   {"failed", "failed", ""},
		"budget": {"budget_exceeded", "failed", ""},
		"moved":  {"superseded", "superseded", ""},
		"noted":  {"closed: recorded", "closed", ""},
		"tool":   {"waiting", "waiting", "a tool runner to start tool call c1 (run_tests), requested at seq 2"},
		"theirs": {"waiting", "waiting", "its caller to record the outcome of tool call c2 (lookup), requested at seq 2: the caller runs it, not Rath"},
		"asks":   {"waiting", "waiting", "approval ship-it (asked of the maintainers role): deploy to production"},
		"owed":   {"waiting", "waiting", "turn t1 of coder waits for tool run_tests, which no tool runner offers (pending since seq 2)"},
		"md":     {"waiting", "waiting", "a next step"},
	} {
		g := got[id]
		if id == "md" { // no workflow: nothing routes it, nobody is owed anything
			want = shown{"active", "active", ""}
		}
		if g.text != want.text || g.class != want.class || !strings.HasPrefix(g.waits, want.waits) {
			t.Errorf("%s shows %+v, want %+v", id, g, want)
		}
	}
	body := r.want(t, "/", 200, `<span class="status failed" title="closed: failed">failed</span>`,
		`<span class="status succeeded" title="closed: accepted">accepted</span>`, "Fix the slug.Make parser")
	if strings.Contains(body, `class="status closed" title="closed: accepted`) {
		t.Error("a success shows as a plain closed badge")
	}
	r.want(t, "/s/tool", 200, `<dt>Waiting for</dt><dd class="waits" id="waits">a tool runner to start tool call c1 (run_tests)`)
	r.want(t, "/s/lost", 200, `<span class="outcome failed">failed</span>: because lost`)

	// On the console's own clock a session that just changed is busy, not
	// waiting; an approval waits for a person at once.
	now := start(t)
	now.session(t, "fresh", 0)
	if _, err := now.c.Emit(ctx, "fresh", &events.ToolRequested{CallID: "c1", Tool: "run_tests"}); err != nil {
		t.Fatal(err)
	}
	now.session(t, "asks", 0)
	if _, err := now.c.Emit(ctx, "asks", &events.ApprovalRequested{ApprovalID: "a1", Action: "merge"}); err != nil {
		t.Fatal(err)
	}
	var fresh struct {
		Rows []struct {
			ID    string `json:"id"`
			Badge struct{ Text string }
		}
	}
	if err := json.Unmarshal([]byte(now.want(t, "/api/sessions", 200)), &fresh); err != nil {
		t.Fatal(err)
	}
	for _, row := range fresh.Rows {
		if want := map[string]string{"fresh": "active", "asks": "waiting"}[row.ID]; row.Badge.Text != want {
			t.Errorf("%s shows %q, want %q", row.ID, row.Badge.Text, want)
		}
	}
}

// Summaries and reasons that name a long session ID name its branch, as
// the dossier does: "forked to fork-1@1", not a UUID.
func TestBranchNamesInSummaries(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	const root, fork = "0197a1c2-0000-7000-8000-00000000abcd", "0197a1c2-0000-7000-8000-00000000abcd-b"
	r.session(t, root, 1)
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: root, At: 1, ID: fork}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Emit(ctx, root, &events.SessionClosed{Outcome: "superseded", Reason: "forked to " + fork + " at 1"}); err != nil {
		t.Fatal(err)
	}
	r.want(t, "/s/"+root, 200, `<span class="outcome superseded">superseded</span>: forked to fork-1@1 at 1`)
	r.want(t, "/compare?a="+root+"&b="+fork, 200, `Compare <a href="/s/`+root+`">root <span class="id">`, `</span> forked to fork-1@1 at 1</td>`)
	var page struct {
		Events []struct{ Summary string } `json:"events"`
	}
	decode(t, r.want(t, "/api/s/"+root+"/events", 200), &page)
	if n := len(page.Events); n == 0 || page.Events[n-1].Summary != "closed: superseded (forked to fork-1@1 at 1)" {
		t.Errorf("the close reads %+v", page.Events)
	}
}
