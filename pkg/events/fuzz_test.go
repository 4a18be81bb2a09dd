package events

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go"
)

// The fuzz tests' seed corpora are real inputs: the catalog's golden data,
// the bodies the ledger seals from them, and the odd bodies and strings the
// table tests use; inputs a fuzzer once failed on are kept under
// testdata/fuzz/<FuzzName>. The seeds run in every go test; .ci/run fuzzes
// each function briefly.

// goldenData returns the catalog's golden data files (testdata/*.json).
func goldenData(f *testing.F) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("golden files: %v (%d)", err, len(files))
	}
	out := make([][]byte, 0, len(files))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// sealedSeeds returns stored bodies as the ledger writes them, one per
// golden data file, with escapes in some attributes.
func sealedSeeds(f *testing.F) [][]byte {
	var bodies [][]byte
	for i, data := range goldenData(f) {
		e := event.New()
		e.SetID(NewID())
		e.SetType(TypeChunkAppended)
		e.SetSource("rath/test")
		e.SetSubject("s-1")
		e.SetTime(time.Date(2026, 11, 22, 3, 4, 5, i*1000+7, time.UTC))
		e.SetExtension(ExtCausation, "cause")
		e.SetExtension(ExtCorrelation, "corr \"quoted\"")
		e.SetExtension(ExtActor, "acme/alice")
		if err := e.SetData(event.ApplicationJSON, data); err != nil {
			f.Fatal(err)
		}
		e.DataBase64 = false
		body, _, err := Seal(&e, uint64(1+i%2), "", testKey)
		if err != nil {
			f.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	return bodies
}

// FuzzScanStored holds the stored-body scanner (which hands out substrings of
// the body through unsafe) to the general decoder: it never panics, and where
// both read a body they read the same Stored.
func FuzzScanStored(f *testing.F) {
	for _, b := range sealedSeeds(f) {
		f.Add(b)
	}
	for _, odd := range []string{
		`{ "id":"a","rathseq":1}`, `{"id":"a","rathseq":"1"}`, `{"id":"a\"b","rathseq":1}`, `{"i\"d":"a"}`,
		`{"id":"a","rathseq":-1}`, `{"id":"a"`, `["id"]`, `{"id":"a",}`, `{"id":"a","time":"yesterday"}`,
		`{"id":"a","data":{"x":[1,2}}`, `{}`, `{"data":null}`, `{"ID":"a"}`, `{"id":"a","id":"b"}`,
	} {
		f.Add([]byte(odd))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		body = bytes.Clone(body) // Stored aliases the body
		got, ok := scanStored(body)
		want, err := decodeStored(body)
		if !ok || err != nil {
			return
		}
		if !got.Time.Equal(want.Time) {
			t.Fatalf("time %v, decoder %v in %q", got.Time, want.Time, body)
		}
		got.Time, want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanned %+v\ndecoder %+v\nof %q", got, want, body)
		}
		if p, err := ParseStored(body); err != nil || p.ID != got.ID || p.Seq != got.Seq {
			t.Fatalf("ParseStored = %+v, %v; scanned %+v", p, err, got)
		}
	})
}

// FuzzCanonicalEvent holds the direct canonical writer to RFC 8785: what it
// writes is valid JSON, the JCS library leaves it as it is (canonical, so
// canonicalising it again is idempotent), and it is the general path's bytes
// (json.Marshal, then jcs.Transform).
func FuzzCanonicalEvent(f *testing.F) {
	strs := []string{"", "plain", `quote " and backslash \`, "tab\tnl\ncr\rbell\x07nul\x00del\x7f", "é 漢字 😀 \u2028", "\ufeffbom", "bad \xff"}
	for i, data := range goldenData(f) {
		s := strs[i%len(strs)]
		f.Add("id "+s, "rath/test", s, data, s, int32(-i), i%2 == 0)
	}
	for _, d := range []string{
		`{"z":1,"a":{"y":[3,2,1],"b":true,"a":null},"m":"\u00e9\n"}`,
		`{"n":[1.0,1e3,-0,0.000001,1e-7,123456789012345678901234567890,5e-324,1.7976931348623157e308]}`,
		`{"€":1,"$":2,"😀":3,"ö":4,"A":5,"a":6}`, `{"s":"\ud83d\ude00 \u2028 \u001f \/"}`, `"just a string"`, `[]`, `not json`,
	} {
		f.Add("id", "urn:rath:1", "s-1", []byte(d), "cause", int32(7), true)
	}
	f.Fuzz(func(t *testing.T, id, source, subject string, data []byte, ext string, n int32, flag bool) {
		e := event.New()
		e.SetID(id)
		e.SetType(TypeChunkAppended)
		e.SetSource(source)
		e.SetSubject(subject)
		e.SetTime(time.Date(2026, 1, 2, 3, 4, 5, int(n&0xffff)*1000, time.UTC))
		e.SetExtension(ExtCausation, ext)
		e.SetExtension("zzflag", flag)
		e.SetExtension("aanumber", n)
		if err := e.SetData(event.ApplicationJSON, data); err != nil {
			return
		}
		e.DataBase64 = false
		got, ok := canonicalEvent(&e)
		if !ok {
			return
		}
		if !json.Valid(got) {
			t.Fatalf("not JSON: %q", got)
		}
		again, err := jcs.Transform(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("not canonical:\n got   %q\n again %q (%v)", got, again, err)
		}
		want, err := canonicalGeneral(&e)
		if err != nil {
			t.Fatalf("the direct writer took an event the general path refuses (%v): %q", err, got)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("direct %q\ngeneral %q", got, want)
		}
	})
}

// FuzzFromNATS reads proposals as the ledger does, in either content mode:
// it never panics, an event it accepts re-serialises and re-reads to the
// same, and one the ledger can seal reads back from its stored body with the
// same attributes and a hash that verifies.
func FuzzFromNATS(f *testing.F) {
	for _, data := range goldenData(f) {
		e, err := NewRaw("s-1", TypeChunkAppended, data, WithCausation("c"), WithCorrelation("r"))
		if err != nil {
			f.Fatal(err)
		}
		b, err := Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
		f.Add(data, "ce-specversion: 1.0\nce-id: x%20y\nce-source: rath\nce-type: "+TypeChunkAppended+"\nce-subject: s-1\nce-causationid: c\nContent-Type: application/json")
	}
	for _, odd := range []string{
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","data":"\ud800"}`,
		`{"specversion":"0.3","id":"a","source":"rath","type":"t"}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","data_base64":"eyJ4IjoxfQ=="}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","rathexpectedseq":3,"time":"2026-01-02T03:04:05Z"}`,
		`not json`, `{}`,
	} {
		f.Add([]byte(odd), "")
	}
	f.Add([]byte(`{"x":1}`), "ce-specversion: 1.0\nce-id: a\nce-source: rath\nce-type: t\nce-time: 2026-01-02T03:04:05.5+01:00")
	f.Fuzz(func(t *testing.T, body []byte, headers string) {
		h := nats.Header{}
		for line := range strings.Lines(headers) {
			if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": "); ok {
				h.Add(k, v)
			}
		}
		e, err := FromNATS(h, body)
		if err != nil {
			return
		}
		b, err := Marshal(e)
		if err != nil {
			return // an attribute the SDK cannot write back (it refuses, it does not panic)
		}
		e2, err := FromNATS(nats.Header{"Content-Type": []string{ContentTypeStructured}}, b)
		if err != nil {
			t.Fatalf("re-reading %q: %v (read from %q, headers %q)", b, err, body, headers)
		}
		b2, err := Marshal(e2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("re-read differs:\n first  %q\n second %q (%v)", b, b2, err)
		}
		if _, _, err := ExpectedSeq(e); err != nil {
			return
		}
		stored, hash, err := Seal(&e, 1, "", testKey)
		if err != nil {
			return
		}
		s, err := ParseStored(stored)
		if err != nil {
			t.Fatalf("parse sealed %q: %v", stored, err)
		}
		if s.ID != e.ID() || s.Type != e.Type() || s.Source != e.Source() || s.Session != e.Subject() || s.Seq != 1 || s.Hash != hash {
			t.Fatalf("stored %+v\nfrom event %s", s, e)
		}
		if got, ok, err := StoredHash(stored, hash); !ok || err != nil {
			t.Fatalf("StoredHash = %s, %v, %v; sealed %s in %q", got, ok, err, hash, stored)
		}
		if got, err := ComputeHash(stored); err != nil || got != hash {
			t.Fatalf("ComputeHash = %s, %v; sealed %s in %q", got, err, hash, stored)
		}
	})
}
