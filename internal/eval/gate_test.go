package eval

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// report builds an eval report from tasks' outcomes: each task's runs
// pass or fail as given, cost cost each (nil: no price), sessions named
// <eval>-<task>-<try>.
func report(id string, currency string, tasks map[string][]bool, cost *float64, order ...string) *Report {
	r := &Report{Format: ReportFormat, ID: id, Currency: currency}
	for _, name := range order {
		var runs []Run
		for i, p := range tasks[name] {
			run := Run{Try: i + 1, Session: id + "-" + name + "-" + string(rune('1'+i)), Passed: p, Cost: cost}
			if cost == nil {
				run.NoPrice = []string{"openai/gpt-x"}
			}
			runs = append(runs, run)
			r.K = len(tasks[name])
		}
		r.Tasks = append(r.Tasks, TaskReport{ID: name, Summary: Summarize(runs), Runs: runs})
	}
	r.Overall = Overall(r.Tasks)
	return r
}

func f(v float64) *float64 { return &v }

func TestCompare(t *testing.T) {
	base := report("base", "USD", map[string][]bool{"a": {true, true}, "b": {true, true}, "c": {false, false}}, f(1), "a", "b", "c")

	// b regressed (both tries fail now), c improved (one passes now).
	cand := report("cand", "USD", map[string][]bool{"a": {true, true}, "b": {false, false}, "c": {false, true}}, f(1), "a", "b", "c")
	g := Compare(base, "base/report.json", cand, Thresholds{})
	if !reflect.DeepEqual(g.Regressed, []string{"b"}) || g.Baseline != "base" || g.BaselineFile != "base/report.json" {
		t.Fatalf("gate: %+v", g)
	}
	a, b, c := g.Tasks[0], g.Tasks[1], g.Tasks[2]
	if a.Flip != "" || a.Regressions != nil || *a.PassHatK != 1 || *a.Cost != 1 {
		t.Errorf("unchanged task: %+v", a)
	}
	if b.Flip != FlipWorse || b.BaselineSession != "base-b-1" || b.Session != "cand-b-1" || b.BaselinePassAt1 != 1 || b.PassAt1 != 0 ||
		!reflect.DeepEqual(b.Regressions, []string{"pass@1 1.00 → 0.00: a drop of 1.00, more than 0.00", "pass^2 1.00 → 0.00: a drop of 1.00, more than 0.00"}) {
		t.Errorf("regressed task: %+v", b)
	}
	// Improved: a failed run of the baseline against a passing one now.
	if c.Flip != FlipBetter || c.BaselineSession != "base-c-1" || c.Session != "cand-c-2" || c.Regressions != nil {
		t.Errorf("improved task: %+v", c)
	}

	// The reverse comparison: b improved, c regressed.
	if g := Compare(cand, "cand", base, Thresholds{}); !reflect.DeepEqual(g.Regressed, []string{"c"}) || g.Tasks[1].Flip != FlipBetter || g.Tasks[2].Flip != FlipWorse {
		t.Errorf("reversed: %+v", g)
	}

	// A threshold lets a drop up to it pass; pass^k (1 → 0) drops by 1.
	half := report("half", "USD", map[string][]bool{"a": {true, false}, "b": {true, true}, "c": {false, false}}, f(1), "a", "b", "c")
	if g := Compare(base, "base", half, Thresholds{MaxPassDrop: 0.5}); !reflect.DeepEqual(g.Regressed, []string{"a"}) ||
		!reflect.DeepEqual(g.Tasks[0].Regressions, []string{"pass^2 1.00 → 0.00: a drop of 1.00, more than 0.50"}) || g.Tasks[0].Flip != FlipWorse {
		t.Errorf("a drop of 0.5 with --max-pass-drop 0.5: %+v", g.Tasks[0])
	}
	if g := Compare(base, "base", half, Thresholds{MaxPassDrop: 1}); g.Regressed != nil {
		t.Errorf("--max-pass-drop 1: %+v", g)
	}

	// Another k: pass^k is not compared, pass@1 is.
	k3 := report("k3", "USD", map[string][]bool{"a": {true, true, true}, "b": {true, true, false}, "c": {false, false, false}}, f(1), "a", "b", "c")
	g = Compare(base, "base", k3, Thresholds{MaxPassDrop: 0.4})
	if g.Tasks[0].PassHatK != nil || g.Regressed != nil || g.Tasks[1].Flip != FlipWorse {
		t.Errorf("k 2 against 3: %+v", g)
	}

	// Tasks in one report only are listed, not compared.
	other := report("other", "USD", map[string][]bool{"a": {true, true}, "d": {false, false}}, f(1), "a", "d")
	g = Compare(base, "base", other, Thresholds{})
	var only []string
	for _, c := range g.Tasks {
		only = append(only, c.ID+":"+c.Only)
	}
	if g.Regressed != nil || !reflect.DeepEqual(only, []string{"a:", "d:candidate", "b:baseline", "c:baseline"}) {
		t.Errorf("different task sets: %v, regressed %v", only, g.Regressed)
	}
}

func TestCompareCost(t *testing.T) {
	pass := map[string][]bool{"a": {true}}
	base := report("base", "USD", pass, f(1), "a")
	for _, tc := range []struct {
		name string
		cand *Report
		th   Thresholds
		want []string
	}{
		{"not gated", report("c", "USD", pass, f(5), "a"), Thresholds{}, nil},
		{"within", report("c", "USD", pass, f(1.1), "a"), Thresholds{MaxCostRise: f(0.10)}, nil},
		{"cheaper", report("c", "USD", pass, f(0.5), "a"), Thresholds{MaxCostRise: f(0)}, nil},
		{"beyond", report("c", "USD", pass, f(1.25), "a"), Thresholds{MaxCostRise: f(0.10)}, []string{"cost per run 1.0000 → 1.2500 USD: a rise of 25%, more than 10%"}},
		{"no price", report("c", "USD", pass, nil, "a"), Thresholds{MaxCostRise: f(0.10)}, []string{"cost not comparable: no price for openai/gpt-x"}},
		{"currencies", report("c", "EUR", pass, f(1), "a"), Thresholds{MaxCostRise: f(0.10)}, []string{"cost not comparable: the baseline's is in USD, this eval's in EUR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := Compare(base, "base", tc.cand, tc.th)
			if got := g.Tasks[0].Regressions; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("regressions %q, want %q", got, tc.want)
			}
		})
	}
	free := report("free", "USD", pass, f(0), "a")
	if g := Compare(free, "free", base, Thresholds{MaxCostRise: f(10)}); !reflect.DeepEqual(g.Tasks[0].Regressions, []string{"cost per run 0 → 1.0000 USD: the baseline's was free"}) {
		t.Errorf("from free: %+v", g.Tasks[0])
	}
	if g := Compare(free, "free", free, Thresholds{MaxCostRise: f(0)}); g.Regressed != nil {
		t.Errorf("free against free: %+v", g)
	}
}

func TestGateWriteText(t *testing.T) {
	base := report("base", "USD", map[string][]bool{"a": {true}, "b": {true}, "c": {false}}, f(0), "a", "b", "c")
	cand := report("cand", "USD", map[string][]bool{"a": {true}, "b": {false}, "c": {true}}, f(0), "a", "b", "c")
	cand.Gate = Compare(base, "base/report.json", cand, Thresholds{MaxCostRise: f(0.1)})
	var b strings.Builder
	if err := cand.Gate.WriteText(&b, cand); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"against baseline base (base/report.json; max pass drop 0.00, max cost rise 10%): REGRESSED: b\n",
		"TASK  PASS@1       PASS^1       COST/RUN USD     VERDICT\n",
		"a     1.00 → 1.00  1.00 → 1.00  0.0000 → 0.0000  ok\n",
		"b     1.00 → 0.00  1.00 → 0.00  0.0000 → 0.0000  REGRESSED: pass@1 1.00 → 0.00: a drop of 1.00, more than 0.00; pass^1",
		"  b worse: passed in base (session base-b-1), fails now (session cand-b-1)\n    rath diff base-b-1 cand-b-1\n",
		"  c better: failed in base (session base-c-1), passes now (session cand-c-1)\n    rath diff base-c-1 cand-c-1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	var page strings.Builder
	if err := cand.WriteMarkdown(&page); err != nil {
		t.Fatal(err)
	}
	if want := "| b | 1.00 → 0.00 | 1.00 → 0.00 | 0.0000 → 0.0000 | worse | `rath diff base-b-1 cand-b-1` | pass@1 1.00 → 0.00"; !strings.Contains(page.String(), want) {
		t.Errorf("report.md lacks %q:\n%s", want, page.String())
	}
}

func TestLoadReport(t *testing.T) {
	dir := t.TempDir()
	rep := sampleReport()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, "report.json")} {
		if got, err := LoadReport(path); err != nil || !reflect.DeepEqual(got, rep) {
			t.Errorf("LoadReport(%s) = %+v, %v", path, got, err)
		}
	}
	bad := filepath.Join(dir, "other.json")
	if err := os.WriteFile(bad, []byte(`{"format": "rath.dossier.v1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReport(bad); err == nil || !strings.Contains(err.Error(), `format "rath.dossier.v1", want rath.eval.report.v1`) {
		t.Errorf("another format: %v", err)
	}
	if _, err := LoadReport(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing baseline loads")
	}
}
