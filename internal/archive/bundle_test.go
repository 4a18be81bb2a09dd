package archive_test

import (
	"strings"
	"testing"

	"github.com/openrath/rath/internal/archive"
	"github.com/openrath/rath/pkg/events"
)

// bundle seals n events of session s (a start, then chunks) into a bundle,
// unsigned: Verify checks the chain, not signatures.
func bundle(t *testing.T, n int) *archive.Bundle {
	t.Helper()
	b := &archive.Bundle{Header: archive.Header{Format: archive.Format, Session: "s", FromSeq: 1}}
	prev := ""
	for i := range n {
		var data any = &events.ChunkAppended{Role: events.RoleUser, Content: "hi"}
		if i == 0 {
			data = &events.SessionStarted{}
		}
		ev, err := events.New("s", data)
		if err != nil {
			t.Fatal(err)
		}
		body, hash, err := events.Seal(&ev, uint64(i+1), prev, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, archive.Entry{StreamSeq: uint64(10 + i), Subject: events.SessionSubject("default", "s", "chunk"), Event: body})
		prev = hash
		b.HeadSeq, b.HeadHash, b.HeadStreamSeq = uint64(i+1), hash, uint64(10+i)
	}
	b.Events = n
	return b
}

// Verify walks the bundle's chain (events.Chain) and checks what only a
// bundle says: subjects, stream order, the header's head.
func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(b *archive.Bundle)
		want   string // "" verifies
	}{
		{"as sealed", func(*archive.Bundle) {}, ""},
		{"altered", func(b *archive.Bundle) {
			b.Entries[1].Event = []byte(strings.Replace(string(b.Entries[1].Event), `"hi"`, `"ho"`, 1))
		}, "entry 2: hash mismatch"},
		{"removed", func(b *archive.Bundle) { b.Entries = append(b.Entries[:1], b.Entries[2:]...); b.Events-- }, "missing sequence 2"},
		{"another session's subject", func(b *archive.Bundle) { b.Entries[2].Subject = events.SessionSubject("default", "t", "chunk") }, "sequence 3 stored on"},
		{"out of stream order", func(b *archive.Bundle) { b.Entries[2].StreamSeq = 5 }, "out of stream order"},
		{"head not the header's", func(b *archive.Bundle) { b.HeadSeq++ }, "header says 4"},
		{"from_seq 0", func(b *archive.Bundle) { b.FromSeq = 0 }, "from_seq 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bundle(t, 3)
			tc.tamper(b)
			err := b.Verify()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Verify: %v, want %q", err, tc.want)
			}
		})
	}
}
