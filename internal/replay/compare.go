package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Pair is a branch of the original tree and its counterpart in the replay
// (nil when the replay has none, or the original when Original is nil).
type Pair struct {
	Pos      string `json:"pos"`
	Original string `json:"original,omitempty"`
	Replay   string `json:"replay,omitempty"`
}

// Divergence is where a replay first differs from the original.
type Divergence struct {
	Pair
	// Seq is the sequence of the original event (of the replayed one when
	// the original has none there).
	Seq uint64 `json:"seq"`
	// What: "differs", "missing" (the replay has no such event), "extra"
	// (the original has none), "branch missing", "extra branch".
	What     string `json:"what"`
	Got      *Event `json:"original_event,omitempty"`
	Replayed *Event `json:"replayed_event,omitempty"`
	// Diff is a readable difference of the two events' normalised forms.
	Diff string `json:"diff,omitempty"`
}

// Result is a comparison of two trees.
type Result struct {
	Pairs []Pair `json:"branches"`
	// Identical counts the original's events the replay reproduced.
	Identical int         `json:"identical"`
	First     *Divergence `json:"first_divergence,omitempty"`
}

// Options tune Compare.
type Options struct {
	// Finished says the replay ran to its end: an event of the original
	// that the replay lacks counts then even in a branch the replay left
	// open (a replay stopped early counts it only in closed branches).
	Finished bool
}

// Compare pairs the branches of the original and the replay by lineage
// position (root with root; the i-th fork of a branch at sequence N with
// the i-th fork of its counterpart at N) and compares each pair's events
// in normalised form. The events of different producers (sources) that no
// causality orders, such as the worker ending a turn while the tool runner
// starts its calls, may interleave differently in two runs: each
// producer's events are compared in order, not their interleaving. The
// first divergence is the earliest by branch (tree order of the original)
// and then sequence.
func Compare(orig, repl *Tree, opt Options) Result {
	no, nr := Normalise(orig, repl), Normalise(repl, orig)
	var res Result
	var divs []Divergence
	var walk func(o, r *Branch, pos string)
	walk = func(o, r *Branch, pos string) {
		p := Pair{Pos: pos}
		if o != nil {
			p.Original = o.ID
		}
		if r != nil {
			p.Replay = r.ID
		}
		res.Pairs = append(res.Pairs, p)
		switch {
		case r == nil:
			divs = append(divs, Divergence{Pair: p, Seq: o.ForkSeq + 1, What: "branch missing"})
			return
		case o == nil:
			divs = append(divs, Divergence{Pair: p, Seq: r.ForkSeq + 1, What: "extra branch"})
			return
		}
		same, d := compareBranch(no[o.ID], nr[r.ID], o.Closed(), r.Closed() || opt.Finished)
		res.Identical += same
		if d != nil {
			d.Pair = p
			divs = append(divs, *d)
		}
		for _, c := range pairChildren(o.Children, r.Children) {
			cpos := pos + "." + fmt.Sprint(c.i)
			walk(c.o, c.r, cpos)
		}
	}
	walk(orig.Root, repl.Root, "root")
	order := map[string]int{}
	for i, p := range res.Pairs {
		order[p.Pos] = i
	}
	if len(divs) > 0 {
		d := slices.MinFunc(divs, func(a, b Divergence) int {
			return cmp.Or(cmp.Compare(order[a.Pos], order[b.Pos]), cmp.Compare(a.Seq, b.Seq))
		})
		res.First = &d
	}
	return res
}

type childPair struct {
	i    int
	o, r *Branch
}

// pairChildren pairs forks at the same fork point in order.
func pairChildren(os, rs []*Branch) []childPair {
	var out []childPair
	used := make([]bool, len(rs))
	at := map[uint64]int{} // forks seen at each point so far, in the original
	for _, o := range os {
		k := at[o.ForkSeq]
		at[o.ForkSeq]++
		var match *Branch
		n := 0
		for j, r := range rs {
			if r.ForkSeq != o.ForkSeq {
				continue
			}
			if n == k {
				match, used[j] = r, true
				break
			}
			n++
		}
		out = append(out, childPair{o: o, r: match})
	}
	for j, r := range rs {
		if !used[j] {
			out = append(out, childPair{r: r})
		}
	}
	for i := range out {
		out[i].i = i + 1
	}
	return out
}

// compareBranch compares two branches' events producer by producer and
// returns how many of the original's are reproduced and the earliest
// divergence. A missing event counts only if the replay branch is
// complete; an extra one only if the original is closed.
func compareBranch(o, r []Event, origClosed, replComplete bool) (int, *Divergence) {
	bySource := func(evs []Event) map[string][]Event {
		m := map[string][]Event{}
		for _, e := range evs {
			m[e.Source] = append(m[e.Source], e)
		}
		return m
	}
	os, rs := bySource(o), bySource(r)
	sources := slices.Sorted(maps.Keys(os))
	for s := range rs {
		if _, ok := os[s]; !ok {
			sources = append(sources, s)
		}
	}
	same := 0
	var first *Divergence
	keep := func(d Divergence) {
		if first == nil || d.Seq < first.Seq {
			first = &d
		}
	}
	for _, s := range sources {
		a, b := os[s], rs[s]
		for i := range max(len(a), len(b)) {
			switch {
			case i >= len(b):
				if replComplete {
					e := a[i]
					keep(Divergence{Seq: e.Seq, What: "missing", Got: &e})
				}
			case i >= len(a):
				if origClosed {
					e := b[i]
					keep(Divergence{Seq: e.Seq, What: "extra", Replayed: &e})
				}
			case equal(a[i], b[i]):
				same++
				continue
			default:
				x, y := a[i], b[i]
				keep(Divergence{Seq: x.Seq, What: "differs", Got: &x, Replayed: &y, Diff: DiffEvents(x, y)})
			}
			break // the rest of this producer's events follow from the first difference
		}
	}
	return same, first
}

func equal(a, b Event) bool {
	return a.Type == b.Type && a.Source == b.Source && reflect.DeepEqual(a.Data, b.Data)
}

// DiffEvents is a readable difference of two normalised events: one line
// per differing field ("- path: original", "+ path: replayed"), long texts
// as a line diff of their differing middle.
func DiffEvents(a, b Event) string {
	var out strings.Builder
	if a.Type != b.Type {
		fmt.Fprintf(&out, "- type: %s\n+ type: %s\n", a.Type, b.Type)
	}
	if a.Source != b.Source {
		fmt.Fprintf(&out, "- source: %s\n+ source: %s\n", a.Source, b.Source)
	}
	fa, fb := map[string]any{}, map[string]any{}
	flatten("data", a.Data, fa)
	flatten("data", b.Data, fb)
	paths := slices.Sorted(maps.Keys(fa))
	for p := range fb {
		if _, ok := fa[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		x, okx := fa[p]
		y, oky := fb[p]
		if okx && oky && reflect.DeepEqual(x, y) {
			continue
		}
		xs, xText := x.(string)
		ys, yText := y.(string)
		if xText && yText && (strings.Contains(xs, "\n") || strings.Contains(ys, "\n")) {
			fmt.Fprintf(&out, "  %s:\n%s", p, lineDiff(xs, ys))
			continue
		}
		if okx {
			fmt.Fprintf(&out, "- %s: %s\n", p, show(x))
		}
		if oky {
			fmt.Fprintf(&out, "+ %s: %s\n", p, show(y))
		}
	}
	return out.String()
}

func flatten(path string, v any, out map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			out[path] = v
		}
		for k, e := range v {
			flatten(path+"."+k, e, out)
		}
	case []any:
		if len(v) == 0 {
			out[path] = v
		}
		for i, e := range v {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	default:
		out[path] = v
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// lineDiff shows the lines between the common head and tail of two texts.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	head := 0
	for head < len(x) && head < len(y) && x[head] == y[head] {
		head++
	}
	tail := 0
	for tail < len(x)-head && tail < len(y)-head && x[len(x)-1-tail] == y[len(y)-1-tail] {
		tail++
	}
	var out strings.Builder
	if head > 0 {
		fmt.Fprintf(&out, "    @@ line %d @@\n", head+1)
	}
	for _, l := range x[head : len(x)-tail] {
		fmt.Fprintf(&out, "    -%s\n", l)
	}
	for _, l := range y[head : len(y)-tail] {
		fmt.Fprintf(&out, "    +%s\n", l)
	}
	return out.String()
}
