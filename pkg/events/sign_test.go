package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

var testKey = func() *events.SigningKey {
	k, err := events.GenerateSigningKey()
	if err != nil {
		panic(err)
	}
	return k
}()

// A sealed event carries a signature over its session, sequence and hash that
// only the signing key's keyring accepts, and that names exactly that place.
func TestSealSignsTheChainHash(t *testing.T) {
	ev, err := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	body, hash, err := events.Seal(&ev, 3, strings.Repeat("a", 64), testKey)
	if err != nil {
		t.Fatal(err)
	}
	st, err := events.ParseStored(body)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sig == "" || st.Sig != events.Sig(ev) || events.SigKeyID(st.Sig) != testKey.Public().ID {
		t.Fatalf("stored rathsig %q, event %q, key %s", st.Sig, events.Sig(ev), testKey.Public().ID)
	}
	if got, err := events.ComputeHash(body); err != nil || got != hash {
		t.Fatalf("the signature must not be covered by the hash: %s %v, sealed %s", got, err, hash)
	}
	ring := events.NewKeyring(testKey.Public())
	if err := ring.Verify("s1", 3, hash, st.Sig); err != nil {
		t.Fatalf("verify: %v", err)
	}
	other, _ := events.GenerateSigningKey()
	cases := []struct {
		name    string
		ring    events.Keyring
		session string
		seq     uint64
		hash    string
		sig     string
		want    error
	}{
		{"other session", ring, "s2", 3, hash, st.Sig, events.ErrBadSignature},
		{"other seq", ring, "s1", 4, hash, st.Sig, events.ErrBadSignature},
		{"other hash", ring, "s1", 3, strings.Repeat("b", 64), st.Sig, events.ErrBadSignature},
		{"unsigned", ring, "s1", 3, hash, "", events.ErrUnsigned},
		{"untrusted key", events.NewKeyring(other.Public()), "s1", 3, hash, st.Sig, events.ErrUnknownKey},
		{"forged with another key under this key's ID", ring, "s1", 3, hash, testKey.Public().ID + ":" + strings.SplitN(sign(t, other, "s1", 3, hash), ":", 2)[1], events.ErrBadSignature},
		{"garbage", ring, "s1", 3, hash, testKey.Public().ID + ":!!", events.ErrBadSignature},
	}
	for _, c := range cases {
		if err := c.ring.Verify(c.session, c.seq, c.hash, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// Keys survive their PEM files, with the same ID.
func TestKeyFilesRoundTrip(t *testing.T) {
	priv, err := events.MarshalPrivateKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	k, err := events.ParsePrivateKey(priv)
	if err != nil || k.Public().ID != testKey.Public().ID {
		t.Fatalf("private key round trip: %v", err)
	}
	pub, err := events.MarshalPublicKey(testKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	p, err := events.ParsePublicKey(pub)
	if err != nil || p.ID != testKey.Public().ID {
		t.Fatalf("public key round trip: %v", err)
	}
	if _, err := events.ParsePrivateKey(pub); err == nil {
		t.Fatal("a public key file was accepted as a private key")
	}
	if d, err := events.DecodePublicKey(events.EncodePublicKey(p.Key)); err != nil || d.ID != p.ID {
		t.Fatalf("base64url round trip: %v", err)
	}
}

// StoredHash agrees with ComputeHash on what the ledger stores, and on
// bodies in any other JSON form.
func TestStoredHashAgreesWithComputeHash(t *testing.T) {
	ev, _ := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "a <b> & \"c\""})
	body, hash, err := events.Seal(&ev, 1, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, same, err := events.StoredHash(body, hash); err != nil || !same || got != hash {
		t.Fatalf("ledger body: %s %v %v", got, same, err)
	}
	altered := []byte(strings.Replace(string(body), `"a <b>`, `"A <b>`, 1))
	if _, same, _ := events.StoredHash(altered, hash); same {
		t.Fatal("an altered body hashed to the sealed hash")
	}
	// The same event in another member order: only the canonical form
	// hashes to the sealed hash.
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	pretty, _ := json.MarshalIndent(m, "", "  ")
	if got, same, err := events.StoredHash(pretty, hash); err != nil || !same || got != hash {
		t.Fatalf("re-encoded body: %s %v %v", got, same, err)
	}
}

// Members added after the hash are read by a parser but would not be hashed
// by a shortcut over the bytes before it: such a body must not verify as the
// ledger's.
func TestStoredHashRefusesMembersAfterTheHash(t *testing.T) {
	ev, _ := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "real"})
	body, hash, err := events.Seal(&ev, 1, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, forged := range map[string]string{
		"data after the signature": strings.TrimSuffix(string(body), "}") + `,"data":{"role":"user","content":"FORGED"}}`,
		"type after the hash":      strings.Replace(string(body), `,"rathsig"`, `,"type":"rath.session.closed","rathsig"`, 1),
		"data inside the sig":      strings.Replace(string(body), `,"rathsig":"`, `,"rathsig":"x","data":{"content":"FORGED"},"y":"`, 1),
	} {
		st, perr := events.ParseStored([]byte(forged))
		if _, same, err := events.StoredHash([]byte(forged), hash); err == nil && same {
			t.Errorf("%s: hashed as the sealed event; a reader sees %s %s (%v)", name, st.Type, st.Data, perr)
		}
	}
}

func sign(t *testing.T, k *events.SigningKey, session string, seq uint64, hash string) string {
	t.Helper()
	sig, err := k.Sign(session, seq, hash)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}
