package ledger

import (
	"fmt"
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
	for i := range n {
		wg.Go(func() {
			sigs[i] = s.sign(events.Leaf{Session: fmt.Sprintf("s%d", i), Seq: uint64(i + 1), Hash: strings.Repeat("a", 64)})
		})
	}
	wg.Wait()
	for i, sig := range sigs {
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
