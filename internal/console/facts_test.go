package console

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// A long result is cut where a character ends: a euro sign split by the
// cut at maxResult is left out, not shown as half a character.
func TestResultFactCutsWhereACharacterEnds(t *testing.T) {
	result := strings.Repeat("a", maxResult-1) + "€€"
	facts := resultFact(context.Background(), nil, result, "")
	if len(facts) != 1 {
		t.Fatalf("facts %+v, want one", facts)
	}
	got := facts[0].Value
	if !utf8.ValidString(got) {
		t.Fatalf("the result shown is not valid UTF-8: ends %q", got[maxResult-4:])
	}
	want := strings.Repeat("a", maxResult-1) + "\n… (" // the split € is left out
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, fmt.Sprintf("(%d bytes in all)", len(result))) {
		t.Fatalf("result shown ends %q", got[maxResult-8:])
	}
}
