package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go"
)

func TestCheckText(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"plain", `{"a":"b"}`, ""},
		{"multibyte", `{"a":"é😀"}`, ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, ""},
		{"upper-case pair", `{"a":"\uD83D\uDE00"}`, ""},
		{"escaped backslash then u", `{"a":"\\ud800"}`, ""},
		{"escaped quote", `{"a":"\"\ud800"}`, `lone surrogate \ud800 at offset 8`},
		{"lone high", `{"a":"\ud800"}`, `lone surrogate \ud800 at offset 6`},
		{"high at the end", `{"a":"x\udbff"}`, `lone surrogate \udbff`},
		{"high then BMP escape", `{"a":"\ud800\u0041"}`, `lone surrogate \ud800`},
		{"two highs", `{"a":"\ud800\ud800"}`, `lone surrogate \ud800`},
		{"lone low", `{"a":"\udfff"}`, `lone surrogate \udfff`},
		{"invalid byte", "{\"a\":\"\xff\"}", "not UTF-8: byte 0xff at offset 6"},
		{"truncated sequence", "{\"a\":\"\xe2\x82\"}", "not UTF-8: byte 0xe2"},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkText([]byte(tc.in))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
}

func TestFromNATSRefusesOtherSpecVersions(t *testing.T) {
	for _, body := range []string{
		`{"specversion":"0.3","id":"1","source":"s","type":"t"}`,
		`{"specversion":"1.1","id":"1","source":"s","type":"t"}`,
	} {
		_, err := FromNATS(nats.Header{}, []byte(body))
		if err == nil || !strings.Contains(err.Error(), "specversion") {
			t.Errorf("%s: got %v, want a malformed specversion", body, err)
		}
	}
	if _, err := FromNATS(nats.Header{}, []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t"}`)); err != nil {
		t.Errorf("1.0 refused: %v", err)
	}
}

// A media type is case-insensitive, but the CloudEvents SDK lower-cases it
// when writing data and not when reading: a binary event's type is written
// canonically, and a structured one that is not is refused (the fuzzer found
// "ApplICAtion/json" data that re-read as a string).
func TestFromNATSMediaTypeCase(t *testing.T) {
	h := nats.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"0"}, "Ce-Source": {"0"}, "Ce-Type": {"0"}, "Content-Type": {" ApplICAtion/JSON"}}
	e, err := FromNATS(h, []byte(`{}`))
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	if got := e.DataContentType(); got != "application/json" {
		t.Fatalf("binary datacontenttype %q, want application/json", got)
	}
	b, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromNATS(nats.Header{}, b); err != nil {
		t.Fatalf("re-reading %s: %v", b, err)
	}
	e, err = FromNATS(h, []byte(`x`))
	if err != nil || e.DataContentType() != "application/json" {
		t.Fatalf("binary with parameters: %v %q", err, e.DataContentType())
	}
	for _, ct := range []string{"Application/json", " application/json", "TEXT/plain; charset=utf-8"} {
		body := `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"` + ct + `","data":"a"}`
		_, err := FromNATS(nats.Header{}, []byte(body))
		if err == nil || !strings.Contains(err.Error(), "lower case") {
			t.Errorf("structured %q: got %v, want a refusal naming the case", ct, err)
		}
	}
	if _, err := FromNATS(nats.Header{}, []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"text/plain; charset=UTF-8","data":"a"}`)); err != nil {
		t.Errorf("parameters keep their spelling: %v", err)
	}
}

// FuzzCheckText holds checkText to the canonical form: a JSON string it
// accepts, RFC 8785 can canonicalise.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\"", `"\\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' || !json.Valid(b) || checkText(b) != nil {
			return
		}
		if _, err := jcs.Transform(b); err != nil {
			t.Fatalf("checkText accepted %q, canonical form failed: %v", b, err)
		}
	})
}

// A member of the event named twice is refused, whatever its spelling: the
// SDK would keep the last, and another reader the first. Twice inside data
// (or any nested object) is not this check's: the canonical form refuses it.
func TestFromNATSRefusesAMemberTwice(t *testing.T) {
	const head = `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"application/json",`
	for body, name := range map[string]string{
		head + `"data":{"a":1},"data":{"a":2}}`:         "data",
		head + `"data":{"a":1},"d\u0061ta":{"a":2}}`:    "data",
		head + `"data":1,"id":"2"}`:                     "id",
		head + `"subject":"a","data":{},"subject":"b"}`: "subject",
	} {
		_, err := FromNATS(nats.Header{}, []byte(body))
		if err == nil || !strings.Contains(err.Error(), `member "`+name+`" appears twice`) {
			t.Errorf("%s: %v, want %q named twice", body, err, name)
		}
	}
	for _, body := range []string{
		head + `"data":{"data":{"data":1},"id":["id","id"]},"subject":"data"}`,
		head + `"data":"a \"data\": , \\"}`,
	} {
		if _, err := FromNATS(nats.Header{}, []byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
