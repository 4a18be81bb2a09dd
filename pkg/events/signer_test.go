package events_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// external is a signer outside the process, as a KMS or a PKCS #11 module
// would be: a crypto.Signer that is not an ed25519.PrivateKey, which may
// fail or lie.
type external struct {
	priv ed25519.PrivateKey
	fail error
	lie  bool
}

func (e *external) Public() crypto.PublicKey { return e.priv.Public() }

func (e *external) Sign(r io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if e.fail != nil {
		return nil, e.fail
	}
	if e.lie {
		msg = append([]byte("something else: "), msg...)
	}
	return e.priv.Sign(r, msg, opts)
}

func sealWith(t *testing.T, key *events.SigningKey) ([]byte, string, error) {
	t.Helper()
	ev, err := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	return events.Seal(&ev, 1, "", key)
}

// An external Ed25519 signer signs events, groups and records that the
// keyring verifies as the in-memory key's; its key cannot be written out;
// a signer that fails or returns a signature that does not verify fails
// the seal instead of storing an unverifiable event; a signer of another
// algorithm is refused.
func TestExternalSigner(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ext := &external{priv: priv}
	key, err := events.NewSigner(ext)
	if err != nil {
		t.Fatal(err)
	}
	if key.Public().ID != events.NewSigningKey(priv).Public().ID {
		t.Fatalf("the external signer's key ID %s, the key's %s", key.Public().ID, events.NewSigningKey(priv).Public().ID)
	}
	ring := events.NewKeyring(key.Public())
	body, hash, err := sealWith(t, key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := events.ParseStored(body)
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Verify("s1", 1, hash, st.Sig); err != nil {
		t.Fatalf("an external signer's event: %v", err)
	}
	leaves := []events.Leaf{{Session: "s", Seq: 1, Hash: strings.Repeat("a", 64)}, {Session: "s", Seq: 2, Hash: strings.Repeat("b", 64)}}
	for i, sig := range signGroup(t, key, leaves) {
		if err := ring.Verify(leaves[i].Session, leaves[i].Seq, leaves[i].Hash, sig); err != nil {
			t.Errorf("group member %d: %v", i, err)
		}
	}
	if _, err := events.MarshalPrivateKey(key); err == nil {
		t.Error("an external signer's key was marshalled")
	}

	ext.fail = errors.New("the KMS is unreachable")
	if _, _, err := sealWith(t, key); err == nil || !strings.Contains(err.Error(), "the KMS is unreachable") {
		t.Errorf("a failing signer: %v", err)
	}
	if _, err := key.SignGroup(leaves); err == nil {
		t.Error("a failing signer signed a group")
	}
	ext.fail, ext.lie = nil, true
	if _, _, err := sealWith(t, key); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a lying signer: %v", err)
	}

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewSigner(ec); err == nil || !strings.Contains(err.Error(), "not an Ed25519 key") {
		t.Errorf("an ECDSA signer: %v", err)
	}
	if k, err := events.NewSigner(priv); err != nil || k.Public().ID != key.Public().ID {
		t.Errorf("an in-memory key through NewSigner: %v", err)
	}
}
