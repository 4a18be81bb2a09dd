package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/openrath/rath/pkg/events"
)

// stdDecode is what decode stands in for.
func stdDecode(b []byte) (any, bool) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	return v, err == nil
}

var decodeCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+10`, `-12.25E-3`, `true`, `false`, `null`,
	` { "a" : [1, "x", {"b": null}], "c": true } `,
	`{"a":1,"a":2}`,
	`"tab\there \"quoted\" back\\slash \/ \b\f\n\r"`,
	`"\u00e9\u4e2d\ud83d\ude00"`,              // BMP and a surrogate pair
	`"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, // lone and reversed surrogates
	`"\ud83d\u0041"`,               // a high surrogate before a plain escape
	"\"caf\xc3\xa9 \xff\xfe bad\"", // invalid UTF-8 is replaced, not refused
	"\"\xff\"", "\"\\n\xff\"",
	// refused, by both
	`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `"\x"`, `"\u12"`, `"abc`, "\"a\x01\"",
	`{"a" 1}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `{} x`, ``, ` `, `"\`, `{"a":`, `[`,
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		got, ok := decode([]byte(c))
		want, wantOK := stdDecode([]byte(c))
		if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
			t.Errorf("decode(%q) = %#v, %v; encoding/json: %#v, %v", c, got, ok, want, wantOK)
		}
	}
}

func TestDecodeLeavesTooDeepToEncodingJSON(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if _, ok := decode([]byte(deep)); ok {
		t.Fatal("decode took a value nested past encoding/json's limit")
	}
	err := Validate(events.TypeToolCompleted, []byte(`{"call_id":"c","tool":"run","exit_code":0,"duration_ms":1,"result":`+deep+`}`))
	if err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Fatalf("Validate of too deep data = %v, want the invalid JSON refusal", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decode(b)
		want, wantOK := stdDecode(b)
		if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
			t.Fatalf("decode(%q) = %#v, %v; encoding/json: %#v, %v", b, got, ok, want, wantOK)
		}
	})
}

func BenchmarkValidateToolResult(b *testing.B) {
	const line = "tool output: a line of a command's result, as it printed it\n"
	data, _ := json.Marshal(map[string]any{"call_id": "c1", "tool": "run", "exit_code": 0, "duration_ms": 1,
		"result": strings.Repeat(line, 16384/len(line)+1)[:16384]})
	for b.Loop() {
		if err := Validate(events.TypeToolCompleted, data); err != nil {
			b.Fatal(err)
		}
	}
}
