package replay

import (
	"github.com/openrath/rath/pkg/events"
)

// Diverge compares what two runs of the same work appended after a point
// they share: a, the events of session ida after it, and b, those of idb.
// Each side is normalised on its own, as a replay's comparison does, and
// pairs are compared in order by type and data, not by producer. It
// returns the index of the first pair that differs (one side ending before
// the other counts), or -1 when both sides are the same.
func Diverge(ida string, a []events.Stored, idb string, b []events.Stored) int {
	norm := func(id string, evs []events.Stored) []Event {
		return Normalise(&Tree{Branches: []*Branch{{ID: id, Pos: "run", Events: evs}}})[id]
	}
	na, nb := norm(ida, a), norm(idb, b)
	for i := range max(len(na), len(nb)) {
		if i >= len(na) || i >= len(nb) {
			return i
		}
		x, y := na[i], nb[i]
		x.Source, y.Source = "", ""
		if !equal(x, y) {
			return i
		}
	}
	return -1
}
