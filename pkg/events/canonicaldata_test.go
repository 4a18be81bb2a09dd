package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// canonicalCases are data values canonicalData must write as jcs does, or
// refuse (and so fall back to jcs).
var canonicalCases = []string{
	`{}`, `[]`, `""`, `0`, `-1`, `123456789012345`, `true`, `false`, `null`,
	`{"b":1,"a":2}`, ` { "z" : [ 1 , 2 , { "y" : null , "x" : true } ] , "a" : "s" } `,
	`{"result":"line one\nline two\ttab \"quoted\" back\\slash \/ solidus"}`,
	`{"s":"\u00e9\u4e2d\ud83d\ude00 caf\u00E9"}`, `{"s":"é中😀"}`,
	`{"s":"\u0000\u0001\u001f\u007f\b\f\r"}`, `{"s":"\u2028\u2029"}`,
	`{"n":1.5}`, `{"n":1e3}`, `{"n":-0}`, `{"n":0.1}`, `{"n":1234567890123456}`, `{"n":01}`,
	`{"a":1,"a":2}`, `{"é":1}`, `{"\u0061":1}`, `{"s":"\ud800"}`, `{"s":"\udc00x"}`, `{"s":"\ud800\u0041"}`,
	`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1`, `"abc`, `tru`, `truex`, `[1 2]`, `{"s":"` + "\x01" + `"}`,
	`{"s":"` + "\xff" + `"}`, `{"s":"\x"}`, `{"s":"\u12"}`, `{"A":1,"a":2,"_":3,"0":4}`,
	`{"nested":{"b":{"d":[],"c":{}},"a":[{"y":1,"x":2}]}}`,
}

func TestCanonicalDataMatchesJCS(t *testing.T) {
	check := func(t *testing.T, in string) {
		t.Helper()
		got, ok := canonicalData([]byte(in))
		want, err := jcs.Transform([]byte(in))
		if !ok {
			return // falls back to jcs, which writes or refuses it
		}
		if err != nil {
			t.Fatalf("canonicalData(%q) = %q, but jcs refuses it: %v", in, got, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("canonicalData(%q) = %q, jcs %q", in, got, want)
		}
	}
	handled := 0
	for _, in := range canonicalCases {
		check(t, in)
		if _, ok := canonicalData([]byte(in)); ok {
			handled++
		}
	}
	if handled < 12 {
		t.Fatalf("canonicalData handled %d of the cases: the fast path is not taken", handled)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		check(t, randomJSON(r, 0))
	}
}

// TestCanonicalDataTakesTheFastPath pins the cases it must handle itself:
// a tool result with escapes is the one it exists for.
func TestCanonicalDataTakesTheFastPath(t *testing.T) {
	for _, in := range []string{
		`{"call_id":"c1","result":"a\nb\tc \"d\" \u00e9","duration_ms":12,"sandbox":{"backend":"bwrap"}}`,
		`[1,-2,"x",true,null,{"b":[],"a":{}}]`,
	} {
		if _, ok := canonicalData([]byte(in)); !ok {
			t.Errorf("canonicalData(%q) fell back", in)
		}
	}
	for _, in := range []string{`{"n":1.5}`, `{"a":1,"a":2}`, `{"é":1}`, `{"s":"\ud800"}`, `{"n":-0}`} {
		if _, ok := canonicalData([]byte(in)); ok {
			t.Errorf("canonicalData(%q) took the fast path, want the fallback", in)
		}
	}
}

// randomJSON writes a random value with random whitespace, escapes and
// names, the shapes events carry and some they do not.
func randomJSON(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", "", " ", "\n\t"}[r.IntN(4)] }
	switch k := r.IntN(10); {
	case depth < 4 && k < 3:
		n := r.IntN(5)
		var b strings.Builder
		b.WriteString("{" + ws())
		for i := range n {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString(randomString(r, true) + ws() + ":" + ws() + randomJSON(r, depth+1))
		}
		return b.String() + ws() + "}"
	case depth < 4 && k < 5:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + randomJSON(r, depth+1) + ws()
		}
		return "[" + strings.Join(parts, ",") + "]"
	case k < 8:
		return randomString(r, false)
	default:
		return []string{"0", "-7", "42", "1.25", "1e2", "-0", "true", "false", "null", fmt.Sprint(r.Int64N(1 << 50))}[r.IntN(10)]
	}
}

func randomString(r *rand.Rand, name bool) string {
	pieces := []string{"a", "b", "Z", "_", "0", `\n`, `\"`, `\\`, `\/`, `\u00e9`, "é", "中", `\ud83d\ude00`, "😀", `\u0001`, `\t`, " "}
	if name {
		pieces = pieces[:5]
		if r.IntN(8) == 0 {
			pieces = []string{"é", `\u0061`, "a"}
		}
	}
	var b strings.Builder
	b.WriteByte('"')
	for range r.IntN(6) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	b.WriteByte('"')
	return b.String()
}

func BenchmarkCanonicalData(b *testing.B) {
	result := strings.Repeat("tool output: a line of a command's result, as it printed it\n", 270)
	data, err := json.Marshal(map[string]any{"call_id": "call-00001", "tool": "bench_result", "result": result, "duration_ms": 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, ok := canonicalData(data); !ok {
				b.Fatal("fell back")
			}
		}
	})
	b.Run("jcs", func(b *testing.B) {
		for b.Loop() {
			if _, err := jcs.Transform(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzCanonicalData: whatever canonicalData writes, jcs writes the same.
func FuzzCanonicalData(f *testing.F) {
	for _, in := range canonicalCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := canonicalData(in)
		if !ok {
			return
		}
		want, err := jcs.Transform(in)
		if err != nil {
			t.Fatalf("canonicalData(%q) = %q, but jcs refuses it: %v", in, got, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("canonicalData(%q) = %q, jcs %q", in, got, want)
		}
	})
}
