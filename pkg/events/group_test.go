package events_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// Every event of a signed group verifies on its own, for every group size
// and index (the path is built by RFC 9162's recursive definition and checked
// by its iterative verification, two independent computations), and a
// signature holds for nothing but its own event.
func TestGroupSignatures(t *testing.T) {
	ring := events.NewKeyring(testKey.Public())
	for n := 1; n <= events.MaxGroup; n++ {
		leaves := make([]events.Leaf, n)
		for i := range leaves {
			leaves[i] = events.Leaf{Session: fmt.Sprintf("s%d", i%3), Seq: uint64(10 + i), Hash: strings.Repeat(fmt.Sprintf("%x", i%16), 64)}
		}
		sigs := signGroup(t, testKey, leaves)
		for i, l := range leaves {
			if err := ring.Verify(l.Session, l.Seq, l.Hash, sigs[i]); err != nil {
				t.Fatalf("n=%d i=%d: %v", n, i, err)
			}
			if n > 1 && strings.Count(sigs[i], ":") != 5 {
				t.Fatalf("n=%d: %q is not a group signature", n, sigs[i])
			}
			// Another event's place, the neighbour's signature, a wrong hash.
			if err := ring.Verify(l.Session, l.Seq+1, l.Hash, sigs[i]); !errors.Is(err, events.ErrBadSignature) {
				t.Fatalf("n=%d i=%d: verified at another seq: %v", n, i, err)
			}
			if n > 1 {
				j := (i + 1) % n
				if err := ring.Verify(l.Session, l.Seq, l.Hash, sigs[j]); !errors.Is(err, events.ErrBadSignature) {
					t.Fatalf("n=%d: event %d verified with event %d's signature: %v", n, i, j, err)
				}
			}
		}
	}
}

// Edited group signatures fail, and none makes Verify panic.
func TestGroupSignaturesRefuseEdits(t *testing.T) {
	ring := events.NewKeyring(testKey.Public())
	leaves := []events.Leaf{{"s", 1, strings.Repeat("a", 64)}, {"s", 2, strings.Repeat("b", 64)}, {"t", 7, strings.Repeat("c", 64)}}
	sig := signGroup(t, testKey, leaves)[1]
	parts := strings.Split(sig, ":")
	edit := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, ":")
	}
	for name, s := range map[string]string{
		"index":          edit(2, "0"),
		"index too big":  edit(2, "3"),
		"size":           edit(3, "4"),
		"size one":       edit(3, "1"),
		"size too big":   edit(3, "999"),
		"short path":     edit(5, parts[5][:43]),
		"other nonce":    edit(4, "AAAAAAAAAAAAAAAAAAAAAA"),
		"short nonce":    edit(4, "AAAA"),
		"leading zero":   edit(2, "01"),
		"empty path":     edit(5, ""),
		"bad base64":     edit(5, "!!"),
		"extra part":     sig + ":x",
		"bad signature":  edit(1, parts[1][:10]),
		"negative index": edit(2, "-1"),
	} {
		if err := ring.Verify("s", 2, strings.Repeat("b", 64), s); !errors.Is(err, events.ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// BenchmarkSignGroup is the ledger's signing cost per group of MaxGroup
// events (the batch path's group size).
func BenchmarkSignGroup(b *testing.B) {
	k, err := events.GenerateSigningKey()
	if err != nil {
		b.Fatal(err)
	}
	leaves := make([]events.Leaf, events.MaxGroup)
	for i := range leaves {
		leaves[i] = events.Leaf{Session: "bench-session", Seq: uint64(i + 1), Hash: strings.Repeat("ab", 32)}
	}
	for b.Loop() {
		if _, err := k.SignGroup(leaves); err != nil {
			b.Fatal(err)
		}
	}
}

func signGroup(t *testing.T, k *events.SigningKey, leaves []events.Leaf) []string {
	t.Helper()
	sigs, err := k.SignGroup(leaves)
	if err != nil {
		t.Fatal(err)
	}
	return sigs
}
