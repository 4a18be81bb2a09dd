package dossier

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// Report is the result of verifying a dossier directory offline.
type Report struct {
	Dir      string `json:"dir"`
	OK       bool   `json:"ok"`
	Session  string `json:"session"`
	Root     string `json:"root"`
	Branches int    `json:"branches"`
	Events   int    `json:"events"`
	// Heads are the verified heads, in branch order (all of them when OK).
	Heads []BranchHead `json:"heads,omitempty"`
	// Keys are the IDs of the keys whose signatures were checked; Pinned
	// says they were the verifier's own, not the dossier's.
	Keys   []string `json:"keys,omitempty"`
	Pinned bool     `json:"pinned"`
	Fault  *Fault   `json:"fault,omitempty"`
}

// BranchHead is a branch's verified head.
type BranchHead struct {
	Session string `json:"session"`
	Head
}

// Verify checks a dossier directory without NATS:
//
//   - each branch's chain, with the chain walker (events.Chain): every stored
//     event's hash recomputed from its body, sequences without gaps, each
//     rathprev the previous event's hash, the events stored under the
//     branch's own session ID;
//   - each fork link: the fork's first event chains onto the parent's hash at
//     the fork point and its data names that parent, point and hash;
//   - each merge's source head, when the dossier holds the source;
//   - each branch's head in dossier.json, and every blob's content hash;
//   - everything else dossier.json says (but the environment and the export
//     time), by deriving it again from the events and comparing.
//
// A dossier that does not hold is reported with Report.Fault naming the first
// bad place (branch and sequence where there is one), not as an error. The
// error is for a directory that holds no readable dossier (ErrNotDossier).
//
// and, since the events are signed:
//
//   - every event's signature (rathsig), with the keys pinned (the ledger's
//     key file: an auditor's own copy) or, when none are, the keys the
//     dossier names;
//   - dossier.md, graph.svg, graph.html and experiments.svg (when it has
//     experiments), rendered again from the verified
//     events and compared byte for byte, so an edited page fails.
func Verify(dir string, pinned events.Keyring) (Report, error) {
	rep, _, err := verify(dir, pinned)
	return rep, err
}

func verify(dir string, pinned events.Keyring) (Report, *Dossier, error) {
	r, err := read(dir)
	if err != nil {
		return Report{}, nil, err
	}
	rep := Report{Dir: dir, Session: r.d.Session, Root: r.d.Root, Branches: len(r.d.Branches)}
	ring, f := keyring(r.d, pinned, &rep)
	if f != nil {
		rep.Fault = f
		return rep, nil, nil
	}
	if f := checkSignatures(r, ring); f != nil {
		rep.Fault = f
		return rep, nil, nil
	}
	if f := checkChains(r, &rep); f != nil {
		rep.Fault = f
		return rep, nil, nil
	}
	t, err := newTree(r.d.Session, r.own)
	if err != nil {
		rep.Fault = &Fault{Reason: err.Error()}
		return rep, nil, nil
	}
	t.blobs = r.blobs
	d, err := assemble(r.d.Session, t, r.blobs)
	if err != nil {
		rep.Fault = &Fault{Reason: err.Error()}
		return rep, nil, nil
	}
	d.Schema, d.ExportedAt, d.Environment, d.Blobs, d.Keys = r.d.Schema, r.d.ExportedAt, r.d.Environment, r.d.Blobs, r.d.Keys
	if f := compare(r.d, d); f != nil {
		rep.Fault = f
		rep.Heads = nil
		return rep, nil, nil
	}
	if f := checkPages(dir, d); f != nil {
		rep.Fault = f
		rep.Heads = nil
		return rep, nil, nil
	}
	rep.OK = true
	return rep, d, nil
}

// checkChains checks hashes, chains, fork links, merge heads, heads and blobs.
func checkChains(r *raw, rep *Report) *Fault {
	forks := map[string]*events.SessionForked{}
	for _, b := range r.d.Branches {
		evs := r.own[b.ID]
		// The one chain walker (events.Chain) checks each link. A root's
		// chain starts from nothing; any other branch's from its first
		// event's claims, which must be a fork record whose parent link is
		// checked below, across branches.
		chain := events.Chain{Session: b.ID}
		for i, e := range evs {
			rep.Events++
			if i == 0 && e.Type != events.TypeSessionStarted {
				chain.Seq, chain.Hash = e.Seq-1, e.Prev
			}
			if want := chain.Seq + 1; i > 0 && e.Seq > want && slices.ContainsFunc(evs[i:], func(x events.Stored) bool { return x.Seq == want }) {
				// The walker sees one event at a time; the dossier holds the
				// branch, so it tells a reordered event from a removed one.
				return &Fault{Session: b.ID, Seq: want, Reason: fmt.Sprintf("expected seq %d, found %d (reordered or duplicated)", want, e.Seq)}
			}
			if err := chain.Link(e); err != nil {
				f := &Fault{Session: b.ID, Seq: e.Seq, Reason: err.Error()}
				if cf, ok := errors.AsType[*events.ChainFault](err); ok {
					f.Seq = cf.Seq
				}
				return f
			}
			switch {
			case i == 0 && e.Type == events.TypeSessionForked:
				var fk events.SessionForked
				if err := json.Unmarshal(e.Data, &fk); err != nil {
					return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("fork record: %v", err)}
				}
				forks[b.ID] = &fk
			case i == 0 && e.Type != events.TypeSessionStarted:
				return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("the branch's first event is a %s, not a start or a fork (events removed?)", e.Type)}
			case i > 0 && (e.Type == events.TypeSessionForked || e.Type == events.TypeSessionStarted):
				return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("a %s inside the log", e.Type)}
			}
		}
	}
	hashAt := func(id string, seq uint64) (string, bool) {
		for range len(r.own) + 1 {
			evs, ok := r.own[id]
			if !ok {
				return "", false
			}
			if seq >= evs[0].Seq {
				i, found := slices.BinarySearchFunc(evs, seq, func(e events.Stored, s uint64) int { return cmp.Compare(e.Seq, s) })
				if !found {
					return "", false
				}
				return evs[i].Hash, true
			}
			fk := forks[id]
			if fk == nil {
				return "", false
			}
			id = fk.Parent
		}
		return "", false
	}
	for _, b := range r.d.Branches {
		fk := forks[b.ID]
		if fk == nil {
			continue
		}
		first := r.own[b.ID][0]
		if _, ok := r.own[fk.Parent]; !ok {
			return &Fault{Session: b.ID, Seq: first.Seq, Reason: fmt.Sprintf("forks from %s, which the dossier does not hold", fk.Parent)}
		}
		h, ok := hashAt(fk.Parent, fk.AtSeq)
		if !ok {
			return &Fault{Session: b.ID, Seq: first.Seq, Reason: fmt.Sprintf("the dossier holds no event %d of %s, the fork point", fk.AtSeq, fk.Parent)}
		}
		if first.Prev != h || fk.ParentHash != h {
			return &Fault{Session: b.ID, Seq: first.Seq, Reason: fmt.Sprintf("fork record does not match the chain: %s's hash at %d is %s", fk.Parent, fk.AtSeq, short(h))}
		}
	}
	for _, b := range r.d.Branches {
		for _, e := range r.own[b.ID] {
			if e.Type != events.TypeSessionMerged {
				continue
			}
			var m events.SessionMerged
			if err := json.Unmarshal(e.Data, &m); err != nil {
				return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("merge record: %v", err)}
			}
			if h, ok := hashAt(m.SourceHead.Session, m.SourceHead.Seq); ok && h != m.SourceHead.Hash {
				return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("merge names source head %s@%d %s, which is not in the source's log", m.SourceHead.Session, m.SourceHead.Seq, short(m.SourceHead.Hash))}
			}
		}
	}
	for _, b := range r.d.Branches {
		evs := r.own[b.ID]
		last := evs[len(evs)-1]
		if b.Head.Seq != last.Seq || b.Head.Hash != last.Hash {
			return &Fault{Session: b.ID, Seq: b.Head.Seq, Reason: fmt.Sprintf("dossier.json names head %d %s, the events end at %d %s", b.Head.Seq, short(b.Head.Hash), last.Seq, short(last.Hash))}
		}
		rep.Heads = append(rep.Heads, BranchHead{Session: b.ID, Head: b.Head})
	}
	for _, bl := range r.d.Blobs {
		if got := eventstore.BlobRef(r.blobs[bl.Ref]); got != bl.Ref {
			return &Fault{Reason: fmt.Sprintf("blob %s does not match its hash (%s)", bl.File, got)}
		}
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// compare names the first field of dossier.json (as read) that differs from
// the one derived again from the events.
func compare(read, derived *Dossier) *Fault {
	a, err1 := json.Marshal(read)
	b, err2 := json.Marshal(derived)
	if err1 != nil || err2 != nil {
		return &Fault{Reason: fmt.Sprintf("dossier.json does not encode: %v %v", err1, err2)}
	}
	if bytes.Equal(a, b) {
		return nil
	}
	var va, vb any
	_ = json.Unmarshal(a, &va)
	_ = json.Unmarshal(b, &vb)
	f := &Fault{}
	path := diffPath(va, vb, "", f)
	says, want := lookup(va, path), lookup(vb, path)
	f.Reason = fmt.Sprintf("dossier.json %s says %s, the events say %s", path, says, want)
	return f
}

// diffPath returns the path of the first difference of a and b, and notes
// in f the innermost branch (and sequence) on the way.
func diffPath(a, b any, path string, f *Fault) string {
	if m, ok := a.(map[string]any); ok {
		if id, ok := m["id"].(string); ok && strings.HasPrefix(path, "branches[") {
			f.Session, f.Seq = id, 0
		}
		if br, ok := m["branch"].(string); ok {
			f.Session = br
			if s, ok := m["seq"].(float64); ok {
				f.Seq = uint64(s)
			}
		}
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return path
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			if !jsonEqual(x[k], y[k]) {
				return diffPath(x[k], y[k], join(path, k), f)
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok {
			return path
		}
		for i := range min(len(x), len(y)) {
			if !jsonEqual(x[i], y[i]) {
				return diffPath(x[i], y[i], path+"["+strconv.Itoa(i)+"]", f)
			}
		}
		if len(x) != len(y) {
			return path + ".length"
		}
	}
	return path
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func lookup(v any, path string) string {
	cur := v
	if l, ok := strings.CutSuffix(path, ".length"); ok {
		cur = lookupValue(v, l)
		if arr, ok := cur.([]any); ok {
			return strconv.Itoa(len(arr)) + " items"
		}
		return "?"
	}
	cur = lookupValue(v, path)
	if cur == nil {
		return "nothing"
	}
	out, _ := json.Marshal(cur)
	s := string(out)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func lookupValue(v any, path string) any {
	cur := v
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			continue
		}
		name, idx := part, []int{}
		for {
			i := strings.LastIndexByte(name, '[')
			if i < 0 || !strings.HasSuffix(name, "]") {
				break
			}
			n, err := strconv.Atoi(name[i+1 : len(name)-1])
			if err != nil {
				break
			}
			idx = append([]int{n}, idx...)
			name = name[:i]
		}
		if name != "" {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[name]
		}
		for _, n := range idx {
			arr, ok := cur.([]any)
			if !ok || n >= len(arr) {
				return nil
			}
			cur = arr[n]
		}
	}
	return cur
}

// keyring is the keys to check signatures with: the pinned ones, or the
// dossier's own.
func keyring(d *Dossier, pinned events.Keyring, rep *Report) (events.Keyring, *Fault) {
	if pinned != nil {
		rep.Pinned = true
		rep.Keys = slices.Sorted(maps.Keys(pinned))
		return pinned, nil
	}
	if len(d.Keys) == 0 {
		return nil, &Fault{Reason: "dossier.json names no ledger keys, so no signature can be checked (export it again, or pin the ledger's key with --key)"}
	}
	var keys []events.PublicKey
	for _, k := range d.Keys {
		pub, err := events.DecodeNamedKey(k.ID, k.PublicKey)
		if err != nil {
			return nil, &Fault{Reason: fmt.Sprintf("dossier.json: %v", err)}
		}
		keys = append(keys, pub)
		rep.Keys = append(rep.Keys, k.ID)
	}
	return events.NewKeyring(keys...), nil
}

// checkSignatures checks every event's signature. A dossier is read offline
// and whole, so each is checked rather than the heads alone.
func checkSignatures(r *raw, ring events.Keyring) *Fault {
	for _, b := range r.d.Branches {
		for _, e := range r.own[b.ID] {
			if err := ring.Verify(e.Session, e.Seq, e.Hash, e.Sig); err != nil {
				return &Fault{Session: b.ID, Seq: e.Seq, Reason: fmt.Sprintf("signature: %v (forged, or altered and re-hashed)", err)}
			}
		}
	}
	return nil
}

// checkPages renders the human-readable pages again from the verified
// dossier and compares them with the files.
func checkPages(dir string, d *Dossier) *Fault {
	svg := Graph(d)
	pages := []struct {
		name string
		want string
	}{
		{FileMarkdown, Markdown(d)},
		{FileSVG, svg},
		{FileHTML, GraphHTML(d, svg)},
	}
	if plot := ExperimentsSVG(d); plot != "" {
		pages = append(pages, struct {
			name string
			want string
		}{FileExperimentsSVG, plot})
	}
	for _, p := range pages {
		got, err := os.ReadFile(filepath.Join(dir, p.name))
		if err != nil {
			return &Fault{Reason: fmt.Sprintf("%s: %v", p.name, err)}
		}
		if string(got) != p.want {
			return &Fault{Reason: fmt.Sprintf("%s differs from the page the verified events render (edited after export)", p.name)}
		}
	}
	return nil
}
