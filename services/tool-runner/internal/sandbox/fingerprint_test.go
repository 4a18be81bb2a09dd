package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Entries changed within the racy window are read by content, and so are
// the entries the earlier walk read: two walks that read different sets
// never match, and a tree whose recent changes are too large to read gets
// no fingerprint. Not parallel: it moves the package's clock.
func TestFingerprintReadsRacyEntriesByContent(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"a": "one\n", "sub/b": "two\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The clock is set back so that the files count as just written
	// however slowly the test runs.
	defer func(c func() time.Time) { clock = c }(clock)
	clock = func() time.Time { return time.Now().Add(-time.Hour) }
	now, racy := fp(t, dir, nil)
	if !racy["a"] || !racy["sub/b"] || racy["sub"] || len(racy) != 2 {
		t.Fatalf("racy entries %v, want the two files just written", racy)
	}
	if again, _ := fp(t, dir, racy); again != now {
		t.Fatal("the same tree read twice gave two fingerprints")
	}

	// A second later, the files' times tell: read by metadata alone unless
	// the earlier walk's set is given.
	clock = func() time.Time { return time.Now().Add(time.Second) }
	later, none := fp(t, dir, nil)
	if len(none) != 0 || later == now {
		t.Fatalf("a second later: racy %v, same fingerprint %v; want none read by content and a different form", none, later == now)
	}
	if withSet, _ := fp(t, dir, racy); withSet != now {
		t.Fatal("a second later, with the earlier walk's set, the unchanged tree gave another fingerprint")
	}

	// Too much to read: no fingerprint, the caller asks git.
	clock = func() time.Time { return time.Now().Add(-time.Hour) }
	if err := os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("x", racyBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, _ := fp(t, dir, nil); sum != "" {
		t.Fatalf("a tree with %d bytes changed just now has fingerprint %q, want none", racyBytes+1, sum)
	}
}

func fp(t *testing.T, dir string, byContent map[string]bool) (string, map[string]bool) {
	t.Helper()
	sum, racy, err := fingerprint(dir, byContent)
	if err != nil {
		t.Fatal(err)
	}
	return sum, racy
}
