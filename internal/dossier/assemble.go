package dossier

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// SuccessOutcomes are the close outcomes (compared without case) that count
// as a successful end for Final.
var SuccessOutcomes = []string{"succeeded", "success", "passed", "accepted", "done", "completed", "ok", "resolved", "fixed"}

// Successful reports whether a close outcome is one of SuccessOutcomes.
func Successful(outcome string) bool {
	return slices.ContainsFunc(SuccessOutcomes, func(s string) bool { return strings.EqualFold(s, outcome) })
}

// Assemble derives a dossier from the own stored events of every branch of
// a tree (in sequence order) and the blobs they reference (may be nil). It
// sets everything but ExportedAt, Environment and Blobs. session is the
// session the dossier is about; its tree's root comes first.
func Assemble(session string, own map[string][]events.Stored, blobs map[string][]byte) (*Dossier, error) {
	t, err := newTree(session, own)
	if err != nil {
		return nil, err
	}
	return assemble(session, t, blobs)
}

func assemble(id string, t *tree, blobs map[string][]byte) (*Dossier, error) {
	if t.Branch(id) == nil {
		return nil, fmt.Errorf("the dossier holds no branch %s", id)
	}
	d := &Dossier{
		Schema: FileSchema, Format: Format, Session: id, Root: t.RootOf(id),
		Branches: []Branch{}, Turns: []Turn{}, ToolCalls: []ToolCall{}, Sandboxes: []Placement{},
		Memory: []Memory{}, Validations: []Validation{}, Decisions: []Decision{}, Acts: []Act{},
		Usage: UsageReport{ByBranch: map[string]session.Usage{}},
		tree:  t, turns: map[string][]StepTurn{},
	}
	if st := t.Branch(d.Root).Start; st != nil {
		d.Task = st.Task
		if st.Workflow != "" || st.WorkflowHash != "" || st.WorkflowRef != "" {
			d.Workflow = &Workflow{Name: st.Workflow, Hash: st.WorkflowHash, Ref: st.WorkflowRef}
		}
	}
	var candidates []candidate
	paths := map[string]*PathUsage{}
	index := map[string]int{}
	for _, tb := range t.Branches() {
		id := tb.ID
		f := newFold(t, id, blobs)
		f.run()
		index[id] = len(d.Branches)
		d.Branches = append(d.Branches, f.branch)
		d.Turns = append(d.Turns, f.turnRecords()...)
		d.ToolCalls = append(d.ToolCalls, f.toolRecords()...)
		d.Sandboxes = append(d.Sandboxes, f.placements...)
		d.Memory = append(d.Memory, f.memory...)
		d.Validations = append(d.Validations, f.validations...)
		d.Experiments = append(d.Experiments, f.experiments...)
		d.Decisions = append(d.Decisions, f.decisions...)
		d.Acts = append(d.Acts, f.acts...)
		d.turns[id] = f.steps
		d.Interventions = append(d.Interventions, f.people.interventions...)
		d.Work = append(d.Work, f.people.work...)
		d.Usage.ByBranch[id] = f.branch.Usage
		d.Usage.Total.Merge(f.branch.Usage)
		candidates = append(candidates, f.candidates...)
		paths[id] = f.pathUsage()
	}
	for i := range d.Branches {
		b := &d.Branches[i]
		for _, m := range b.Merges {
			for _, s := range uniqueSessions(m.Segments) {
				if j, ok := index[s]; ok && s != b.ID {
					d.Branches[j].MergedInto = append(d.Branches[j].MergedInto, MergeOut{Target: b.ID, Seq: m.Seq})
				}
			}
		}
		if b.Parent != "" {
			p := &d.Branches[index[b.Parent]]
			p.Children = append(p.Children, b.ID)
		}
	}
	names := BranchNames(d.Branches)
	for i := range d.Branches {
		d.Branches[i].Name = names[d.Branches[i].ID]
	}
	d.Final = decideFinal(candidates)
	if d.Final != nil {
		d.Usage.AcceptedPath = paths[d.Final.Branch]
		for _, seg := range t.Path(d.Final.Branch) {
			d.Branches[index[seg.Session]].OnAcceptedPath = true
		}
	}
	for i := range d.Branches {
		setVerdict(&d.Branches[i], d.Final, d.Validations)
	}
	return d, nil
}

func uniqueSessions(segs []events.Segment) []string {
	var out []string
	for _, s := range segs {
		if !slices.Contains(out, s.Session) {
			out = append(out, s.Session)
		}
	}
	return out
}

// candidate is a branch closed with a successful outcome.
type candidate struct {
	close   At
	outcome string
	reason  string
	last    *Validation // the last validation before the close
}

func decideFinal(cs []candidate) *Final {
	var ok []candidate
	for _, c := range cs {
		if c.last == nil || c.last.Passed {
			ok = append(ok, c)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	slices.SortStableFunc(ok, func(a, b candidate) int {
		return cmp.Or(
			cmp.Compare(boolInt(b.last != nil), boolInt(a.last != nil)), // validated first
			b.close.Time.Compare(a.close.Time),                          // latest close first
			cmp.Compare(b.close.Seq, a.close.Seq),
			cmp.Compare(a.close.Branch, b.close.Branch))
	})
	best := ok[0]
	f := &Final{Branch: best.close.Branch, Outcome: best.outcome, Reason: best.reason, Close: best.close,
		Validated: best.last != nil, Validation: best.last}
	for _, c := range ok[1:] {
		if (c.last != nil) == f.Validated {
			f.Others = append(f.Others, c.close.Branch)
		}
	}
	return f
}

func setVerdict(b *Branch, final *Final, vs []Validation) {
	var last *Validation
	for i := range vs {
		if vs[i].Branch == b.ID {
			last = &vs[i]
		}
	}
	switch {
	case final != nil && final.Branch == b.ID:
		b.Verdict = VerdictAccepted
		if final.Validation != nil {
			b.VerdictReason = fmt.Sprintf("closed %s after %s passed (seq %d)", final.Outcome, final.Validation.Validator, final.Validation.Seq)
		} else {
			b.VerdictReason = fmt.Sprintf("closed %s; no validation ran", final.Outcome)
		}
	case last != nil && !last.Passed:
		b.Verdict = VerdictRejected
		b.VerdictReason = fmt.Sprintf("validation %s failed at seq %d: %s", last.Validator, last.Seq, last.Reason)
	case b.ClosedSeq != 0 && strings.EqualFold(b.Outcome, "superseded"):
		b.Verdict, b.VerdictReason = VerdictSuperseded, b.CloseReason
	case b.ClosedSeq != 0:
		b.Verdict = VerdictClosed
		b.VerdictReason = strings.TrimSpace(b.Outcome + ": " + b.CloseReason)
		if b.CloseReason == "" {
			b.VerdictReason = b.Outcome
		}
	default:
		b.Verdict = VerdictOpen
	}
}

// at places a stored event.
func at(e events.Stored) At {
	return At{Branch: e.Session, Seq: e.Seq, EventID: e.ID, Time: e.Time}
}
