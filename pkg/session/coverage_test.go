package session_test

import (
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Coverage says how a state holds an event: through its own log or fork
// ancestry (to the fork point), through a merge, or not at all.
func TestCoverage(t *testing.T) {
	st := fold(stored(t, "p", 1, &events.SessionStarted{}), stored(t, "p", 2, &events.ChunkAppended{}),
		stored(t, "c", 3, &events.SessionForked{Parent: "p", AtSeq: 2}))
	session.ApplyMerged(st, stored(t, "x", 7, &events.ChunkAppended{}))
	session.ApplyMerged(st, stored(t, "x", 8, &events.ChunkAppended{}))
	for _, tc := range []struct {
		id   string
		seq  uint64
		want session.Coverage
	}{
		{"p", 1, session.CoveredByPath}, {"p", 2, session.CoveredByPath}, {"p", 3, session.NotCovered},
		{"c", 3, session.CoveredByPath}, {"c", 40, session.CoveredByPath}, {"c", 2, session.NotCovered},
		{"x", 7, session.CoveredByMerge}, {"x", 8, session.CoveredByMerge}, {"x", 6, session.NotCovered}, {"x", 9, session.NotCovered},
	} {
		if got := st.Coverage(tc.id, tc.seq); got != tc.want || st.Covers(tc.id, tc.seq) != (tc.want != session.NotCovered) {
			t.Errorf("coverage of %s %d: %v, want %v", tc.id, tc.seq, got, tc.want)
		}
	}
	if len(st.Lineage.Merged) != 1 {
		t.Errorf("merged runs %v: adjacent events make one run", st.Lineage.Merged)
	}
}
