package eval

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// PassAt1 is the mean success over tries: the chance that one run passes,
// estimated from these. No tries is 0.
func PassAt1(passed []bool) float64 {
	if len(passed) == 0 {
		return 0
	}
	n := 0
	for _, p := range passed {
		if p {
			n++
		}
	}
	return float64(n) / float64(len(passed))
}

// PassHatK (tau-bench's pass^k) reports whether every one of the k tries
// passed: the agent is reliable on the task, not just able. No tries is
// false: nothing was shown.
func PassHatK(passed []bool) bool {
	return len(passed) > 0 && !slices.Contains(passed, false)
}

// PassAtK reports whether at least one of the k tries passed: the agent
// can do the task at all.
func PassAtK(passed []bool) bool {
	return slices.Contains(passed, true)
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method: the smallest value at least p percent of the values
// are at or below, always one of ds. No values is 0.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Summary is the metrics of a set of runs: one task's tries, or every
// task's (Report.Overall).
type Summary struct {
	Runs   int `json:"runs"`
	Passed int `json:"passed"`
	// Closed counts the runs whose session closed by itself within the run
	// timeout: those the latencies are over.
	Closed int `json:"closed"`
	// PassAt1 is the mean success of the runs (for Overall, the mean of the
	// tasks' pass@1, which is the same when every task ran k times).
	PassAt1 float64 `json:"pass_at_1"`
	// PassHatK and PassAtK are, for a task, 1 or 0; for Overall, the
	// fraction of tasks whose every try passed and of those with at least
	// one that did.
	PassHatK  float64 `json:"pass_hat_k"`
	PassAtK   float64 `json:"pass_at_k"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	// Cost is the runs' costs summed, in the report's currency; absent
	// when a run used a model without a price: NoPrice names those
	// models, so that a sum that leaves them out is never shown as the
	// cost.
	Cost    *float64 `json:"cost,omitempty"`
	NoPrice []string `json:"no_price,omitempty"`
	// LatencyP50 and LatencyP95 are over the runs that closed, first to
	// last event, in milliseconds (0 when none closed).
	LatencyP50 int64 `json:"latency_p50_ms"`
	LatencyP95 int64 `json:"latency_p95_ms"`
	// ByCause counts the failed runs by cause (CauseOutcome, CauseGrader,
	// CauseTimeout, CauseError); Failures by cause and detail, most first.
	ByCause  map[string]int `json:"by_cause,omitempty"`
	Failures []FailureCount `json:"failures,omitempty"`
}

// FailureCount is how many runs failed for the same reason.
type FailureCount struct {
	Failure
	Count int `json:"count"`
}

// Summarize computes one task's metrics from its runs.
func Summarize(runs []Run) Summary {
	passed := make([]bool, len(runs))
	for i, r := range runs {
		passed[i] = r.Passed
	}
	s := summarize(runs)
	s.PassAt1 = PassAt1(passed)
	s.PassHatK = b2f(PassHatK(passed))
	s.PassAtK = b2f(PassAtK(passed))
	return s
}

// Overall computes the metrics of a whole eval from its tasks: pass@1 is
// the mean of the tasks', pass^k and pass@k the fraction of tasks that
// have them; tokens, latency and failures are over every run.
func Overall(tasks []TaskReport) Summary {
	var all []Run
	var at1, hat, at float64
	for _, t := range tasks {
		all = append(all, t.Runs...)
		at1 += t.Summary.PassAt1
		hat += t.Summary.PassHatK
		at += t.Summary.PassAtK
	}
	s := summarize(all)
	if n := float64(len(tasks)); n > 0 {
		s.PassAt1, s.PassHatK, s.PassAtK = at1/n, hat/n, at/n
	}
	return s
}

// summarize counts what does not depend on how runs group into tasks.
func summarize(runs []Run) Summary {
	s := Summary{Runs: len(runs)}
	var lat []time.Duration
	counts := map[Failure]int{}
	var cost float64
	for _, r := range runs {
		if r.Cost != nil {
			cost += *r.Cost
		}
		for _, m := range r.NoPrice {
			if !slices.Contains(s.NoPrice, m) {
				s.NoPrice = append(s.NoPrice, m)
			}
		}
		if r.Passed {
			s.Passed++
		}
		s.TokensIn += r.TokensIn
		s.TokensOut += r.TokensOut
		if r.Closed {
			s.Closed++
			lat = append(lat, time.Duration(r.LatencyMS)*time.Millisecond)
		}
		if r.Failure != nil {
			counts[*r.Failure]++
			if s.ByCause == nil {
				s.ByCause = map[string]int{}
			}
			s.ByCause[r.Failure.Cause]++
		}
	}
	slices.Sort(s.NoPrice)
	if len(s.NoPrice) == 0 {
		s.Cost = &cost
	}
	s.LatencyP50 = Percentile(lat, 50).Milliseconds()
	s.LatencyP95 = Percentile(lat, 95).Milliseconds()
	for f, n := range counts {
		s.Failures = append(s.Failures, FailureCount{Failure: f, Count: n})
	}
	slices.SortFunc(s.Failures, func(a, b FailureCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Cause, b.Cause), cmp.Compare(a.Detail, b.Detail))
	})
	return s
}

// CostPerRun is s's cost divided by its runs: what one run costs on
// average, comparable between evals of different k. ok is false when s has
// no cost (a model without a price) or no runs.
func (s Summary) CostPerRun() (cost float64, ok bool) {
	if s.Cost == nil || s.Runs == 0 {
		return 0, false
	}
	return *s.Cost / float64(s.Runs), true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
