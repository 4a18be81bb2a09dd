package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Contrast compares two branches (`rath diff A B`): their events after their
// common ancestor, aligned by sequence; the files their tool calls changed;
// their outcomes and validations; their token usage.
type Contrast struct {
	A, B Side `json:"-"`
	// Common is the last sequence the two logical logs share (the same
	// stored events: a fork shares its parent's prefix); 0 when none.
	Common uint64         `json:"common_seq"`
	Events []EventPair    `json:"events"`
	Files  []FileContrast `json:"files"`
	// SameEvents counts the aligned pairs equal in normalised form.
	SameEvents int `json:"same_events"`
}

// Side is one branch of a Contrast: what it did after the common prefix.
type Side struct {
	Session     string               `json:"session"`
	Head        uint64               `json:"head"`
	Status      string               `json:"status"`
	Outcome     string               `json:"outcome,omitempty"`
	Reason      string               `json:"reason,omitempty"`
	Validations []session.Validation `json:"validations"`
	// Usage is the token usage of the model calls (and usage records) after
	// the common prefix.
	Usage session.Usage `json:"usage"`
	Files []string      `json:"files_changed"`
}

// EventPair is the two branches' events at one sequence after the common
// prefix (A or B nil past that branch's head).
type EventPair struct {
	Seq  uint64 `json:"seq"`
	A    *Brief `json:"a,omitempty"`
	B    *Brief `json:"b,omitempty"`
	Same bool   `json:"same"`
}

// Brief is an event in a line.
type Brief struct {
	Type    string `json:"type"`
	Source  string `json:"source"`
	Summary string `json:"summary,omitempty"`
}

// FileContrast is one file changed by either branch: the diffs of the tool
// calls that changed it, per branch, in order.
type FileContrast struct {
	File  string `json:"file"`
	A     string `json:"a_diff,omitempty"`
	B     string `json:"b_diff,omitempty"`
	Same  bool   `json:"same"`
	Where string `json:"where"` // "both", "a", "b"
}

// MarshalJSON names the sides a and b.
func (c Contrast) MarshalJSON() ([]byte, error) {
	type plain Contrast
	return json.Marshal(struct {
		A Side `json:"a"`
		B Side `json:"b"`
		plain
	}{c.A, c.B, plain(c)})
}

// NewContrast compares the logical logs of sessions a and b.
func NewContrast(a string, la []events.Stored, b string, lb []events.Stored) Contrast {
	c := Contrast{}
	n := 0
	for n < len(la) && n < len(lb) && la[n].ID == lb[n].ID {
		n++
	}
	if n > 0 {
		c.Common = la[n-1].Seq
	}
	ra, rb := la[n:], lb[n:]
	c.A, c.B = side(a, la, ra), side(b, lb, rb)

	// Normalise both rests together, so renamed IDs agree across them.
	t := &Tree{byID: map[string]*Branch{}}
	ba := &Branch{ID: a, Pos: "a", Events: ra}
	bb := &Branch{ID: b, Pos: "b", Events: rb}
	t.Branches = []*Branch{ba, bb}
	norm := Normalise(t)
	na, nb := norm[a], norm[b]
	if a == b {
		nb = na
	}
	for i := range max(len(ra), len(rb)) {
		p := EventPair{}
		if i < len(ra) {
			p.Seq, p.A = ra[i].Seq, brief(ra[i])
		}
		if i < len(rb) {
			p.Seq, p.B = rb[i].Seq, brief(rb[i])
		}
		if i < len(na) && i < len(nb) && equal(na[i], nb[i]) {
			p.Same = true
			c.SameEvents++
		}
		c.Events = append(c.Events, p)
	}

	fa, fb := fileDiffs(ra), fileDiffs(rb)
	files := slices.Sorted(maps.Keys(fa))
	for f := range fb {
		if _, ok := fa[f]; !ok {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	for _, f := range files {
		fc := FileContrast{File: f, A: fa[f], B: fb[f], Same: fa[f] == fb[f]}
		_, ina := fa[f]
		_, inb := fb[f]
		switch {
		case ina && inb:
			fc.Where = "both"
		case ina:
			fc.Where = "a"
		default:
			fc.Where = "b"
		}
		c.Files = append(c.Files, fc)
	}
	return c
}

// ReadContrast reads the logical logs of sessions a and b (each from its
// own tree) and contrasts them.
func ReadContrast(ctx context.Context, c *client.Client, a, b string) (Contrast, error) {
	la, err := logicalLog(ctx, c, a)
	if err != nil {
		return Contrast{}, err
	}
	lb, err := logicalLog(ctx, c, b)
	if err != nil {
		return Contrast{}, err
	}
	return NewContrast(a, la, b, lb), nil
}

func logicalLog(ctx context.Context, c *client.Client, id string) ([]events.Stored, error) {
	t, err := Read(ctx, c, id)
	if err != nil {
		return nil, err
	}
	br := t.Branch(id)
	if br == nil {
		return nil, fmt.Errorf("diff: the tree of %s does not hold it", id)
	}
	return t.Logical(br), nil
}

func side(id string, all, rest []events.Stored) Side {
	s := Side{Session: id, Status: string(session.StatusActive), Validations: []session.Validation{}}
	if len(all) > 0 {
		s.Head = all[len(all)-1].Seq
	}
	// The status is the session fold's (one fold of the catalog, tested
	// against every kind), not a switch of its own. A merge's taken-in
	// events are not read: they change no status.
	st := &session.State{}
	for _, e := range all {
		session.Apply(st, e)
	}
	if st.Status != "" {
		s.Status = string(st.Status)
	}
	s.Outcome, s.Reason = st.Outcome, st.CloseReason
	for _, e := range rest {
		d, err := e.Decode()
		if err != nil {
			continue
		}
		if c, ok := session.CheckOf(d); ok {
			s.Validations = append(s.Validations, session.Validation{Seq: e.Seq, Check: c})
		}
		s.Usage.AddEvent(d)
	}
	s.Files = slices.Sorted(maps.Keys(fileDiffs(rest)))
	if s.Files == nil {
		s.Files = []string{}
	}
	return s
}

// fileDiffs joins, per file, the diffs of the completed tool calls that
// changed it, in order (a diff cut at 16 KiB stays cut: its diff_ref names
// the whole).
func fileDiffs(evs []events.Stored) map[string]string {
	out := map[string]string{}
	for _, e := range evs {
		if e.Type != events.TypeToolCompleted {
			continue
		}
		var d events.ToolCompleted
		if json.Unmarshal(e.Data, &d) != nil || d.Diff == "" {
			continue
		}
		for _, f := range dossier.DiffFiles(d.Diff) {
			out[f] += dossier.FileDiff(d.Diff, f)
		}
	}
	return out
}

// brief is an event in a line, its summary the one every printer shows.
func brief(e events.Stored) *Brief {
	return &Brief{Type: e.Type, Source: e.Source, Summary: events.Summary(e)}
}
