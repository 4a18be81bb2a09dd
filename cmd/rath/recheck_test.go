package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Counterfactual evaluation end to end: an eval records two runs of a
// planner → coder → reviewer chain (both pass), and rath recheck re-runs
// them on changed workflows. Only the reviewer changes: each run is forked
// before the reviewer's turn, the two turns before it are reused (their
// model calls are in the original's log only; the fork has the reviewer's
// alone), and the verdict, divergence and savings are checked against the
// logs. A rule that changes forks at the first decision it decides
// differently; a workflow-wide change runs from the start; no change runs
// nothing.
func TestRecheck(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	if r := rath(t, rt.URL, "eval", "testdata/recheck/tasks.yaml", "--runs", "2", "--id", "ev-chain", "--run-timeout", "2m"); r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	recheck := func(args ...string) recheckReport {
		t.Helper()
		r := rath(t, rt.URL, append([]string{"recheck", "--json", "--run-timeout", "2m"}, args...)...)
		if r.code != exitOK {
			t.Fatalf("rath recheck %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		var rep recheckReport
		decode(t, r.stdout, &rep)
		return rep
	}

	// The reviewer rejects on the changed workflow: the outcome changes.
	rep := recheck("--workflow", "testdata/recheck/strict.yaml", "--eval", "ev-chain", "--tasks", "testdata/recheck/tasks.yaml", "--id", "rc-strict")
	if rep.Format != recheckFormat || rep.ID != "rc-strict" || len(rep.Sessions) != 2 || rep.Verdicts[rerun.VerdictChanged] != 2 {
		t.Fatalf("report: %+v", rep)
	}
	var reused, ran int64
	for _, s := range rep.Sessions {
		log := logOf(t, c, s.Session)
		// The point is right before the decision that asked the reviewer.
		var decided events.Stored
		for _, e := range log {
			if e.Type == events.TypeSelectorDecided && strings.Contains(string(e.Data), `"agent":"reviewer"`) {
				decided = e
			}
		}
		if s.FromStart || s.Point.Agent != "reviewer" || s.Point.At != decided.Seq-1 || s.Change != "agents reviewer" {
			t.Errorf("%s: point %+v (from start %v, change %q), want the reviewer's at %d", s.Session, s.Point, s.FromStart, s.Change, decided.Seq-1)
		}
		if !s.Original.Passed || s.Original.Outcome != "succeeded" || s.Counterfactual == nil || s.Counterfactual.Passed || s.Counterfactual.Outcome != "failed" ||
			!strings.Contains(s.Counterfactual.Failure, "closed failed, want succeeded") {
			t.Errorf("%s: original %+v, counterfactual %+v", s.Session, s.Original, s.Counterfactual)
			continue
		}
		// The counterfactual is a fork at the point, on the changed workflow.
		st, err := c.State(ctx, s.Counterfactual.Session)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := c.State(ctx, s.Session)
		if err != nil {
			t.Fatal(err)
		}
		if st.Lineage.Parent != s.Session || st.Lineage.ForkSeq != s.Point.At || st.Workflow != "recheck-chain-strict" || st.WorkflowRef == orig.WorkflowRef ||
			st.Labels[rerun.LabelRecheck] != "rc-strict" || st.Labels[rerun.LabelRecheckOf] != s.Session {
			t.Errorf("%s: counterfactual %s: lineage %+v, workflow %s (%s), labels %v", s.Session, s.Counterfactual.Session, st.Lineage, st.Workflow, st.WorkflowRef, st.Labels)
		}
		// Reused, not re-run: the prefix's model calls are the original's
		// (planner, coder); the fork's own log holds the reviewer's alone.
		prefix := modelCalls(log, 0, s.Point.At)
		own := modelCalls(logOf(t, c, s.Counterfactual.Session), s.Point.At+1, 0)
		if prefix["planner"] != 1 || prefix["coder"] != 1 || len(own) != 1 || own["reviewer"] != 1 {
			t.Errorf("%s: model calls in the prefix %v, in the fork's own events %v", s.Session, prefix, own)
		}
		if s.Reused.ModelCalls != 2 || s.Ran.ModelCalls != 1 || s.Reused.TokensIn != 300 || s.Reused.TokensOut != 30 || s.Ran.TokensIn != 300 || s.Ran.TokensOut != 7 {
			t.Errorf("%s: reused %+v, ran %+v", s.Session, s.Reused, s.Ran)
		}
		if want := 330.0 / 637; s.Saved.Tokens != want || s.Saved.ModelCalls != 2.0/3 {
			t.Errorf("%s: saved %+v, want tokens %v", s.Session, s.Saved, want)
		}
		// The first decision and request agree; the reviewer's answer is
		// where the runs part (one sequence later in the fork, whose first
		// event is its fork record).
		if s.Diverged == nil || s.Diverged.Seq <= decided.Seq+1 || s.Diverged.Seq > orig.Seq || s.Diverged.CounterfactualSeq != s.Diverged.Seq+1 {
			t.Errorf("%s: diverged %+v, want after the request at %d", s.Session, s.Diverged, decided.Seq+1)
		}
		reused += s.Reused.ModelCalls
		ran += s.Ran.ModelCalls
	}
	if rep.Reused.ModelCalls != reused || rep.Ran.ModelCalls != ran {
		t.Errorf("overall reused %+v ran %+v, want the sum of the sessions' (%d, %d)", rep.Reused, rep.Ran, reused, ran)
	}

	// A system prompt the scripted reviewer does not read: same outcome,
	// and no event differs.
	one := rep.Sessions[0].Session
	rep = recheck("--workflow", "testdata/recheck/prompt.yaml", one)
	if s := rep.Sessions[0]; s.Verdict != rerun.VerdictUnchanged || s.Point.Agent != "reviewer" || s.Ran.ModelCalls != 1 || s.Diverged != nil {
		t.Errorf("prompt change: %+v (diverged %+v)", s, s.Diverged)
	}

	// A rule sends the planner's work straight to the reviewer: forked at
	// the planner's turn's end, the trigger the changed rule decides
	// differently; no coder runs.
	rep = recheck("--workflow", "testdata/recheck/skip.yaml", one, "--cel", "state.turns == 3")
	s := rep.Sessions[0]
	var plannerDone uint64
	for _, e := range logOf(t, c, one) {
		if e.Type == events.TypeTurnCompleted && strings.Contains(string(e.Data), `"agent":"planner"`) {
			plannerDone = e.Seq
		}
	}
	if s.Verdict != rerun.VerdictChanged || s.Point.At != plannerDone || s.Point.Agent != "reviewer" || s.Change != "routing (rules, stop, budgets)" ||
		!strings.Contains(s.Point.Why, "code → agent:reviewer") || s.Counterfactual == nil || !strings.Contains(s.Counterfactual.Failure, "state.turns == 3 is false") {
		t.Errorf("rule change: %+v, point %+v, counterfactual %+v", s, s.Point, s.Counterfactual)
	} else if own := modelCalls(logOf(t, c, s.Counterfactual.Session), s.Point.At+1, 0); own["coder"] != 0 || own["reviewer"] != 1 || s.Reused.ModelCalls != 1 {
		t.Errorf("rule change: fork's own model calls %v, reused %d", own, s.Reused.ModelCalls)
	}

	// A workflow-wide setting: a new session from the recorded start,
	// nothing reused.
	rep = recheck("--workflow", "testdata/recheck/scoped.yaml", one)
	s = rep.Sessions[0]
	if !s.FromStart || s.Point.At != 0 || s.Reused.ModelCalls != 0 || s.Ran.ModelCalls != 3 || s.Verdict != rerun.VerdictUnchanged || s.Counterfactual == nil ||
		!strings.Contains(s.Point.Why, "memory changed") {
		t.Errorf("workflow-wide change: %+v, point %+v", s, s.Point)
	} else if st, err := c.State(ctx, s.Counterfactual.Session); err != nil || st.Lineage.Parent != "" || st.Task != "Fix Add and have it reviewed." || st.Labels["eval_task"] != "chain" {
		t.Errorf("from the start: %+v, %v", st, err)
	}

	// The recorded session's tree now holds three counterfactual forks,
	// each on its own workflow: a replay makes them again on theirs and
	// reproduces every event.
	if r := rath(t, rt.URL, "replay", one, "--timeout", "60s"); r.code != exitOK || !strings.Contains(r.stdout, "reproduced") || !strings.Contains(r.stdout, "4 branches") {
		t.Fatalf("rath replay of a session with counterfactual forks: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// No change: nothing runs. Selected by label, the eval's two runs
	// only: not the forks, not the session started again above.
	before, err := c.List(ctx, api.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := rath(t, rt.URL, "recheck", "--workflow", "testdata/recheck/chain.yaml", "--label", "eval=ev-chain", "--tasks", "testdata/recheck/tasks.yaml")
	if r.code != exitOK || !strings.Contains(r.stdout, "of 2 sessions on testdata/recheck/chain.yaml: 0 unchanged, 0 changed, 2 unaffected") ||
		!strings.Contains(r.stdout, "the change affects no turn or decision of the recorded session (nothing)") {
		t.Fatalf("unchanged workflow: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if after, err := c.List(ctx, api.ListRequest{}); err != nil || len(after) != len(before) {
		t.Errorf("sessions after a recheck with no change: %d, before %d (%v)", len(after), len(before), err)
	}
	// Narrowed by how the sessions closed: both runs succeeded.
	if r := rath(t, rt.URL, "recheck", "--workflow", "testdata/recheck/chain.yaml", "--eval", "ev-chain", "--closed-as", "failed", "--closed-as", "succeeded"); r.code != exitOK ||
		!strings.Contains(r.stdout, "of 2 sessions") {
		t.Errorf("--closed-as failed or succeeded: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := rath(t, rt.URL, "recheck", "--workflow", "testdata/recheck/chain.yaml", "--eval", "ev-chain", "--closed-as", "failed"); r.code != exitUsage ||
		!strings.Contains(r.stderr, "no closed root session has the labels eval=ev-chain and closed as failed") {
		t.Errorf("--closed-as failed: exit %d, stderr %q", r.code, r.stderr)
	}

	// Another model for one agent, named on the command line against the
	// recorded workflow: forked at the reviewer's turn, whose model call on
	// the fork names the model; the fork's workflow records the change.
	rep = recheck("--workflow", "testdata/recheck/chain.yaml", "--model", "scripted/scripted-2", "--agent", "reviewer", one)
	s = rep.Sessions[0]
	if s.Verdict != rerun.VerdictUnchanged || s.FromStart || s.Point.Agent != "reviewer" || s.Change != "agents reviewer" || s.Counterfactual == nil || s.Ran.ModelCalls != 1 {
		t.Fatalf("model change: %+v, point %+v, counterfactual %+v", s, s.Point, s.Counterfactual)
	}
	var models []string
	for _, e := range logOf(t, c, s.Counterfactual.Session) {
		if e.Type == events.TypeModelCalled && e.Seq > s.Point.At {
			var d events.ModelCalled
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			models = append(models, d.Agent+" "+d.Model)
		}
	}
	if len(models) != 1 || models[0] != "reviewer scripted-2" {
		t.Errorf("model change: the fork's own model calls %v, want the reviewer's on scripted-2", models)
	}
}

// Hostile command lines are refused before any session is forked, each
// with what is wrong.
func TestRecheckRefuses(t *testing.T) {
	rt, c := evalRuntime(t)
	ack, err := c.Start(context.Background(), "open-one", events.SessionStarted{Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	wf := "testdata/recheck/strict.yaml"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no workflow", []string{"s1"}, "--workflow: the changed workflow file is required"},
		{"no selection", []string{"--workflow", wf}, "select the recorded sessions one way"},
		{"two selections", []string{"--workflow", wf, "--eval", "e", "s1"}, "select the recorded sessions one way"},
		{"bad label", []string{"--workflow", wf, "--label", "eval"}, "want key=value"},
		{"missing workflow", []string{"--workflow", "testdata/recheck/nope.yaml", "s1"}, "nope.yaml"},
		{"bad cel", []string{"--workflow", wf, "--cel", "state.nope", "s1"}, "--cel"},
		{"tasks and outcome", []string{"--workflow", wf, "--tasks", "testdata/recheck/tasks.yaml", "--outcome", "failed", "s1"}, "--outcome and --cel go without it"},
		{"bad concurrency", []string{"--workflow", wf, "--concurrency", "0", "s1"}, "must be positive"},
		{"nothing selected", []string{"--workflow", wf, "--eval", "no-such-eval"}, "no closed root session has the labels eval=no-such-eval"},
		{"unknown session", []string{"--workflow", wf, "no-such-session"}, "no session no-such-session"},
		{"open session", []string{"--workflow", wf, ack.Session}, "is active: only a closed session has an outcome to compare with"},
		{"model without a provider", []string{"--workflow", wf, "--model", "gpt-4.1", "s1"}, `--model "gpt-4.1": want PROVIDER/MODEL`},
		{"model with an empty name", []string{"--workflow", wf, "--model", "openai/", "s1"}, "want PROVIDER/MODEL"},
		{"unknown provider", []string{"--workflow", wf, "--model", "nosuch/m", "s1"}, "nosuch"},
		{"unknown agent", []string{"--workflow", wf, "--model", "scripted/scripted-2", "--agent", "nobody", "s1"}, `--agent "nobody": testdata/recheck/strict.yaml has no such agent`},
		{"closed-as with sessions named", []string{"--workflow", wf, "--closed-as", "failed", "s1"}, "--closed-as selects among"},
		{"agent without model", []string{"--workflow", wf, "--agent", "reviewer", "s1"}, "need --model PROVIDER/MODEL"},
		{"base url without model", []string{"--workflow", wf, "--base-url", "http://127.0.0.1:1", "s1"}, "need --model PROVIDER/MODEL"},
	} {
		r := rath(t, rt.URL, append([]string{"recheck"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %d and %q", tc.name, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	// A closed session that ran no workflow has nothing to change.
	if _, err := c.Close(context.Background(), ack.Session, events.SessionClosed{Outcome: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if r := rath(t, rt.URL, "recheck", "--workflow", wf, ack.Session); r.code != exitUsage || !strings.Contains(r.stderr, "ran no workflow bundle") {
		t.Errorf("no workflow recorded: exit %d, stderr %q", r.code, r.stderr)
	}
	// A fork request naming a workflow bundle that is not a blob reference
	// is refused, and forks nothing.
	if _, err := c.Fork(context.Background(), api.ForkRequest{Parent: ack.Session, At: 1, WorkflowRef: "../etc/passwd"}); api.CodeOf(err) != api.CodeSchema ||
		!strings.Contains(err.Error(), "workflow_ref") {
		t.Errorf("fork onto a workflow_ref that is not a blob reference: %v", err)
	}
	if _, err := c.Fork(context.Background(), api.ForkRequest{Parent: ack.Session, At: 1, Workflow: "w"}); api.CodeOf(err) != api.CodeMalformed ||
		!strings.Contains(err.Error(), "need the workflow_ref") {
		t.Errorf("fork naming a workflow without its bundle: %v", err)
	}
	if list, err := c.List(context.Background(), api.ListRequest{}); err != nil || len(list) != 1 {
		t.Errorf("sessions after refused rechecks: %v, %v", list, err)
	}
}

// logOf is a session's logical log.
func logOf(t *testing.T, c *client.Client, id string) []events.Stored {
	t.Helper()
	log, err := c.Log(context.Background(), id, client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// modelCalls counts the rath.model.called events of a log from..to (to 0:
// the end) by agent.
func modelCalls(log []events.Stored, from, to uint64) map[string]int {
	out := map[string]int{}
	for _, e := range log {
		if e.Type != events.TypeModelCalled || e.Seq < from || (to != 0 && e.Seq > to) {
			continue
		}
		var d struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(e.Data, &d)
		out[d.Agent]++
	}
	return out
}
