package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Event is a stored event in normalised form: what two runs of the same
// work must agree on.
type Event struct {
	// Seq is the event's sequence in its run (kept for reports; not
	// compared).
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"`
	Source string `json:"source"`
	// Data is the event's data with run-specific values masked or renamed.
	Data any `json:"data,omitempty"`
}

// Masked replaces the value of every data field (at any depth) whose name
// is a key here: values that differ between runs of the same work.
var Masked = map[string]bool{
	"latency_ms":    true, // model call latency
	"duration_ms":   true, // tool call duration
	"retry_in_ms":   true, // backoff of a failed model attempt
	"parent_hash":   true, // a fork's parent event hash
	"request_ref":   true, // wire bodies: a recorded answer has none
	"response_ref":  true,
	"workflow_ref":  true, // the bundle (a replay may run a modified one)
	"workflow_hash": true,
	"host":          true, // sandbox placement
	"workspace":     true,
	// A recall's ranking scores depend on every item in the memory store;
	// a replay's private store holds only what the tree recalled and wrote.
	"score": true,
	// The trigger's sequence in a decision's inputs depends on how the
	// producers' events interleaved (a selector's memory decision and a
	// tool runner's result race for the same sequence); the decision's
	// causation names the trigger, and is compared.
	"event.seq": true,
	// Deadlines of approvals are the time of the answer plus the gate's
	// timeout (ADR 0026): another run, another time.
	"deadline":          true,
	"escalate_deadline": true,
	"next_deadline":     true,
}

// MaskedValue stands for a masked field's value.
const MaskedValue = "<masked>"

// Run-specific tokens inside strings. Each distinct value is renamed by its
// first appearance, per kind ("<commit#3>"), so two runs compare equal when
// their values follow the same pattern of equalities.
var tokens = []struct {
	kind string
	re   *regexp.Regexp
}{
	{"turn", regexp.MustCompile(`turn-[0-9a-f]{8}\b`)},
	{"id", regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)},
	{"commit", regexp.MustCompile(`\b[0-9a-f]{40}\b`)},
	// Deadlines quoted in texts: an expired call's result, a wall-time close.
	{"time", regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b`)},
	// A call's control group, named in its limits: the runner's pid and a
	// count (sandbox/cgroup.go).
	{"cgroup", regexp.MustCompile(`\brath-calls/\d+-\d+\b`)},
}

// replaceWhole replaces id in s where it stands as a whole session ID: not
// inside a longer run of the characters IDs are made of, so that session
// "fix" leaves the workflow name "fix-calc" alone (it was "<root>-calc",
// and a replay reported a divergence that was not there).
func replaceWhole(s, id, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, id)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(id)
		if (i > 0 && idByte(s[i-1])) || (end < len(s) && idByte(s[end])) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(with)
		s = s[end:]
	}
}

// idByte reports whether c can be part of a session ID (events.ValidateSessionID).
func idByte(c byte) bool {
	return c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// durations in tool output (go test's "0.004s", "(cached)") vary by run.
var durations = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m)\b|\(cached\)`)

// Duration stands for a duration in tool output.
const Duration = "<duration>"

// Normalise returns the normalised events of every branch of t, by session
// ID, in sequence order. Session IDs in the data become their
// branch's position ("<root.1>"); workspace paths "<workspace>"; the
// fields of Masked "<masked>"; event IDs, turn IDs and git commits are
// renamed by first appearance, in an order that does not depend on how
// the producers' events interleaved: branches in tree order, then each
// producer (source) in turn, then sequence.
//
// Session IDs in text are replaced where they stand whole (session "fix"
// leaves "fix-calc" alone); sandbox IDs ("<backend>-<session>") are
// renamed whole. The IDs of the trees in also are replaced too: comparing
// an original with its replay, each side's text is normalised with both
// sides' IDs, so that a word that happens to be the original's session ID
// ("I will fix Add.") reads the same on both sides.
func Normalise(t *Tree, also ...*Tree) map[string][]Event {
	n := &normaliser{renames: map[string]string{}, counts: map[string]int{}}
	for _, b := range slices.Concat(t.Branches, branchesOf(also)) {
		n.literal = append(n.literal, [2]string{b.ID, "<" + b.Pos + ">"})
		for _, be := range events.Backends() {
			n.literal = append(n.literal, [2]string{be + "-" + b.ID, "<sandbox " + be + "-" + b.Pos + ">"})
		}
	}
	for _, b := range t.Branches {
		for _, e := range b.Events {
			if e.Type != events.TypeSandboxPlaced {
				continue
			}
			var p events.SandboxPlaced
			if json.Unmarshal(e.Data, &p) == nil && p.Workspace != "" {
				n.literal = append(n.literal, [2]string{p.Workspace, "<workspace>"})
			}
			if p.Runner != "" {
				// pool/host:root: where the run placed it, not what it did.
				n.literal = append(n.literal, [2]string{p.Runner, "<runner>"})
			}
		}
	}
	// Longest first: a fork's ID extends its parent's.
	slices.SortFunc(n.literal, func(a, b [2]string) int { return cmp.Compare(len(b[0]), len(a[0])) })

	out := map[string][]Event{}
	for _, b := range t.Branches {
		evs := make([]Event, len(b.Events))
		order := make([]int, len(b.Events))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(b.Events[x].Source, b.Events[y].Source) })
		for _, i := range order {
			e := b.Events[i]
			evs[i] = Event{Seq: e.Seq, Type: e.Type, Source: e.Source, Data: n.data(e.Data)}
		}
		out[b.ID] = evs
	}
	return out
}

func branchesOf(trees []*Tree) []*Branch {
	var out []*Branch
	for _, t := range trees {
		out = append(out, t.Branches...)
	}
	return out
}

type normaliser struct {
	// literal are session IDs, replaced where they stand whole, and
	// workspace paths and sandbox IDs, replaced anywhere.
	literal [][2]string
	renames map[string]string
	counts  map[string]int
}

func (n *normaliser) data(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "<undecodable: " + err.Error() + ">"
	}
	return n.value(v)
}

func (n *normaliser) value(v any) any {
	switch v := v.(type) {
	case map[string]any:
		// Keys in order, so renaming numbers do not depend on map order.
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if Masked[k] {
				v[k] = MaskedValue
				continue
			}
			v[k] = n.value(v[k])
		}
		return v
	case []any:
		for i := range v {
			v[i] = n.value(v[i])
		}
		return v
	case string:
		return n.text(v)
	}
	return v
}

func (n *normaliser) text(s string) string {
	for _, l := range n.literal {
		if strings.HasPrefix(l[1], "<workspace") || strings.HasPrefix(l[1], "<sandbox ") {
			s = strings.ReplaceAll(s, l[0], l[1])
		} else {
			s = replaceWhole(s, l[0], l[1])
		}
	}
	for _, tk := range tokens {
		s = tk.re.ReplaceAllStringFunc(s, func(m string) string {
			key := tk.kind + "\x00" + m
			if r, ok := n.renames[key]; ok {
				return r
			}
			n.counts[tk.kind]++
			r := fmt.Sprintf("<%s#%d>", tk.kind, n.counts[tk.kind])
			n.renames[key] = r
			return r
		})
	}
	return durations.ReplaceAllString(s, Duration)
}
