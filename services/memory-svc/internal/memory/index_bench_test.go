package memory

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkSearch is a recall's search (BM25, k=5) among 10,000 and 100,000
// items of 24 words drawn Zipf-like from 2,000, with queries of 3 such words:
// the index's share of a recall, which also reads the items' states and
// records the recall in the session.
//
//	go test -run '^$' -bench Search ./services/memory-svc/internal/memory
func BenchmarkSearch(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 11))
			x := NewIndex()
			for i := range n {
				x.Put(fmt.Sprintf("item-%07d", i), 1, zipfText(rng, 24), "project:bench", []string{fmt.Sprintf("t%d", i%10)})
			}
			queries := make([]string, 1024)
			for i := range queries {
				queries[i] = zipfText(rng, 3)
			}
			hits := 0
			for i := 0; b.Loop(); i++ {
				hits += len(x.Search(queries[i%len(queries)], nil, nil, 5))
			}
			b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
		})
	}
}

// zipfText is n words of a 2,000-word vocabulary, word i drawn with
// probability ~1/(i+1), as in prose.
func zipfText(rng *rand.Rand, n int) string {
	const vocabulary = 2000
	words := make([]string, n)
	for j := range words {
		// Inverse transform of a 1/x density over [1, vocabulary+1).
		x := int(math.Exp(rng.Float64()*math.Log(vocabulary+1))) - 1
		words[j] = fmt.Sprintf("w%04d", min(max(x, 0), vocabulary-1))
	}
	return strings.Join(words, " ")
}
