package eval

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func sameState(t *testing.T, expected json.RawMessage, actual string) bool {
	t.Helper()
	d, err := stateDiffs(expected, []byte(actual))
	if err != nil {
		t.Fatal(err)
	}
	return d == nil
}

// The expected-state grader's differences are internal/domainstate's,
// capped: the first ten and a count of the rest.
func TestStateDiffs(t *testing.T) {
	for _, tc := range []struct {
		name, expected, actual string
		diffs                  []string
	}{
		{"equal, keys in another order, numbers written otherwise", `{"a": null, "b": [1.0, 2.5, 100]}`, `{"b": [1, 2.50, 1e2], "a": null}`, nil},
		{"a value", `{"s": "cancelled"}`, `{"s": "shipped"}`, []string{`/s: expected "cancelled", got "shipped"`}},
		{"missing and extra keys", `{"a": 1, "b": [1]}`, `{"a": 1, "x": true}`, []string{"/b: expected [1], missing", "/x: not expected, got true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := stateDiffs(json.RawMessage(tc.expected), []byte(tc.actual)); err != nil || !slices.Equal(d, tc.diffs) {
				t.Errorf("diffs %q, %v\nwant %q", d, err, tc.diffs)
			}
		})
	}
	var got, want []string
	for i := range 15 {
		got, want = append(got, fmt.Sprint(i)), append(want, fmt.Sprint(-i-1))
	}
	d, err := stateDiffs(json.RawMessage("["+strings.Join(want, ",")+"]"), []byte("["+strings.Join(got, ",")+"]"))
	if err != nil || len(d) != 11 || d[10] != "and 5 more" {
		t.Errorf("15 differences: %q, %v", d, err)
	}
	// A workspace file that is not JSON is a grader failure, not a panic.
	for _, bad := range []string{"", "{", "1 2", "\xff", `{"a": NaN}`} {
		if _, err := stateDiffs(json.RawMessage(`{}`), []byte(bad)); err == nil || !strings.Contains(err.Error(), "not a JSON document") {
			t.Errorf("actual %q: %v", bad, err)
		}
	}
}

// What read_file returns, and what it adds to the file, is hostile input
// too: a file may end with text that looks like its notes.
func TestParseJSONRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"":            "not JSON: empty",
		"{":           "not JSON: unexpected EOF",
		"1 2":         "not JSON: more than one value",
		`{"a": 1} x`:  "not JSON: more than one value",
		"\xff":        "not JSON: invalid character",
		"[1, 2,]":     "not JSON: invalid character ']'",
		`{"a": NaN}`:  "not JSON: invalid character 'N'",
		"\x00{}":      "not JSON: invalid character",
		"[[[[[[[[[[]": "not JSON: unexpected EOF",
	} {
		if _, err := parseJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseJSON(%q) = %v, want %q", in, err, want)
		}
	}
	for in, want := range map[string]struct {
		out string
		cut bool
	}{
		"[empty file]": {"", false},
		"{}\n":         {"{}\n", false},
		"{\"a\":\n[showing lines 1-1; the file goes on: read on with offset=2]":      {"{\"a\":", true},
		"x\n[line 1 is longer than 262144 bytes and was cut; read on with offset=2]": {"x", true},
	} {
		if out, cut := readFileContent(in); out != want.out || cut != want.cut {
			t.Errorf("readFileContent(%q) = %q, %v", in, out, cut)
		}
	}
}
