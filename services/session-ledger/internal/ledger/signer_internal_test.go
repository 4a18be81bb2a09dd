package ledger

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// Many concurrent callers each get a signature of their own event, in
// groups of at most MaxGroup, and the signer ends idle.
func TestSignerServesEveryCallerOnce(t *testing.T) {
	key, err := events.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &signer{key: key}
	ring := events.NewKeyring(key.Public())
	const n = 200
	var wg sync.WaitGroup
	sigs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sigs[i], errs[i] = s.sign(events.Leaf{Session: fmt.Sprintf("s%d", i), Seq: uint64(i + 1), Hash: strings.Repeat("a", 64)})
		})
	}
	wg.Wait()
	for i, sig := range sigs {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if err := ring.Verify(fmt.Sprintf("s%d", i), uint64(i+1), strings.Repeat("a", 64), sig); err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		if parts := strings.Split(sig, ":"); len(parts) == 6 {
			if size, err := strconv.Atoi(parts[3]); err != nil || size > events.MaxGroup {
				t.Fatalf("a group of %s", parts[3])
			}
		}
	}
	if s.busy || len(s.queue) != 0 {
		t.Fatalf("signer not idle after: busy %v, %d queued", s.busy, len(s.queue))
	}
}

// failing is an external signer that cannot sign (a KMS out of reach).
type failing struct{ pub ed25519.PublicKey }

func (f failing) Public() crypto.PublicKey { return f.pub }
func (f failing) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return nil, errors.New("the KMS is out of reach")
}

// When the key cannot sign, every waiting caller gets the error (no event
// is stored unsigned) and the signer is idle after, ready for the next.
func TestSignerFailureReachesEveryCaller(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := events.NewSigner(failing{pub})
	if err != nil {
		t.Fatal(err)
	}
	s := &signer{key: key}
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.sign(events.Leaf{Session: "s", Seq: uint64(i + 1), Hash: strings.Repeat("a", 64)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "out of reach") {
			t.Fatalf("caller %d: %v, want the signer's error", i, err)
		}
	}
	if _, err := s.signAll([]events.Leaf{{Session: "s", Seq: 1, Hash: strings.Repeat("a", 64)}}); err == nil {
		t.Error("signAll with a failing key")
	}
	if s.busy || len(s.queue) != 0 {
		t.Fatalf("signer not idle after: busy %v, %d queued", s.busy, len(s.queue))
	}
}
