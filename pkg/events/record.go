package events

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Signature records: a group signature (see SignGroup) whose leaves are
// stored once, apart from the events, instead of an inclusion path in every
// event. The ledger signs the events of a batch round this way: each
// stored event's rathsig is then a short reference,
//
//	rathsig = <key ID> ":" <record ID> ":" <index> ":" base64url(nonce)
//
// about 60 bytes instead of about 300, and the record, stored on
// rath.sig.<record ID> in the RATH_SIGS stream before any of its events, is
//
//	{"key":"<key ID>","sig":"<signature of the root>","leaves":["<base64url leaf>", …]}
//
// Its signature is the group signature of the leaves' Merkle root, exactly
// as an inline group rathsig carries it, and its ID is base64url of the
// root's first 12 bytes. Expand turns a reference and its record into the
// inline group rathsig (the inclusion path computed from the leaves), which
// Keyring.Verify checks as any other: every such event still verifies on
// its own, given its record. The ledger hands out the inline form in acks
// (receipts stay self-contained) and serves it in every event it reads out
// (rath.ledger.log, archives); only the stored body and the live copy
// carry the reference.

// MaxRecord bounds the leaves of a signature record: inclusion paths stay at
// most 6 hashes.
const MaxRecord = 64

// MinRecord is the smallest group the ledger signs with a record: below it,
// one more stored message costs more than the paths it saves.
const MinRecord = 4

// recordIDSize is the bytes of the root a record ID holds (16 base64url
// characters).
const recordIDSize = 12

// ErrDetached: a rathsig refers to a signature record, which the verifier
// needs (Expand) before Keyring.Verify can check it.
var ErrDetached = errors.New("signed in a record stored apart")

// SigRecord is a signature record: a group signature and the group's
// blinded leaves.
type SigRecord struct {
	Key    string   `json:"key"`
	Sig    string   `json:"sig"`
	Leaves []string `json:"leaves"`
}

// RecordSigs is what SignRecord returns for one group: the record to store
// first, its ID, for each event the reference to store in its body, and the
// record parsed (each event's inline form, for its receipt, by
// Signed.Expand).
type RecordSigs struct {
	ID     string
	Record []byte
	Refs   []string
	Signed *Record
}

// SignRecord signs MinRecord..MaxRecord events with one signature whose
// leaves go into a record stored apart.
func (k *SigningKey) SignRecord(leaves []Leaf) (RecordSigs, error) {
	n := len(leaves)
	if n < MinRecord || n > MaxRecord {
		return RecordSigs{}, fmt.Errorf("sign record: %d events, want %d..%d", n, MinRecord, MaxRecord)
	}
	nonces := make([]byte, nonceSize*n)
	if _, err := rand.Read(nonces); err != nil {
		return RecordSigs{}, fmt.Errorf("sign record: no randomness for nonces: %w", err)
	}
	hs := make([][32]byte, n)
	for i, l := range leaves {
		hs[i] = l.hash(nonces[nonceSize*i : nonceSize*(i+1)])
	}
	tree := newMerkle(hs)
	root := tree.hash(0, n)
	b64 := base64.RawURLEncoding
	raw, err := k.sign(rootMessage(uint64(n), root))
	if err != nil {
		return RecordSigs{}, fmt.Errorf("sign record: %w", err)
	}
	sig := b64.EncodeToString(raw)
	out := RecordSigs{ID: b64.EncodeToString(root[:recordIDSize]), Refs: make([]string, n)}
	out.Signed = &Record{id: out.ID, key: k.pub.ID, sig: sig, tree: tree}
	// The record, written as json.Marshal would write SigRecord (every
	// value is hex or base64url: nothing to escape), in one buffer.
	leafLen := b64.EncodedLen(32)
	rec := make([]byte, 0, 40+len(k.pub.ID)+len(sig)+n*(leafLen+3))
	rec = append(rec, `{"key":"`...)
	rec = append(rec, k.pub.ID...)
	rec = append(rec, `","sig":"`...)
	rec = append(rec, sig...)
	rec = append(rec, `","leaves":[`...)
	for i := range hs {
		if i > 0 {
			rec = append(rec, ',')
		}
		rec = append(rec, '"')
		rec = b64.AppendEncode(rec, hs[i][:])
		rec = append(rec, '"')
	}
	out.Record = append(rec, "]}"...)
	// Each event's reference, from one buffer.
	nonceLen := b64.EncodedLen(nonceSize)
	refs := make([]byte, 0, n*(len(k.pub.ID)+len(out.ID)+nonceLen+6))
	for i := range leaves {
		start := len(refs)
		refs = append(refs, k.pub.ID...)
		refs = append(refs, ':')
		refs = append(refs, out.ID...)
		refs = append(refs, ':')
		refs = strconv.AppendInt(refs, int64(i), 10)
		refs = append(refs, ':')
		refs = b64.AppendEncode(refs, nonces[nonceSize*i:nonceSize*(i+1)])
		out.Refs[i] = string(refs[start:])
	}
	return out, nil
}

// Record is a signature record read and checked once (ParseRecord, or
// SignRecord's own): its leaves' Merkle tree, from which the inline
// signature of each of its events is spelled without parsing or hashing
// again. Safe for concurrent use: the tree is complete once built, and
// Expand only reads it.
type Record struct {
	id, key, sig string
	tree         *merkle
}

// ParseRecord reads the stored body of the record named id and checks that
// its leaves' root is the one the ID names. Its signature is checked by
// Keyring.Verify on what Expand returns.
func ParseRecord(id string, body []byte) (*Record, error) {
	var rec SigRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, fmt.Errorf("%w: signature record %s does not parse: %v", ErrBadSignature, id, err)
	}
	n := len(rec.Leaves)
	if n < 2 || n > MaxRecord {
		return nil, fmt.Errorf("%w: signature record %s holds %d leaves, want 2..%d", ErrBadSignature, id, n, MaxRecord)
	}
	hs := make([][32]byte, n)
	for i, l := range rec.Leaves {
		raw, err := base64.RawURLEncoding.Strict().DecodeString(l)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("%w: signature record %s: leaf %d is not 32 bytes in base64url", ErrBadSignature, id, i)
		}
		copy(hs[i][:], raw)
	}
	tree := newMerkle(hs)
	root := tree.hash(0, n)
	if got := base64.RawURLEncoding.EncodeToString(root[:recordIDSize]); got != id {
		return nil, fmt.Errorf("%w: the record stored as %s has root %s", ErrBadSignature, id, got)
	}
	return &Record{id: id, key: rec.Key, sig: rec.Sig, tree: tree}, nil
}

// Size is about the memory a parsed record holds, for a cache's bound.
func (r *Record) Size() int64 {
	n := int64(len(r.tree.leaves))
	return 32*n + 80*int64(len(r.tree.memo)) + int64(len(r.id)+len(r.key)+len(r.sig))
}

// Expand returns the inline group rathsig that ref, a reference to this
// record, stands for. It checks that ref names this record, by the same
// key, and a leaf it holds.
func (r *Record) Expand(ref RecordRef) (string, error) {
	n := len(r.tree.leaves)
	switch {
	case ref.Record != r.id:
		return "", fmt.Errorf("%w: the reference names record %s, not %s", ErrBadSignature, ref.Record, r.id)
	case ref.Index >= n:
		return "", fmt.Errorf("%w: signature record %s holds %d leaves, the reference names leaf %d", ErrBadSignature, r.id, n, ref.Index)
	case r.key != ref.Key:
		return "", fmt.Errorf("%w: signature record %s is by key %s, the reference names %s", ErrBadSignature, r.id, r.key, ref.Key)
	}
	return inlineGroup(r.key, r.sig, ref.Index, n, ref.Nonce, r.tree.path(ref.Index, 0, n)), nil
}

// inlineGroup spells an inline group rathsig (see SignGroup), the nonce
// already in base64url.
func inlineGroup(key, sig string, index, size int, nonce string, path [][32]byte) string {
	b := make([]byte, 0, len(key)+len(sig)+len(nonce)+12+base64.RawURLEncoding.EncodedLen(32*len(path)))
	b = inlineHead(b, key, sig, index, size)
	b = append(b, nonce...)
	return string(inlinePath(b, path))
}

func inlineHead(b []byte, key, sig string, index, size int) []byte {
	b = append(b, key...)
	b = append(b, ':')
	b = append(b, sig...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(size), 10)
	return append(b, ':')
}

func inlinePath(b []byte, path [][32]byte) []byte {
	b = append(b, ':')
	var raw [32 * 8]byte
	p := raw[:0]
	for _, c := range path {
		p = append(p, c[:]...)
	}
	return base64.RawURLEncoding.AppendEncode(b, p)
}

// RecordRef is a parsed reference rathsig.
type RecordRef struct {
	Key, Record string
	Index       int
	Nonce       string
}

// ParseRecordRef reads a reference rathsig; false if sig is another form
// (single, inline group, empty). A reference that is malformed is reported
// as one, with an error wrapping ErrBadSignature.
func ParseRecordRef(sig string) (RecordRef, bool, error) {
	parts := strings.Split(sig, ":")
	if len(parts) != 4 {
		return RecordRef{}, false, nil
	}
	index, err := strconv.Atoi(parts[2])
	if err != nil || strconv.Itoa(index) != parts[2] || index < 0 || index >= MaxRecord ||
		len(parts[1]) != base64.RawURLEncoding.EncodedLen(recordIDSize) || !isBase64URL(parts[1]) {
		return RecordRef{}, true, fmt.Errorf("%w: malformed record reference %q", ErrBadSignature, sig)
	}
	return RecordRef{Key: parts[0], Record: parts[1], Index: index, Nonce: parts[3]}, true, nil
}

// IsRecordRef reports whether sig refers to a signature record.
func IsRecordRef(sig string) bool { return strings.Count(sig, ":") == 3 }

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Expand returns the inline group rathsig a reference stands for, given the
// record it names (its stored body): ParseRecord, then Record.Expand.
func Expand(ref RecordRef, record []byte) (string, error) {
	r, err := ParseRecord(ref.Record, record)
	if err != nil {
		return "", err
	}
	return r.Expand(ref)
}

// ReplaceSig returns a copy of a ledger-written body whose rathsig, old,
// is replaced by sig; false if the body does not end with that rathsig, as
// the ledger writes it (AttachSig). The chain hash does not cover rathsig,
// so the copy verifies as the original does.
func ReplaceSig(body []byte, old, sig string) ([]byte, bool) {
	tail := `,"` + ExtSig + `":"` + old + `"}`
	if len(body) < len(tail) || string(body[len(body)-len(tail):]) != tail {
		return nil, false
	}
	out := make([]byte, 0, len(body)-len(old)+len(sig))
	out = append(out, body[:len(body)-len(old)-2]...)
	out = append(out, sig...)
	return append(out, `"}`...), true
}
