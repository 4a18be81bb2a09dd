package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gowebpki/jcs"
)

// The chain hash of a stored event is the lowercase hex SHA-256 of the RFC 8785
// (JCS) canonical JSON of its structured-mode CloudEvent without the rathhash
// attribute. The rathprev attribute links each event to the one before it, so
// changing, inserting, removing or reordering any stored event breaks the
// chain from that point on. Any language with a JCS library can check it.

// Seal sets the event's sequence and previous hash, computes its chain hash,
// signs it with key (nil leaves it unsigned: only tests forge events) and
// returns the body to store (structured-mode JSON) and the hash.
func Seal(e *event.Event, seq uint64, prev string, key *SigningKey) ([]byte, string, error) {
	if seq == 0 || seq > math.MaxInt32 {
		// rathseq is a CloudEvents Integer (signed 32-bit).
		return nil, "", fmt.Errorf("seal event %s: sequence %d outside 1..%d", e.ID(), seq, math.MaxInt32)
	}
	e.SetExtension(ExtSeq, int64(seq))
	if prev != "" {
		e.SetExtension(ExtPrev, prev)
	} else {
		e.SetExtension(ExtPrev, nil) // nil deletes; Extensions() is a copy
	}
	e.SetExtension(ExtHash, nil)
	e.SetExtension(ExtSig, nil)
	canon, ok := canonicalEvent(e)
	if !ok {
		var err error
		if canon, err = canonicalGeneral(e); err != nil {
			return nil, "", fmt.Errorf("seal event %s: %w", e.ID(), err)
		}
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	e.SetExtension(ExtHash, hash)
	// The stored body is the canonical form with the hash (and the
	// signature, AttachSig) appended as last members; a verifier removes
	// them again before hashing.
	body := make([]byte, 0, len(canon)+len(hash)+14)
	body = append(body, canon[:len(canon)-1]...)
	body = append(body, `,"`+ExtHash+`":"`...)
	body = append(body, hash...)
	body = append(body, `"}`...)
	if key != nil {
		sig, err := key.Sign(e.Subject(), seq, hash)
		if err != nil {
			return nil, "", fmt.Errorf("seal event %s: %w", e.ID(), err)
		}
		body = AttachSig(e, body, sig)
	}
	return body, hash, nil
}

// canonicalGeneral is the RFC 8785 form of any event: its structured-mode
// JSON, canonicalised.
func canonicalGeneral(e *event.Event) ([]byte, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	return canon, nil
}

// ComputeHash recomputes the chain hash of a stored body, ignoring the
// rathhash and rathsig it carries. Compare the result with that claim to detect tampering.
func ComputeHash(body []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "", fmt.Errorf("compute hash: %w", err)
	}
	delete(m, ExtHash)
	delete(m, ExtSig)
	raw, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("compute hash: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("compute hash: canonicalize: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// StoredHash recomputes the chain hash of a stored body, like ComputeHash,
// and reports whether it is the hash the body claims. A body the ledger
// wrote is the canonical form with rathhash (and rathsig) appended, so its
// hash is taken over its own bytes without decoding them: the SHA-256 binds
// those bytes, and the ledger's signature binds the hash, so no other bytes
// can pass both. Any other body is canonicalised first (ComputeHash).
func StoredHash(body []byte, claimed string) (string, bool, error) {
	if i, ok := ledgerSuffix(body, claimed); ok {
		h := sha256.New()
		h.Write(body[:i])
		h.Write([]byte{'}'})
		var sum [sha256.Size]byte
		if got := hex.EncodeToString(h.Sum(sum[:0])); got == claimed {
			return got, true, nil
		}
	}
	got, err := ComputeHash(body)
	if err != nil {
		return "", false, err
	}
	return got, got == claimed, nil
}

// ledgerSuffix reports where the members the ledger appends to the canonical
// form begin, when body ends exactly as the ledger writes it:
// ,"rathhash":"<claimed>"}, or the same with ,"rathsig":"<key ID>:<base64url>"
// before the brace. Anything else after the hash (another member, a second
// "data") would be read by a parser but not hashed, so such a body takes the
// canonicalising path, which hashes what a parser reads.
func ledgerSuffix(body []byte, claimed string) (int, bool) {
	n := len(body)
	if n < 2 || body[n-1] != '}' || len(claimed) != 64 {
		return 0, false
	}
	end := n - 1 // index of the closing brace
	if s := bytes.LastIndex(body[:end], []byte(`,"`+ExtSig+`":"`)); s > 0 {
		v := body[s+len(`,"`+ExtSig+`":"`) : end]
		if len(v) < 2 || v[len(v)-1] != '"' || !sigChars(v[:len(v)-1]) {
			return 0, false
		}
		end = s
	}
	want := `,"` + ExtHash + `":"` + claimed + `"`
	i := end - len(want)
	if i <= 0 || string(body[i:end]) != want {
		return 0, false
	}
	return i, true
}

// sigChars reports whether b holds only what a rathsig value may: hex key ID,
// ':' and unpadded base64url.
func sigChars(b []byte) bool {
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == ':':
		default:
			return false
		}
	}
	return true
}
