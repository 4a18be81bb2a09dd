package memory

import (
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// BM25 parameters: the usual defaults (Robertson and Zaragoza; Lucene's).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// Index is an in-memory inverted index over the current version of every
// recallable item, ranked by Okapi BM25 (see docs/adr/0011-memory-index.md).
// It holds one document per item: putting an item again replaces its
// document. It is safe for concurrent use: one writer, many searchers.
//
// Postings are append-only slices; removing a document only bumps its
// slot's generation, and a term's list is compacted once half of it is
// stale, so a replace costs the document's own terms, not the lists.
type Index struct {
	mu       sync.RWMutex
	ids      map[string]uint32 // item ID → document ordinal
	docs     []*doc            // by ordinal; nil once removed
	gens     []uint32          // generation of each ordinal
	free     []uint32          // ordinals of removed documents, reused
	postings map[string]*plist
	live     int
	totalLen int
}

// plist is one term's postings; stale counts the entries of removed
// documents still in it.
type plist struct {
	items []posting
	stale int
}

type posting struct {
	ord, gen, tf uint32
}

// doc is one indexed item version.
type doc struct {
	itemID  string
	version int
	scope   string
	tags    []string
	content string
	terms   map[string]uint32 // term → frequency
	length  int
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{ids: map[string]uint32{}, postings: map[string]*plist{}}
}

// Len is the number of indexed items.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// Put indexes version of an item, replacing the item's earlier document.
func (x *Index) Put(itemID string, version int, content, scope string, tags []string) {
	terms := map[string]uint32{}
	n := 0
	for _, t := range Tokenize(content) {
		terms[t]++
		n++
	}
	d := &doc{itemID: itemID, version: version, scope: scope, tags: slices.Clone(tags), content: content, terms: terms, length: n}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(itemID)
	var ord uint32
	if k := len(x.free); k > 0 {
		ord, x.free = x.free[k-1], x.free[:k-1]
		x.docs[ord] = d
	} else {
		ord = uint32(len(x.docs))
		x.docs = append(x.docs, d)
		x.gens = append(x.gens, 0)
	}
	x.ids[itemID] = ord
	gen := x.gens[ord]
	for t, f := range terms {
		p := x.postings[t]
		if p == nil {
			p = &plist{}
			x.postings[t] = p
		}
		p.items = append(p.items, posting{ord: ord, gen: gen, tf: f})
	}
	x.live++
	x.totalLen += n
}

// Remove drops an item from the index; recall no longer finds it.
func (x *Index) Remove(itemID string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(itemID)
}

func (x *Index) remove(itemID string) {
	ord, ok := x.ids[itemID]
	if !ok {
		return
	}
	d := x.docs[ord]
	x.docs[ord] = nil
	x.gens[ord]++
	for t := range d.terms {
		p := x.postings[t]
		p.stale++
		if p.stale == len(p.items) {
			delete(x.postings, t)
		} else if 2*p.stale > len(p.items) {
			p.items = slices.DeleteFunc(p.items, func(e posting) bool { return x.docs[e.ord] == nil || x.gens[e.ord] != e.gen })
			p.stale = 0
		}
	}
	x.free = append(x.free, ord)
	delete(x.ids, itemID)
	x.live--
	x.totalLen -= d.length
}

// Result is one ranked item.
type Result struct {
	ItemID  string
	Version int
	Score   float64
	Content string
	Scope   string
	Tags    []string
}

// Search returns the k best items for query among those in one of scopes
// (none: any scope) that carry every one of tags, best first; ties go to
// the smaller item ID, so the order is deterministic. Only items sharing a
// term with the query are returned.
func (x *Index) Search(query string, scopes, tags []string, k int) []Result {
	qterms := Tokenize(query)
	slices.Sort(qterms)
	qterms = slices.Compact(qterms)
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.live == 0 || k <= 0 {
		return nil
	}
	avg := float64(x.totalLen) / float64(x.live)
	if avg == 0 {
		avg = 1
	}
	n := float64(x.live)
	filtered := len(scopes) > 0 || len(tags) > 0
	scores := make([]float64, len(x.docs))
	// admitted caches the filter per ordinal: 0 unknown, 1 in, 2 out.
	var admitted []uint8
	if filtered {
		admitted = make([]uint8, len(x.docs))
	}
	var touched []uint32
	for _, t := range qterms {
		p := x.postings[t]
		if p == nil {
			continue
		}
		df := float64(len(p.items) - p.stale)
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, e := range p.items {
			d := x.docs[e.ord]
			if d == nil || x.gens[e.ord] != e.gen {
				continue
			}
			if filtered {
				if admitted[e.ord] == 0 {
					admitted[e.ord] = 2
					if d.matches(scopes, tags) {
						admitted[e.ord] = 1
					}
				}
				if admitted[e.ord] != 1 {
					continue
				}
			}
			if scores[e.ord] == 0 {
				touched = append(touched, e.ord)
			}
			f := float64(e.tf)
			scores[e.ord] += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(d.length)/avg))
		}
	}
	// The k best by a bounded min-heap: worst of the kept at the root.
	better := func(a, b uint32) bool {
		if scores[a] != scores[b] {
			return scores[a] > scores[b]
		}
		return x.docs[a].itemID < x.docs[b].itemID
	}
	h := make([]uint32, 0, k)
	down := func(i int) {
		for {
			l, w := 2*i+1, i
			if l < len(h) && better(h[w], h[l]) {
				w = l
			}
			if r := l + 1; r < len(h) && better(h[w], h[r]) {
				w = r
			}
			if w == i {
				return
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	for _, ord := range touched {
		switch {
		case len(h) < k:
			h = append(h, ord)
			for i := len(h) - 1; i > 0; {
				parent := (i - 1) / 2
				if !better(h[parent], h[i]) {
					break
				}
				h[parent], h[i] = h[i], h[parent]
				i = parent
			}
		case better(ord, h[0]):
			h[0] = ord
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b uint32) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	out := make([]Result, len(h))
	for i, ord := range h {
		d := x.docs[ord]
		out[i] = Result{ItemID: d.itemID, Version: d.version, Score: scores[ord], Content: d.content, Scope: d.scope, Tags: d.tags}
	}
	return out
}

func (d *doc) matches(scopes, tags []string) bool {
	if len(scopes) > 0 && !slices.Contains(scopes, d.scope) {
		return false
	}
	for _, t := range tags {
		if !slices.Contains(d.tags, t) {
			return false
		}
	}
	return true
}

// stopwords are English function words too common to rank by.
var stopwords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"for": true, "from": true, "has": true, "in": true, "is": true, "it": true, "its": true, "of": true,
	"on": true, "or": true, "that": true, "the": true, "this": true, "to": true, "was": true, "were": true,
	"will": true, "with": true,
}

// Tokenize splits text into lower-cased terms: runs of letters and digits
// (so "flag_parse" and "flag-parse" are two terms each, and "TestAdd"
// one), without English stopwords. There is no stemming: "flag" does not
// match "flags".
func Tokenize(text string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		t := strings.ToLower(f)
		if !stopwords[t] {
			out = append(out, t)
		}
	}
	return out
}
