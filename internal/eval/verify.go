package eval

import (
	"encoding/json"
	"fmt"

	"github.com/openrath/rath/pkg/events"
)

// Verification is what VerifyReport found: the heads whose signatures it
// checked and every problem (none: the report verifies).
type Verification struct {
	ID       string   `json:"id"`
	OK       bool     `json:"ok"`
	Runs     int      `json:"runs"`
	Heads    int      `json:"heads"`
	Problems []string `json:"problems,omitempty"`
}

// VerifyReport checks a report offline, as a dossier is checked: every
// run's session head is signed by a key of ring (the pinned ledger keys)
// for that session, sequence and chain hash, so the report names heads the
// ledger vouched for, which rath verify and rath export check against the
// sessions themselves; and every summary, the tasks' and the overall one,
// is what its runs give, so no metric was edited apart from the runs. A
// run without a session (it never started) has no head to check; one whose
// session has no signed head, or one the ledger did not find whole when the
// run ended, is a problem.
func VerifyReport(r *Report, ring events.Keyring) Verification {
	v := Verification{ID: r.ID}
	bad := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	if r.Format != ReportFormat {
		bad("format %q, want %s", r.Format, ReportFormat)
	}
	for _, t := range r.Tasks {
		for _, run := range t.Runs {
			v.Runs++
			if run.Session == "" {
				continue
			}
			what := fmt.Sprintf("task %s try %d (session %s)", t.ID, run.Try, run.Session)
			switch {
			case run.HeadSig == "" || run.Head == 0:
				bad("%s: no signed head: %s", what, or(run.Fault, "none recorded"))
				continue
			case !run.Verified:
				bad("%s: the ledger did not find its chain whole when the run ended: %s", what, or(run.Fault, "no reason recorded"))
			}
			if err := ring.Verify(run.Session, run.Head, run.HeadHash, run.HeadSig); err != nil {
				bad("%s: head %d %s: %v", what, run.Head, run.HeadHash, err)
				continue
			}
			v.Heads++
		}
		if !sameSummary(Summarize(t.Runs), t.Summary) {
			bad("task %s: its summary is not what its runs give", t.ID)
		}
	}
	if !sameSummary(Overall(r.Tasks), r.Overall) {
		bad("the overall summary is not what the tasks give")
	}
	v.OK = len(v.Problems) == 0
	return v
}

// sameSummary compares summaries as the report writes them.
func sameSummary(a, b Summary) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
