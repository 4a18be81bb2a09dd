package memory

import (
	"slices"
	"testing"
)

func names(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ItemID
	}
	return out
}

func TestTokenize(t *testing.T) {
	got := Tokenize("The flag_parse of TestAdd, in ÉTÉ-2024 is: fine!")
	want := []string{"flag", "parse", "testadd", "été", "2024", "fine"}
	if !slices.Equal(got, want) {
		t.Fatalf("Tokenize = %q, want %q", got, want)
	}
}

func TestIndexRanksByBM25(t *testing.T) {
	x := NewIndex()
	x.Put("both", 1, "config defaults and flag parsing", "project:a", nil)
	x.Put("rare", 1, "flag", "project:a", nil)
	x.Put("common", 1, "config config config", "project:a", nil)
	x.Put("long", 1, "config is mentioned once in a much longer text about many other unrelated things here", "project:a", nil)
	x.Put("none", 1, "nothing relevant", "project:a", nil)
	got := x.Search("config flag", nil, nil, 10)
	// Both terms beat one; the rarer term (flag) beats the commoner one;
	// repetition helps with saturation; a long document ranks lower.
	if want := []string{"both", "rare", "common", "long"}; !slices.Equal(names(got), want) {
		t.Fatalf("ranking %v, want %v (%+v)", names(got), want, got)
	}
	if got := x.Search("config flag", nil, nil, 2); len(got) != 2 {
		t.Fatalf("k=2 gave %d", len(got))
	}
	if got := x.Search("the of", nil, nil, 10); len(got) != 0 {
		t.Fatalf("stopword query found %v", names(got))
	}
}

func TestIndexFilters(t *testing.T) {
	x := NewIndex()
	x.Put("a", 1, "retry with backoff", "project:a", []string{"net", "go"})
	x.Put("b", 1, "retry with backoff", "project:b", []string{"net"})
	x.Put("c", 1, "retry with backoff", "agent:coder", nil)
	for _, tc := range []struct {
		scopes, tags, want []string
	}{
		{nil, nil, []string{"a", "b", "c"}},
		{[]string{"project:a", "agent:coder"}, nil, []string{"a", "c"}},
		{nil, []string{"net"}, []string{"a", "b"}},
		{nil, []string{"net", "go"}, []string{"a"}},
		{[]string{"project:b"}, []string{"go"}, nil},
	} {
		got := names(x.Search("retry", tc.scopes, tc.tags, 10))
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("scopes %v tags %v: %v, want %v", tc.scopes, tc.tags, got, tc.want)
		}
	}
}

func TestIndexReplaceAndRemove(t *testing.T) {
	x := NewIndex()
	x.Put("a", 1, "alpha beta", "user:u", nil)
	x.Put("b", 1, "beta gamma", "user:u", nil)
	x.Put("a", 2, "delta", "user:u", nil)
	if got := x.Search("alpha", nil, nil, 10); len(got) != 0 {
		t.Fatalf("replaced version still found: %+v", got)
	}
	if got := x.Search("delta", nil, nil, 10); len(got) != 1 || got[0].Version != 2 {
		t.Fatalf("new version: %+v", got)
	}
	x.Remove("b")
	x.Remove("b")
	if got := x.Search("beta gamma", nil, nil, 10); len(got) != 0 || x.Len() != 1 {
		t.Fatalf("after remove: %+v, len %d", got, x.Len())
	}
	x.Put("c", 1, "gamma", "user:u", nil) // reuses b's slot
	if got := x.Search("gamma", nil, nil, 10); len(got) != 1 || got[0].ItemID != "c" || x.Len() != 2 {
		t.Fatalf("after reuse: %+v", got)
	}
}
