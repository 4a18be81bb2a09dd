package dossier

import (
	"errors"
	"fmt"
	"slices"

	"github.com/openrath/rath/pkg/events"
)

// ErrNoStep is returned (wrapped) when a question names a step or turn the
// branch's logical log does not have.
var ErrNoStep = errors.New("no such step")

// ErrNoBranch is returned (wrapped) when a question names a branch the
// dossier does not hold.
var ErrNoBranch = errors.New("no such branch")

// A step is a sequence number of a branch's logical log (its ancestry's
// events up to the fork point, then its own): the rathseq that `rath log`
// prints. A turn number counts the rath.agent.turn.requested events of the
// same logical log from 1.

// StepTurn is an agent turn on a branch's logical log.
type StepTurn struct {
	Number int    `json:"number"`
	TurnID string `json:"turn_id"`
	Agent  string `json:"agent"`
	// From is the request's sequence; To the end's (0: still in flight).
	From uint64 `json:"from"`
	To   uint64 `json:"to,omitempty"`
}

// RecallAnswer answers "which memory items were recalled at step N (or in
// turn K) of a branch, and why".
type RecallAnswer struct {
	Branch string `json:"branch"`
	// Step and StepType: the step asked for and its event type (0 and ""
	// when a turn was asked for).
	Step     uint64    `json:"step,omitempty"`
	StepType string    `json:"step_type,omitempty"`
	Turn     *StepTurn `json:"turn,omitempty"`
	// Decision is the selector decision that routed the turn.
	Decision *Decision `json:"decision,omitempty"`
	Recalls  []Recall  `json:"recalls"`
}

// Recall is one memory.recalled event with, for each item, the write of the
// recalled version when the session graph holds it (its provenance).
type Recall struct {
	Memory
	Written []*Memory `json:"written"`
}

// Recalled answers which memory items were recalled at step seq of branch:
// the recall stored at seq if that is a rath.memory.recalled event, else
// every recall of the agent turn in flight at seq (by turn ID, or by
// position within the turn when a recall names none).
func (d *Dossier) Recalled(branch string, seq uint64) (RecallAnswer, error) {
	if err := d.hasBranch(branch); err != nil {
		return RecallAnswer{}, err
	}
	e, ok := d.tree.Event(branch, seq)
	if !ok {
		return RecallAnswer{}, fmt.Errorf("%w: branch %s has no sequence %d (head %d)", ErrNoStep, branch, seq, d.tree.head(branch).Seq)
	}
	a := RecallAnswer{Branch: branch, Step: seq, StepType: e.Type, Recalls: []Recall{}}
	if e.Type == events.TypeMemoryRecalled {
		for _, m := range d.onPath(branch) {
			if m.Kind == MemoryRecalled && m.Branch == e.Session && m.Seq == e.Seq {
				a.Recalls = append(a.Recalls, d.recall(m))
			}
		}
		if t := d.turnAt(branch, seq); t != nil {
			a.Turn, a.Decision = t, d.routed(branch, t.TurnID)
		}
		return a, nil
	}
	if t := d.turnAt(branch, seq); t != nil {
		a.Turn, a.Decision = t, d.routed(branch, t.TurnID)
		a.Recalls = d.turnRecalls(branch, t)
	}
	return a, nil
}

// RecalledInTurn answers which memory items were recalled in turn number n
// of branch's logical log.
func (d *Dossier) RecalledInTurn(branch string, n int) (RecallAnswer, error) {
	if err := d.hasBranch(branch); err != nil {
		return RecallAnswer{}, err
	}
	turns := d.LogTurns(branch)
	if n < 1 || n > len(turns) {
		return RecallAnswer{}, fmt.Errorf("%w: branch %s has no turn %d (%d turns)", ErrNoStep, branch, n, len(turns))
	}
	t := turns[n-1]
	return RecallAnswer{Branch: branch, Turn: &t, Decision: d.routed(branch, t.TurnID), Recalls: d.turnRecalls(branch, &t)}, nil
}

func (d *Dossier) hasBranch(id string) error {
	if d.tree == nil {
		return errors.New("the dossier holds no events")
	}
	if d.tree.Branch(id) == nil {
		return fmt.Errorf("%w: the dossier holds no branch %s", ErrNoBranch, id)
	}
	return nil
}

// LogTurns lists the agent turns of branch's logical log in order: each
// request, numbered, and the first end of it after (the fold records them).
func (d *Dossier) LogTurns(branch string) []StepTurn { return slices.Clone(d.turns[branch]) }

// turnAt is the turn in flight at seq (request..end inclusive).
func (d *Dossier) turnAt(branch string, seq uint64) *StepTurn {
	turns := d.LogTurns(branch)
	for i := len(turns) - 1; i >= 0; i-- {
		t := turns[i]
		if seq >= t.From && (t.To == 0 || seq <= t.To) {
			return &t
		}
	}
	return nil
}

func (d *Dossier) turnRecalls(branch string, t *StepTurn) []Recall {
	out := []Recall{}
	for _, m := range d.onPath(branch) {
		if m.Kind != MemoryRecalled {
			continue
		}
		in := m.Seq >= t.From && (t.To == 0 || m.Seq <= t.To)
		if m.TurnID == t.TurnID || m.TurnID == "" && in {
			out = append(out, d.recall(m))
		}
	}
	return out
}

// onPath lists the memory events of branch's logical log.
func (d *Dossier) onPath(branch string) []Memory {
	var out []Memory
	for _, seg := range d.tree.Path(branch) {
		for _, m := range d.Memory {
			if m.Branch == seg.Session && m.Seq >= seg.From && m.Seq <= seg.To {
				out = append(out, m)
			}
		}
	}
	return out
}

func (d *Dossier) recall(m Memory) Recall {
	r := Recall{Memory: m, Written: make([]*Memory, len(m.Items))}
	for i, it := range m.Items {
		for j := range d.Memory {
			w := &d.Memory[j]
			if w.Kind == MemoryWritten && w.ItemID == it.ItemID && w.Version == it.Version {
				r.Written[i] = w
				break
			}
		}
	}
	return r
}

// routed is the decision of branch's logical log that routed turn id.
func (d *Dossier) routed(branch, id string) *Decision {
	for _, dec := range d.decisionsOnPath(branch) {
		if id != "" && dec.TurnID == id {
			return &dec
		}
	}
	return nil
}

func (d *Dossier) decisionsOnPath(branch string) []Decision {
	var out []Decision
	for _, seg := range d.tree.Path(branch) {
		for _, dec := range d.Decisions {
			if dec.Branch == seg.Session && dec.Seq >= seg.From && dec.Seq <= seg.To {
				out = append(out, dec)
			}
		}
	}
	return out
}

// RouteAnswer answers "why did the selector take route R at step N".
type RouteAnswer struct {
	Branch   string `json:"branch"`
	Step     uint64 `json:"step,omitempty"`
	StepType string `json:"step_type,omitempty"`
	Route    string `json:"route,omitempty"`
	// InForce: step N is not a decision; Decisions holds the last decision
	// at or before it (the one in force).
	InForce   bool       `json:"in_force,omitempty"`
	Decisions []Decision `json:"decisions"`
	// Other is the decision at (or in force at) the step when its route is
	// not the one asked for.
	Other *Decision `json:"other,omitempty"`
}

// Route answers why the selector took a route on branch's logical log. With
// step > 0: the rath.selector.decided event at that step, or, when the step
// is another event, the last decision before it (InForce); with route set
// too, it must be that decision's route (else Decisions is empty and Other
// names the decision). With step 0: every decision whose route is route.
func (d *Dossier) Route(branch string, step uint64, route string) (RouteAnswer, error) {
	if err := d.hasBranch(branch); err != nil {
		return RouteAnswer{}, err
	}
	a := RouteAnswer{Branch: branch, Step: step, Route: route, Decisions: []Decision{}}
	decs := d.decisionsOnPath(branch)
	if step == 0 {
		for _, dec := range decs {
			if dec.Route == route {
				a.Decisions = append(a.Decisions, dec)
			}
		}
		return a, nil
	}
	e, ok := d.tree.Event(branch, step)
	if !ok {
		return RouteAnswer{}, fmt.Errorf("%w: branch %s has no sequence %d (head %d)", ErrNoStep, branch, step, d.tree.head(branch).Seq)
	}
	a.StepType = e.Type
	var found *Decision
	for i := range decs {
		if decs[i].Seq <= step {
			found = &decs[i]
		}
	}
	if found == nil {
		return a, nil
	}
	a.InForce = found.Seq != step
	if route != "" && found.Route != route {
		a.Other = found
		return a, nil
	}
	a.Decisions = append(a.Decisions, *found)
	return a, nil
}

// FileChange is a tool call whose diff changes a file.
type FileChange struct {
	ToolCall
	// FileDiff is the part of the call's diff that changes the file.
	FileDiff       string `json:"file_diff"`
	OnAcceptedPath bool   `json:"on_accepted_path"`
}

// ModifiedFile lists every tool call of the tree whose diff changes file
// (the path as the diff names it, or a trailing part of it: "calc.go"
// matches "pkg/calc/calc.go"), in branch and sequence order.
func (d *Dossier) ModifiedFile(file string) []FileChange {
	out := []FileChange{}
	path := map[string][2]uint64{}
	if d.Final != nil && d.tree != nil {
		for _, seg := range d.tree.Path(d.Final.Branch) {
			path[seg.Session] = [2]uint64{seg.From, seg.To}
		}
	}
	for _, t := range d.ToolCalls {
		hit := false
		for _, f := range t.Files {
			hit = hit || MatchFile(f, file)
		}
		if !hit {
			continue
		}
		c := FileChange{ToolCall: t, FileDiff: FileDiff(fullDiff(d, t), file)}
		if r, ok := path[t.Branch]; ok && t.Seq >= r[0] && t.Seq <= r[1] {
			c.OnAcceptedPath = true
		}
		out = append(out, c)
	}
	return out
}

// PathUsage is the token usage of branch's logical log (its ancestry's
// events up to each fork point and its own, each once), by segment, and of
// what merges took into it, apart. branch "" means the final branch.
func (d *Dossier) PathUsage(branch string) (*PathUsage, error) {
	if branch == "" {
		if d.Final == nil {
			return nil, fmt.Errorf("%w: no branch produced a final answer; name one", ErrNoBranch)
		}
		branch = d.Final.Branch
	}
	if err := d.hasBranch(branch); err != nil {
		return nil, err
	}
	f := newFold(d.tree, branch, d.tree.blobs)
	f.run()
	return f.pathUsage(), nil
}
