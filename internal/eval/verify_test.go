package eval

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// A report verifies offline when its heads are signed by the pinned key
// and its summaries are what its runs give; each tampering is named.
func TestVerifyReport(t *testing.T) {
	key, err := events.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := events.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	ring := events.NewKeyring(key.Public())
	signed := func() *Report {
		r := sampleReport()
		for i := range r.Tasks {
			for j := range r.Tasks[i].Runs {
				run := &r.Tasks[i].Runs[j]
				if run.Session == "" {
					continue
				}
				if run.HeadSig, err = key.Sign(run.Session, run.Head, run.HeadHash); err != nil {
					t.Fatal(err)
				}
			}
		}
		// As a reader gets it: from report.json.
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		return &back
	}
	if v := VerifyReport(signed(), ring); !v.OK || v.Runs != 4 || v.Heads != 3 || v.Problems != nil {
		t.Fatalf("an untouched report: %+v", v)
	}
	for _, tc := range []struct {
		name   string
		tamper func(r *Report)
		want   string
	}{
		{"a head moved", func(r *Report) { r.Tasks[0].Runs[0].Head++ }, "task flaky try 1 (session s1): head 9 h1: "},
		{"a hash changed", func(r *Report) { r.Tasks[0].Runs[1].HeadHash = "h9" }, "task flaky try 2 (session s2): head 9 h9: "},
		{"another session's head", func(r *Report) { r.Tasks[0].Runs[0].Session = "s2" }, "task flaky try 1 (session s2): head 8 h1: "},
		{"signed by another key", func(r *Report) {
			run := &r.Tasks[1].Runs[0]
			run.HeadSig, _ = other.Sign(run.Session, run.Head, run.HeadHash)
		}, "task stuck try 1 (session s3): head 3 h3: "},
		{"no signature", func(r *Report) { r.Tasks[1].Runs[0].HeadSig, r.Tasks[1].Runs[0].Fault = "", "unreachable" }, "task stuck try 1 (session s3): no signed head: unreachable"},
		{"a chain the ledger found broken", func(r *Report) { r.Tasks[0].Runs[0].Verified, r.Tasks[0].Runs[0].Fault = false, "seq 3: bad" }, "the ledger did not find its chain whole when the run ended: seq 3: bad"},
		{"a failure turned into a pass", func(r *Report) { r.Tasks[0].Runs[1].Passed, r.Tasks[0].Runs[1].Failure = true, nil }, "task flaky: its summary is not what its runs give"},
		{"a summary edited", func(r *Report) { r.Tasks[1].Summary.PassAt1 = 1 }, "task stuck: its summary is not what its runs give"},
		{"the overall edited", func(r *Report) { r.Overall.PassHatK = 1 }, "the overall summary is not what the tasks give"},
		{"not a report", func(r *Report) { r.Format = "" }, `format "", want rath.eval.report.v1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := signed()
			tc.tamper(r)
			v := VerifyReport(r, ring)
			if v.OK || !strings.Contains(strings.Join(v.Problems, "\n"), tc.want) {
				t.Errorf("problems %q, want one containing %q", v.Problems, tc.want)
			}
		})
	}
}
