package console

import "testing"

// A task's line in the list is its first line that says something, without
// the markdown that marks it up; names with underscores and stars inside
// words stay as they are.
func TestPlainLine(t *testing.T) {
	for _, tc := range []struct{ md, want string }{
		{"# Slugs keep capitals and punctuation\n\n`slug.Make(\"Rath: durable sessions!\")` returns…", "Slugs keep capitals and punctuation"},
		{"\n\n## **Fix** the `parse_config` test\nmore", "Fix the parse_config test"},
		{"> *Quoted* [link text](https://example.com) and ![an image](x.png)", "Quoted link text and an image"},
		{"- [ ] make TestAdd pass", "make TestAdd pass"},
		{"1. first step\n2. second", "first step"},
		{"```go\ncode\n```", "code"},
		{"Title\n=====\nbody", "Title"},
		{"---\nafter a rule", "after a rule"},
		{"a*b*c and snake_case_name stay", "a*b*c and snake_case_name stay"},
		{"fix the failing test", "fix the failing test"},
		{"", ""},
	} {
		if got := plainLine(tc.md, 160); got != tc.want {
			t.Errorf("plainLine(%q) = %q, want %q", tc.md, got, tc.want)
		}
	}
	if got := plainLine("# abcdefghij", 5); got != "abcd…" {
		t.Errorf("clipped: %q", got)
	}
}
