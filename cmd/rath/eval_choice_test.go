package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// rath eval of an agent whose scripted answer is a seeded draw (a choose
// turn: three in four finish, one is cut off): each try's session gets
// its own seed, the draw is recorded with the model call, the run passes
// exactly when the draw was the finishing answer, and the metrics come
// out of those known outcomes, with pass@1, pass^k and pass@k telling
// different stories. A replay of a run that drew the failing answer
// draws it again.
func TestEvalChoice(t *testing.T) {
	ctx := context.Background()
	rt, c := evalRuntime(t)
	const k = 6
	r := rath(t, rt.URL, "eval", "testdata/eval/choice.yaml", "--runs", fmt.Sprint(k), "--concurrency", "3", "--run-timeout", "2m",
		"--out", filepath.Join(t.TempDir(), "report"), "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if len(rep.Tasks) != 2 {
		t.Fatalf("report: %d tasks, want 2", len(rep.Tasks))
	}

	drawn := map[int]int{}
	var failedRun string
	var hatK, atK, at1 float64
	for _, task := range rep.Tasks {
		if len(task.Runs) != k {
			t.Fatalf("task %s: %d runs, want %d", task.ID, len(task.Runs), k)
		}
		var passed []bool
		for _, run := range task.Runs {
			log, err := c.Log(ctx, run.Session, client.Range{})
			if err != nil {
				t.Fatal(err)
			}
			seed := fmt.Sprintf("%s/%d", task.ID, run.Try)
			var choices []*events.ScriptChoice
			for _, ev := range log {
				switch d, _ := ev.Decode(); d := d.(type) {
				case *events.SessionStarted:
					if d.Labels[events.LabelSeed] != seed {
						t.Errorf("task %s try %d: labels %v, want %s=%s", task.ID, run.Try, d.Labels, events.LabelSeed, seed)
					}
				case *events.ModelCalled:
					choices = append(choices, d.Choice)
				}
			}
			if len(choices) != 1 || choices[0] == nil || choices[0].Seed != seed || choices[0].Turn != 0 || choices[0].Of != 2 {
				t.Fatalf("task %s try %d: model calls' choices %+v, want one draw of 2 seeded %s", task.ID, run.Try, choices, seed)
			}
			alt := choices[0].Alternative
			drawn[alt]++
			// The known outcome: alternative 0 finishes, 1 is cut off.
			want := alt == 0
			if run.Passed != want || (run.Outcome == "succeeded") != want {
				t.Errorf("task %s try %d: drew %d, passed %v, outcome %s", task.ID, run.Try, alt, run.Passed, run.Outcome)
			}
			if !want && (run.Failure == nil || run.Failure.Cause != eval.CauseOutcome || !strings.Contains(run.Failure.Detail, "the agent ran out of tokens")) {
				t.Errorf("task %s try %d: failure %+v", task.ID, run.Try, run.Failure)
			}
			if !want && failedRun == "" {
				failedRun = run.Session
			}
			passed = append(passed, want)
		}
		s := task.Summary
		if s.Runs != k || s.Passed != count(passed) || s.PassAt1 != eval.PassAt1(passed) || s.PassHatK != b2f(eval.PassHatK(passed)) || s.PassAtK != b2f(eval.PassAtK(passed)) {
			t.Errorf("task %s: summary %+v, the runs passed %v", task.ID, s, passed)
		}
		at1 += eval.PassAt1(passed) / 2
		hatK += b2f(eval.PassHatK(passed)) / 2
		atK += b2f(eval.PassAtK(passed)) / 2
	}
	if o := rep.Overall; o.PassAt1 != at1 || o.PassHatK != hatK || o.PassAtK != atK {
		t.Errorf("overall %+v, want pass@1 %v, pass^k %v, pass@k %v", o, at1, hatK, atK)
	}
	// The draws are a hash of the seeds, so the same on every run of this
	// test: both answers were drawn, so the three metrics differ.
	if drawn[0] == 0 || drawn[1] == 0 || !(hatK < at1 && at1 < atK) {
		t.Fatalf("draws %v and metrics pass^k %v, pass@1 %v, pass@k %v: the test needs both answers drawn", drawn, hatK, at1, atK)
	}

	// A replay starts with the original's labels, so its agent draws with
	// the same seed, the cut-off answer again: every event reproduced.
	r = rath(t, rt.URL, "replay", failedRun, "--timeout", "60s")
	if r.code != exitOK || !strings.Contains(r.stdout, "reproduced") {
		t.Fatalf("rath replay of a run that drew the failing answer: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
