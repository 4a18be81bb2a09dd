package events

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Group signatures: the ledger may sign several events at once, one ed25519
// signature over the root of a Merkle tree (RFC 9162, section 2.1) whose
// leaves are the events' signed messages. Each event's rathsig then carries
// the root's signature, its leaf index, the group's size, its leaf's nonce
// and its inclusion path, so every event still verifies on its own:
//
//	rathsig = <key ID> ":" <signature of "rath.root.v1\n" size "\n" hex(root)> ":" <index> ":" <size> ":" base64url(nonce) ":" base64url(path)
//
// A leaf is SHA-256(0x00 || nonce || message), a node SHA-256(0x01 || left
// || right), and message is the one a single signature signs (see
// SigningKey.Sign). The nonce, 16 random bytes per leaf, appears only in its
// own event's rathsig: an event that was signed in a group but never stored
// (refused, or lost to a conflict) keeps its nonce secret, so nobody can
// rebuild a signature for it from the other events' paths, which show only
// blinded leaves. A group of one is signed as a single event. A group whose
// leaves are stored once, apart, is a signature record (record.go).

// MaxGroup bounds a signed group: its inclusion paths stay at most 4 hashes.
const MaxGroup = 16

// nonceSize is the length of a leaf's blinding nonce.
const nonceSize = 16

// MaxSigLen is the longest rathsig the ledger writes (a group signature of
// the largest group): an event must fit the size limit with it, whatever
// group it lands in.
const MaxSigLen = 16 + 1 + 86 + 1 + 2 + 1 + 2 + 1 + 22 + 1 + 171

// Leaf names what a signature vouches for: an event's place and chain hash.
type Leaf struct {
	Session string
	Seq     uint64
	Hash    string
}

func (l Leaf) hash(nonce []byte) [32]byte {
	// 0x00 || nonce || signedMessage, built in place (signing a group
	// hashes one leaf per event).
	var buf [256]byte
	b := append(buf[:0], 0)
	b = append(b, nonce...)
	b = append(b, "rath.event.v1\n"...)
	b = append(b, l.Session...)
	b = append(b, '\n')
	b = strconv.AppendUint(b, l.Seq, 10)
	b = append(b, '\n')
	b = append(b, l.Hash...)
	return sha256.Sum256(b)
}

func node(a, b [32]byte) [32]byte {
	var in [65]byte
	in[0] = 1
	copy(in[1:], a[:])
	copy(in[33:], b[:])
	return sha256.Sum256(in[:])
}

// merkle is the Merkle tree of a group's leaves (RFC 9162, section 2.1),
// with every subtree hash computed once: the root and all inclusion paths
// cost 2n-1 hashes together, where RFC 9162's recursive MTH and PATH
// recompute the same subtrees for every leaf.
type merkle struct {
	leaves [][32]byte
	memo   map[[2]int][32]byte // subtree [lo, hi) → its hash
}

func newMerkle(leaves [][32]byte) *merkle {
	return &merkle{leaves: leaves, memo: make(map[[2]int][32]byte, 2*len(leaves))}
}

// hash is MTH(leaves[lo:hi]), hi > lo.
func (t *merkle) hash(lo, hi int) [32]byte {
	if hi-lo == 1 {
		return t.leaves[lo]
	}
	if h, ok := t.memo[[2]int{lo, hi}]; ok {
		return h
	}
	k := split(hi - lo)
	h := node(t.hash(lo, lo+k), t.hash(lo+k, hi))
	t.memo[[2]int{lo, hi}] = h
	return h
}

// path is PATH(m, leaves[lo:hi]): the inclusion path of leaf lo+m, leaf
// level first. It walks down from the subtree's root, collecting each
// sibling, and reverses them.
func (t *merkle) path(m, lo, hi int) [][32]byte {
	var p [][32]byte
	for hi-lo > 1 {
		k := split(hi - lo)
		if m < k {
			p = append(p, t.hash(lo+k, hi))
			hi = lo + k
		} else {
			p = append(p, t.hash(lo, lo+k))
			lo, m = lo+k, m-k
		}
	}
	slices.Reverse(p)
	return p
}

// split is the largest power of two smaller than n (n >= 2).
func split(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// rootFromPath recomputes the root from a leaf, its index, the tree's size
// and its inclusion path (RFC 9162 section 2.1.3.2); false if the path does
// not fit the index and size.
func rootFromPath(leaf [32]byte, index, size uint64, p [][32]byte) ([32]byte, bool) {
	if index >= size {
		return leaf, false
	}
	fn, sn := index, size-1
	r := leaf
	for _, c := range p {
		if sn == 0 {
			return r, false
		}
		if fn&1 == 1 || fn == sn {
			r = node(c, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = node(r, c)
		}
		fn >>= 1
		sn >>= 1
	}
	return r, sn == 0
}

// rootMessage is what a group signature signs: the group's size and root,
// as a signed tree head does (RFC 9162).
func rootMessage(size uint64, root [32]byte) []byte {
	b := append([]byte("rath.root.v1\n"), strconv.FormatUint(size, 10)...)
	b = append(b, '\n')
	return append(b, hex.EncodeToString(root[:])...)
}

// SignGroup signs up to MaxGroup events with one signature and returns each
// one's rathsig, in order. A group of one is signed as Sign would.
func (k *SigningKey) SignGroup(leaves []Leaf) ([]string, error) {
	out := make([]string, len(leaves))
	switch len(leaves) {
	case 0:
		return out, nil
	case 1:
		var err error
		out[0], err = k.Sign(leaves[0].Session, leaves[0].Seq, leaves[0].Hash)
		return out, err
	}
	if len(leaves) > MaxGroup {
		panic(fmt.Sprintf("events: SignGroup of %d events, at most %d", len(leaves), MaxGroup))
	}
	nonces := make([]byte, nonceSize*len(leaves))
	if _, err := rand.Read(nonces); err != nil {
		panic(fmt.Sprintf("events: no randomness for group signature nonces: %v", err))
	}
	hs := make([][32]byte, len(leaves))
	for i, l := range leaves {
		hs[i] = l.hash(nonces[nonceSize*i : nonceSize*(i+1)])
	}
	tree := newMerkle(hs)
	root := tree.hash(0, len(hs))
	raw, err := k.sign(rootMessage(uint64(len(leaves)), root))
	if err != nil {
		return nil, err
	}
	sig := base64.RawURLEncoding.EncodeToString(raw)
	prefix := k.pub.ID + ":" + sig + ":"
	size := ":" + strconv.Itoa(len(leaves)) + ":"
	for i := range leaves {
		p := tree.path(i, 0, len(hs))
		raw := make([]byte, 0, 32*len(p))
		for _, c := range p {
			raw = append(raw, c[:]...)
		}
		nonce := base64.RawURLEncoding.EncodeToString(nonces[nonceSize*i : nonceSize*(i+1)])
		out[i] = prefix + strconv.Itoa(i) + size + nonce + ":" + base64.RawURLEncoding.EncodeToString(raw)
	}
	return out, nil
}

// verifyGroup checks a group rathsig's parts (after the key ID) for the
// event at seq of session with the given hash.
func verifyGroup(pub ed25519.PublicKey, id string, parts []string, session string, seq uint64, hash string) error {
	b64 := base64.RawURLEncoding.Strict()
	sig, err := b64.DecodeString(parts[0])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: not an ed25519 signature in base64url", ErrBadSignature)
	}
	index, err1 := strconv.ParseUint(parts[1], 10, 8)
	size, err2 := strconv.ParseUint(parts[2], 10, 8)
	nonce, err3 := b64.DecodeString(parts[3])
	raw, err4 := b64.DecodeString(parts[4])
	// One spelling per signature: decimals without leading zeros.
	canonical := strconv.FormatUint(index, 10) == parts[1] && strconv.FormatUint(size, 10) == parts[2]
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !canonical || size < 2 || size > MaxRecord || len(nonce) != nonceSize || len(raw)%32 != 0 {
		return fmt.Errorf("%w: malformed group signature", ErrBadSignature)
	}
	p := make([][32]byte, len(raw)/32)
	for i := range p {
		copy(p[i][:], raw[32*i:])
	}
	root, ok := rootFromPath(Leaf{session, seq, hash}.hash(nonce), index, size, p)
	if !ok {
		return fmt.Errorf("%w: the inclusion path does not fit leaf %d of %d", ErrBadSignature, index, size)
	}
	if !ed25519.Verify(pub, rootMessage(size, root), sig) {
		return fmt.Errorf("%w: key %s did not sign a group holding %s at %d with hash %s", ErrBadSignature, id, session, seq, shortHash(hash))
	}
	return nil
}

// sigParts splits a rathsig after its key ID: one part for a single
// signature, five for an inline group signature, three for a reference to a
// signature record (record.go).
func sigParts(sig string) (id string, parts []string) {
	id, rest, _ := strings.Cut(sig, ":")
	return id, strings.Split(rest, ":")
}

// AttachSig adds a signature to an event sealed without one (Seal with a
// nil key): it sets the event's rathsig and returns the body to store.
func AttachSig(e *event.Event, body []byte, sig string) []byte {
	if sig == "" { // an unsigned ledger's (the bench's baseline)
		return body
	}
	e.SetExtension(ExtSig, sig)
	out := make([]byte, 0, len(body)+len(sig)+13)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"`+ExtSig+`":"`...)
	out = append(out, sig...)
	return append(out, `"}`...)
}
