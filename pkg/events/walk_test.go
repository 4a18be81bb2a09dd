package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// sealed seals data as the events of session id from seq from on, chained
// onto prev, and returns the stored bodies.
func sealed(t *testing.T, id string, from uint64, prev string, data ...any) [][]byte {
	t.Helper()
	var out [][]byte
	for i, d := range data {
		ev, err := events.New(id, d)
		if err != nil {
			t.Fatal(err)
		}
		body, hash, err := events.Seal(&ev, from+uint64(i), prev, testKey)
		if err != nil {
			t.Fatal(err)
		}
		out, prev = append(out, body), hash
	}
	return out
}

func chunk(s string) *events.ChunkAppended {
	return &events.ChunkAppended{Role: events.RoleUser, Content: s}
}

// The walker takes a chain as sealed, through a fork, and names the first
// break of one that was altered, cut, reordered or spliced.
func TestChainWalk(t *testing.T) {
	root := sealed(t, "r", 1, "", &events.SessionStarted{}, chunk("a"), chunk("b"), chunk("c"))
	at, _ := events.ParseStored(root[1])
	fork := sealed(t, "f", 3, at.Hash, &events.SessionForked{Parent: "r", AtSeq: 2, ParentHash: at.Hash}, chunk("x"))
	badFork := sealed(t, "f", 3, at.Hash, &events.SessionForked{Parent: "r", AtSeq: 1, ParentHash: at.Hash})
	other := sealed(t, "o", 1, "", &events.SessionStarted{}, chunk("a"))

	type step struct {
		session string // "" keeps the chain's
		body    []byte
	}
	walk := func(bodies ...[]byte) []step {
		var out []step
		for _, b := range bodies {
			out = append(out, step{body: b})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		steps []step
		seq   uint64 // of the fault; 0: none
		want  string
	}{
		{"a root", walk(root...), 0, ""},
		{"through a fork", append(walk(root[:2]...), step{"f", fork[0]}, step{"", fork[1]}), 0, ""},
		{"altered", walk(root[0], []byte(strings.Replace(string(root[1]), `"content":"a"`, `"content":"z"`, 1))), 2, "hash mismatch: stored"},
		{"removed", walk(root[0], root[2]), 2, "missing sequence 2: the next stored event is 3"},
		{"reordered", walk(root[0], root[1], root[1]), 2, "sequence 2 appears after 2"},
		{"spliced from another session", walk(root[0], other[1]), 2, "links to"},
		{"of another session", walk(other[0]), 1, `names session "o", not r`},
		{"not starting at 1", walk(root[1]), 1, "missing sequence 1"},
		{"fork record off its point", append(walk(root[:2]...), step{"f", badFork[0]}), 3, "fork record names 1"},
		{"not an event", walk(root[0], []byte(`{"x":`)), 2, "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := events.Chain{Session: "r"}
			var err error
			for _, s := range tc.steps {
				if s.session != "" {
					c.Session = s.session
				}
				if _, err = c.Next(s.body); err != nil {
					break
				}
			}
			var f *events.ChainFault
			switch {
			case tc.seq == 0 && err != nil:
				t.Fatalf("fault %v", err)
			case tc.seq == 0:
				return
			case !errors.As(err, &f):
				t.Fatalf("err %v, want a ChainFault", err)
			case f.Seq != tc.seq || !strings.Contains(f.Reason, tc.want):
				t.Fatalf("fault at %d: %s; want at %d: %s", f.Seq, f.Reason, tc.seq, tc.want)
			}
		})
	}
}
