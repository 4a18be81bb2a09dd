package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// The evals page groups the sessions rath eval labels by eval run and
// task, counts the runs that closed succeeded, links every run, leaves
// grading forks out, and shows hostile label values as text.
func TestEvalsPage(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	const script = `<script>alert(1)</script>`
	const attr = `"><img src=x onerror=alert(2)>`
	run := func(id, evalID, task, try, outcome string) {
		t.Helper()
		labels := map[string]string{eval.LabelEval: evalID, eval.LabelTask: task, eval.LabelTry: try}
		if _, err := r.c.Start(ctx, id, events.SessionStarted{Task: "t", Labels: labels}); err != nil {
			t.Fatal(err)
		}
		if outcome != "" {
			if _, err := r.c.Close(ctx, id, events.SessionClosed{Outcome: outcome}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run("r1", "ev-a", "fix", "1", "succeeded")
	run("r2", "ev-a", "fix", "2", "failed")
	run("r3", "ev-a", "fix", "3", "succeeded")
	run("r4", "ev-a", "docs", "1", "")
	run("h1", script, attr, attr, "succeeded")
	if _, err := r.c.Start(ctx, "other", events.SessionStarted{Task: "t", Labels: map[string]string{"note": "eval=ev-a"}}); err != nil {
		t.Fatal(err)
	}
	// A grading fork inherits the run's labels: it is not a run.
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "r2", At: 1, ID: "g2", Labels: map[string]string{eval.LabelGrades: "r2"}}); err != nil {
		t.Fatal(err)
	}

	// A run whose workflow forked and went on on the fork: one run, which
	// ended on the fork, as it closed there.
	run("r5", "ev-a", "retry", "1", "")
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "r5", At: 1, ID: "f5"}); err != nil {
		t.Fatal(err)
	}
	for id, outcome := range map[string]string{"r5": "superseded", "f5": "succeeded"} {
		if _, err := r.c.Close(ctx, id, events.SessionClosed{Outcome: outcome}); err != nil {
			t.Fatal(err)
		}
	}

	body := r.want(t, "/evals", 200,
		`<h1>Eval runs</h1>`,
		`<a href="/evals?eval=ev-a">ev-a</a>`, "5 runs · succeeded 0.60",
		`<td>retry</td><td class="n">1</td><td class="n">1</td><td class="n">1.00</td>`,
		`<a href="/s/f5" class="run" title="f5: succeeded">`,
		`<td>fix</td><td class="n">3</td><td class="n">2</td><td class="n">0.67</td>`,
		`<td>docs</td><td class="n">1</td><td class="n">0 <span class="muted">(1 open)</span></td><td class="n">0.00</td>`,
		`<a href="/s/r1" class="run" title="r1: succeeded"><span class="status succeeded">1</span></a> <a href="/s/r2" class="run" title="r2: failed"><span class="status failed">2</span></a> <a href="/s/r3"`,
		"&lt;script&gt;alert(1)&lt;/script&gt;", `&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`,
		`<a href="/evals?eval=%3cscript%3ealert%281%29%3c%2fscript%3e">`,
		`<a href="/evals">Evals</a>`)
	if strings.Contains(body, "/s/g2") || strings.Contains(body, "/s/other") || strings.Contains(body, "/s/r5") {
		t.Errorf("the evals page lists a grading fork, a superseded branch or a session of no eval:\n%s", body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
		t.Errorf("the evals page carries a label's markup unescaped:\n%s", body)
	}

	// Narrowed to one eval, by a hostile value too.
	one := r.want(t, "/evals?eval=ev-a", 200, "<h1>Eval runs: ev-a</h1>", `<a href="/s/r4"`, `<a href="/evals">All eval runs</a>`)
	if strings.Contains(one, "/s/h1") {
		t.Errorf("?eval=ev-a lists another eval's run:\n%s", one)
	}
	hostile := r.want(t, "/evals?eval="+url.QueryEscape(script), 200, `<a href="/s/h1"`, "Eval runs: &lt;script&gt;")
	if strings.Contains(hostile, "<script>alert") || strings.Contains(hostile, "/s/r1") {
		t.Errorf("?eval=<script>: %s", hostile)
	}
	r.want(t, "/evals?eval="+url.QueryEscape(attr), 200, "No eval runs labelled eval=&#34;&gt;&lt;img")
}

// The console spells rath eval's labels itself, so as not to link the
// eval runner; they must stay the same.
func TestEvalLabelsAgree(t *testing.T) {
	if eval.LabelEval != "eval" || eval.LabelTask != "eval_task" || eval.LabelTry != "eval_try" || eval.LabelGrades != "eval_grades" {
		t.Errorf("internal/eval's labels changed: %s %s %s %s; change internal/console/evals.go with them",
			eval.LabelEval, eval.LabelTask, eval.LabelTry, eval.LabelGrades)
	}
}
