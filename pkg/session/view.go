package session

import (
	"maps"
	"slices"
)

// View returns a copy of s that later folds into s (and changes to the copy)
// do not affect, in time proportional to the maps of s (tool calls, pending
// work, approvals, usage keys), not to its transcript: the slices that Apply
// only ever appends to (chunks, compactions, decisions, validations, memory,
// merges) are shared up to their current length, capped so that an append to
// either side allocates anew. Neither s nor the copy may change an element of
// those slices in place; everything Apply changes in place is copied.
// Tool call entries are shared the same way: Apply replaces an entry,
// never changes one in place, and neither may a holder of a copy, so a
// copy costs a map of pointers rather than a copy of every call (issue 32:
// that copy, twice per event in the selector, made a session's cost grow
// with its tool calls).
// TestViewIsIndependent checks Apply against that rule for every kind.
func (s *State) View() *State {
	c := *s
	c.Labels = maps.Clone(s.Labels)
	c.Lineage.Path = slices.Clone(s.Lineage.Path)
	c.Lineage.Merged = slices.Clone(s.Lineage.Merged) // cover extends its last run in place
	c.Lineage.Merges = slices.Clip(s.Lineage.Merges)
	c.Chunks = slices.Clip(s.Chunks)
	c.Compactions = slices.Clip(s.Compactions)
	c.Decisions = slices.Clip(s.Decisions)
	c.Validations = slices.Clip(s.Validations)
	c.Experiments = slices.Clip(s.Experiments)
	c.Memory = slices.Clip(s.Memory)
	if s.Archive != nil {
		a := *s.Archive // a purge sets PurgedSeq in place
		c.Archive = &a
	}
	c.Usage.ByAgent = maps.Clone(s.Usage.ByAgent)
	c.Usage.ByModel = maps.Clone(s.Usage.ByModel)
	c.Counts.TurnsByAgent = maps.Clone(s.Counts.TurnsByAgent)
	c.Pending = maps.Clone(s.Pending)
	c.Approvals = maps.Clone(s.Approvals)
	c.Tools = maps.Clone(s.Tools) // Apply replaces an entry, never changes one in place
	// Sandbox and Turn are replaced by Apply, never changed in place.
	return &c
}
