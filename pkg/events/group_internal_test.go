package events

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// An event signed in a group but never stored keeps its nonce: from another
// member's rathsig (its nonce, its path) nobody can build a signature that
// holds for it, since the path shows only the blinded leaf.
func TestUnstoredGroupMemberCannotBeSignedAfterwards(t *testing.T) {
	a := Leaf{"a", 5, strings.Repeat("a", 64)}
	b := Leaf{"b", 7, strings.Repeat("b", 64)} // signed, then refused: its rathsig never leaves the ledger
	sigs, err := testKey.SignGroup([]Leaf{a, b})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(sigs[0], ":") // what a's receipt shows
	nonceA, _ := base64.RawURLEncoding.DecodeString(parts[4])
	leafA := a.hash(nonceA)
	ring := NewKeyring(testKey.Public())
	for _, nonce := range []string{parts[4], "AAAAAAAAAAAAAAAAAAAAAA"} {
		forged := strings.Join([]string{parts[0], parts[1], "1", "2", nonce, base64.RawURLEncoding.EncodeToString(leafA[:])}, ":")
		if err := ring.Verify(b.Session, b.Seq, b.Hash, forged); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("a signature for the unstored member was rebuilt: %v", err)
		}
	}
	if err := ring.Verify(b.Session, b.Seq, b.Hash, sigs[1]); err != nil {
		t.Fatalf("the member's own rathsig: %v", err)
	}
}

// A leaf is SHA-256(0x00 || nonce || message), message the one a single
// signature signs (protocol.md): the in-place build matches it.
func TestLeafHashIsTheDocumentedOne(t *testing.T) {
	l := Leaf{Session: "s-1", Seq: 4242, Hash: strings.Repeat("ab", 32)}
	nonce := []byte("0123456789abcdef")
	want := sha256.Sum256(append(append([]byte{0}, nonce...), signedMessage(l.Session, l.Seq, l.Hash)...))
	if got := l.hash(nonce); got != want {
		t.Fatalf("leaf %x, want %x", got, want)
	}
}
