package events

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The ledger signs every event it stores: rathsig is "<key ID>:<signature>",
// the signature an ed25519 signature (RFC 8032, unpadded base64url) over
//
//	rath.event.v1\n<session>\n<seq>\n<rathhash>
//
// so a signature names what it vouches for without the event, and an ack
// that carries it is a receipt a client can keep. Like rathhash, rathsig is
// not covered by the chain hash: the stored body is the canonical form of the
// event without both, with "rathhash" and then "rathsig" appended. The key ID
// is the first 16 hex digits of the SHA-256 of the raw public key.
//
// The ledger never chains an event onto one whose signature it has not
// checked, so a valid signature on a session's head vouches for every event
// before it (through the chain); a verifier hashes every event and checks the
// signature of the head, and of more events only to name where a bad one is.

// ExtSig is the ledger's signature of an event's chain hash; see SigningKey.
const ExtSig = "rathsig"

// Errors a Keyring's Verify returns, wrapped with the event's place.
var (
	// ErrUnsigned: the event carries no rathsig.
	ErrUnsigned = errors.New("not signed")
	// ErrUnknownKey: the key ID is not one the verifier trusts.
	ErrUnknownKey = errors.New("signed by an unknown key")
	// ErrBadSignature: the signature does not match the event.
	ErrBadSignature = errors.New("bad signature")
)

// SigningKey is what signs for a ledger: an Ed25519 private key in memory
// (NewSigningKey, ParsePrivateKey), or any crypto.Signer whose public key is
// Ed25519 (NewSigner) — a KMS's or a PKCS #11 module's — which keeps the
// private key out of the ledger's process and off its host.
type SigningKey struct {
	priv   ed25519.PrivateKey // nil for an external signer
	signer crypto.Signer
	pub    PublicKey
}

// PublicKey is a ledger's public key with its key ID.
type PublicKey struct {
	ID  string
	Key ed25519.PublicKey
}

// GenerateSigningKey makes a new random key.
func GenerateSigningKey() (*SigningKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	return NewSigningKey(priv), nil
}

// NewSigningKey wraps an ed25519 private key.
func NewSigningKey(priv ed25519.PrivateKey) *SigningKey {
	pub := priv.Public().(ed25519.PublicKey)
	return &SigningKey{priv: priv, signer: priv, pub: PublicKey{ID: KeyID(pub), Key: pub}}
}

// NewSigner wraps an external signer, whose public key must be Ed25519 and
// whose Sign (called with crypto.Hash(0), as Ed25519 signs the message
// itself) must return an Ed25519 signature; each one is verified before it
// is used, so a faulty signer fails the append instead of storing an event
// no verifier accepts.
func NewSigner(s crypto.Signer) (*SigningKey, error) {
	if priv, ok := s.(ed25519.PrivateKey); ok {
		return NewSigningKey(priv), nil
	}
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("signer: its public key is a %T, not an Ed25519 key", s.Public())
	}
	return &SigningKey{signer: s, pub: PublicKey{ID: KeyID(pub), Key: pub}}, nil
}

// sign signs msg.
func (k *SigningKey) sign(msg []byte) ([]byte, error) {
	if k.priv != nil {
		return ed25519.Sign(k.priv, msg), nil
	}
	sig, err := k.signer.Sign(rand.Reader, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("sign with key %s: %w", k.pub.ID, err)
	}
	if !ed25519.Verify(k.pub.Key, msg, sig) {
		return nil, fmt.Errorf("sign with key %s: the signer's signature does not verify", k.pub.ID)
	}
	return sig, nil
}

// KeyID is the ID of a public key: the first 16 hex digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Public returns the key's public half.
func (k *SigningKey) Public() PublicKey { return k.pub }

// Sign returns the rathsig value of the event at seq of session with the
// given chain hash.
func (k *SigningKey) Sign(session string, seq uint64, hash string) (string, error) {
	sig, err := k.sign(signedMessage(session, seq, hash))
	if err != nil {
		return "", err
	}
	return k.pub.ID + ":" + base64.RawURLEncoding.EncodeToString(sig), nil
}

func signedMessage(session string, seq uint64, hash string) []byte {
	b := make([]byte, 0, 14+len(session)+1+20+1+len(hash))
	b = append(b, "rath.event.v1\n"...)
	b = append(b, session...)
	b = append(b, '\n')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, '\n')
	b = append(b, hash...)
	return b
}

// Keyring is the set of public keys a verifier trusts, by key ID.
type Keyring map[string]ed25519.PublicKey

// NewKeyring returns a keyring of the given keys.
func NewKeyring(keys ...PublicKey) Keyring {
	r := make(Keyring, len(keys))
	for _, k := range keys {
		r[k.ID] = k.Key
	}
	return r
}

// Keys lists the keyring's keys in key ID order.
func (r Keyring) Keys() []PublicKey {
	out := make([]PublicKey, 0, len(r))
	for id, k := range r {
		out = append(out, PublicKey{ID: id, Key: k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SigKeyID returns the key ID a rathsig value names ("" if it names none).
func SigKeyID(sig string) string {
	id, _, ok := strings.Cut(sig, ":")
	if !ok {
		return ""
	}
	return id
}

// Known reports whether sig names a key of the keyring, without checking the
// signature itself: the cheap check a verifier makes on every event.
func (r Keyring) Known(sig string) error {
	if sig == "" {
		return ErrUnsigned
	}
	id := SigKeyID(sig)
	if _, ok := r[id]; !ok {
		return fmt.Errorf("%w %q", ErrUnknownKey, id)
	}
	return nil
}

// Verify checks that sig is a trusted key's signature of the event at seq of
// session with the given chain hash.
func (r Keyring) Verify(session string, seq uint64, hash, sig string) error {
	if err := r.Known(sig); err != nil {
		return err
	}
	id, parts := sigParts(sig)
	switch len(parts) {
	case 1:
	case 5:
		return verifyGroup(r[id], id, parts, session, seq, hash)
	case 3:
		return fmt.Errorf("%w: expand it with its record (events.Expand) first", ErrDetached)
	default:
		return fmt.Errorf("%w: not a single or a group signature", ErrBadSignature)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: not an ed25519 signature in base64url", ErrBadSignature)
	}
	if !ed25519.Verify(r[id], signedMessage(session, seq, hash), raw) {
		return fmt.Errorf("%w: key %s did not sign %s at %d with hash %s", ErrBadSignature, id, session, seq, shortHash(hash))
	}
	return nil
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// MarshalPrivateKey encodes a key as a PKCS #8 PEM block (what openssl
// reads); an external signer's key is not there to encode.
func MarshalPrivateKey(k *SigningKey) ([]byte, error) {
	if k.priv == nil {
		return nil, fmt.Errorf("marshal signing key %s: an external signer's, which does not leave it", k.pub.ID)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("marshal signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey decodes a PKCS #8 PEM ed25519 private key.
func ParsePrivateKey(data []byte) (*SigningKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("parse signing key: not a PEM \"PRIVATE KEY\" block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse signing key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse signing key: a %T, not an ed25519 key", k)
	}
	return NewSigningKey(priv), nil
}

// MarshalPublicKey encodes a public key as a PKIX PEM block.
func MarshalPublicKey(k PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k.Key)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKey decodes a PKIX PEM ed25519 public key.
func ParsePublicKey(data []byte) (PublicKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return PublicKey{}, errors.New("parse public key: not a PEM \"PUBLIC KEY\" block")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return PublicKey{}, fmt.Errorf("parse public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return PublicKey{}, fmt.Errorf("parse public key: a %T, not an ed25519 key", k)
	}
	return PublicKey{ID: KeyID(pub), Key: pub}, nil
}

// EncodePublicKey is a public key as unpadded base64url, the form replies and
// dossiers carry.
func EncodePublicKey(k ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(k) }

// DecodeNamedKey reads EncodePublicKey's form of a key said to have the ID
// id, and refuses it if its ID is another.
func DecodeNamedKey(id, encoded string) (PublicKey, error) {
	pub, err := DecodePublicKey(encoded)
	if err != nil {
		return PublicKey{}, err
	}
	if pub.ID != id {
		return PublicKey{}, fmt.Errorf("key %s: its ID is %s", id, pub.ID)
	}
	return pub, nil
}

// DecodePublicKey reads EncodePublicKey's form.
func DecodePublicKey(s string) (PublicKey, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("public key %q: not a base64url ed25519 key", s)
	}
	return PublicKey{ID: KeyID(raw), Key: ed25519.PublicKey(raw)}, nil
}

// IsSignatureFault reports whether err says a signature does not hold (not
// signed, an unknown key, a bad signature, a reference still to expand),
// rather than that it could not be checked now.
func IsSignatureFault(err error) bool {
	return errors.Is(err, ErrUnsigned) || errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrBadSignature) || errors.Is(err, ErrDetached)
}
