package eval

import (
	"reflect"
	"testing"
	"time"
)

func TestPassMetrics(t *testing.T) {
	for _, tc := range []struct {
		name    string
		passed  []bool
		at1     float64
		hat, at bool
	}{
		{"no tries", nil, 0, false, false},
		{"one try passed", []bool{true}, 1, true, true},
		{"one try failed", []bool{false}, 0, false, false},
		{"all passed", []bool{true, true, true}, 1, true, true},
		{"none passed", []bool{false, false, false}, 0, false, false},
		{"one of four", []bool{false, true, false, false}, 0.25, false, true},
		{"all but the last", []bool{true, true, true, false}, 0.75, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PassAt1(tc.passed); got != tc.at1 {
				t.Errorf("pass@1 = %v, want %v", got, tc.at1)
			}
			if got := PassHatK(tc.passed); got != tc.hat {
				t.Errorf("pass^k = %v, want %v", got, tc.hat)
			}
			if got := PassAtK(tc.passed); got != tc.at {
				t.Errorf("pass@k = %v, want %v", got, tc.at)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		ds       []time.Duration
		p        float64
		want     time.Duration
		describe string
	}{
		{nil, 50, 0, "no values"},
		{ms(7), 50, 7 * time.Millisecond, "one value is every percentile"},
		{ms(7), 95, 7 * time.Millisecond, "one value is every percentile"},
		{ms(40, 10, 30, 20), 50, 20 * time.Millisecond, "the lower middle of an even count"},
		{ms(40, 10, 30, 20), 95, 40 * time.Millisecond, "the largest of few"},
		{ms(5, 1, 3), 50, 3 * time.Millisecond, "the middle of an odd count"},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 95, 19 * time.Millisecond, "nearest rank of 20"},
	} {
		if got := Percentile(tc.ds, tc.p); got != tc.want {
			t.Errorf("%s: p%v of %v = %v, want %v", tc.describe, tc.p, tc.ds, got, tc.want)
		}
	}
	ds := ms(3, 1, 2)
	Percentile(ds, 50)
	if !reflect.DeepEqual(ds, ms(3, 1, 2)) {
		t.Errorf("Percentile sorted its argument: %v", ds)
	}
}

func TestSummaries(t *testing.T) {
	outcome := &Failure{Cause: CauseOutcome, Detail: "closed failed, want succeeded"}
	timeout := &Failure{Cause: CauseTimeout, Detail: "not closed within 1s"}
	flaky := []Run{
		{Try: 1, Passed: true, Closed: true, TokensIn: 10, TokensOut: 2, LatencyMS: 30},
		{Try: 2, Closed: true, Failure: outcome, TokensIn: 12, TokensOut: 3, LatencyMS: 10},
		{Try: 3, Failure: timeout, TokensIn: 5, LatencyMS: 0},
	}
	solid := []Run{
		{Try: 1, Passed: true, Closed: true, TokensIn: 1, TokensOut: 1, LatencyMS: 20},
		{Try: 2, Passed: true, Closed: true, TokensIn: 1, TokensOut: 1, LatencyMS: 40},
		{Try: 3, Passed: true, Closed: true, TokensIn: 1, TokensOut: 1, LatencyMS: 50},
	}
	broken := []Run{
		{Try: 1, Closed: true, Failure: outcome, LatencyMS: 5},
		{Try: 2, Closed: true, Failure: outcome, LatencyMS: 5},
		{Try: 3, Failure: &Failure{Cause: CauseError, Detail: "start: refused"}},
	}
	f := Summarize(flaky)
	var free float64 // unpriced runs cost nothing (TestSummaryCost prices them)
	want := Summary{Runs: 3, Passed: 1, Closed: 2, PassAt1: 1.0 / 3, PassHatK: 0, PassAtK: 1, TokensIn: 27, TokensOut: 5, Cost: &free,
		LatencyP50: 10, LatencyP95: 30, // the timed-out run has no latency
		ByCause:  map[string]int{CauseOutcome: 1, CauseTimeout: 1},
		Failures: []FailureCount{{*outcome, 1}, {*timeout, 1}}}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("flaky task:\n got %+v\nwant %+v", f, want)
	}
	if s := Summarize(solid); s.PassAt1 != 1 || s.PassHatK != 1 || s.PassAtK != 1 || s.Failures != nil || s.LatencyP50 != 40 {
		t.Errorf("solid task: %+v", s)
	}
	b := Summarize(broken)
	if b.PassAt1 != 0 || b.PassHatK != 0 || b.PassAtK != 0 || !reflect.DeepEqual(b.Failures, []FailureCount{{*outcome, 2}, {Failure{CauseError, "start: refused"}, 1}}) {
		t.Errorf("broken task: %+v", b)
	}

	tasks := []TaskReport{{ID: "flaky", Summary: f, Runs: flaky}, {ID: "solid", Summary: Summarize(solid), Runs: solid}, {ID: "broken", Summary: b, Runs: broken}}
	o := Overall(tasks)
	if o.Runs != 9 || o.Passed != 4 || o.PassAt1 != 4.0/9 || o.PassHatK != 1.0/3 || o.PassAtK != 2.0/3 || o.TokensIn != 30 || o.TokensOut != 8 {
		t.Errorf("overall: %+v", o)
	}
	if !reflect.DeepEqual(o.ByCause, map[string]int{CauseOutcome: 3, CauseTimeout: 1, CauseError: 1}) || o.Failures[0] != (FailureCount{*outcome, 3}) {
		t.Errorf("overall failures: %+v %+v", o.ByCause, o.Failures)
	}
	// Seven closed runs: 5 5 10 20 30 40 50.
	if o.LatencyP50 != 20 || o.LatencyP95 != 50 {
		t.Errorf("overall latency p50 %d, p95 %d; want 20, 50", o.LatencyP50, o.LatencyP95)
	}
	if z := Overall(nil); z.PassAt1 != 0 || z.Runs != 0 {
		t.Errorf("no tasks: %+v", z)
	}
}
