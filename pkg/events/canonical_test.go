package events

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// TestCanonicalMatchesJCS holds the direct canonical writer to the general
// path (structured JSON through the JCS library) on every catalog example and
// on strings and data chosen to hit each escaping and ordering rule.
func TestCanonicalMatchesJCS(t *testing.T) {
	strs := []string{
		"", "plain", `quote " and backslash \ and slash /`, "tab\tnewline\nreturn\rbell\x07nul\x00del\x7f",
		"\b\f\x1f", "html <b>&amp;</b>", "é ü 漢字 😀", "line sep \u2028 para sep \u2029", "\ufeffbom",
	}
	datas := []string{
		`{"role":"user","content":"x"}`,
		`{"z":1,"a":{"y":[3,2,1],"b":true,"a":null},"m":"\u00e9\n"}`,
		`{"n":[1.0,1e3,-0,0.000001,1e-7,123456789012345678901234567890,5e-324,1.7976931348623157e308]}`,
		`{"€":1,"$":2,"😀":3,"ö":4,"A":5,"a":6}`,
		`{"s":"\ud83d\ude00 \u2028 \u001f \/"}`,
	}
	var evs []event.Event
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden files: %v (%d)", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		k, ok := kindOfSchemaFile(filepath.Base(f))
		if !ok {
			t.Fatalf("%s: no kind", f)
		}
		e := event.New()
		e.SetID(NewID())
		e.SetType(k.Type)
		e.SetSource("rath/test")
		e.SetSubject("s-1")
		e.SetTime(time.Date(2026, 11, 22, 3, 4, 5, 123456789, time.UTC))
		if err := e.SetData(event.ApplicationJSON, b); err != nil {
			t.Fatal(err)
		}
		e.DataBase64 = false // SetData marks bytes base64; the ledger stores JSON data as JSON
		evs = append(evs, e)
	}
	for i, s := range strs {
		for j, d := range datas {
			e := event.New()
			e.SetID(fmt.Sprintf("id-%d-%d %s", i, j, s))
			e.SetType(TypeChunkAppended)
			e.SetSource("urn:rath:" + fmt.Sprint(i))
			if j%2 == 0 {
				e.SetSubject(s)
				e.SetDataSchema("https://example.com/schema/x.json")
			}
			e.SetTime(time.Date(2026, 1, 2, 3, 4, 5, j*1000, time.FixedZone("x", 3600)))
			e.SetExtension(ExtCausation, s)
			e.SetExtension("zzflag", j%2 == 0)
			e.SetExtension("aanumber", int32(-j*1000))
			if err := e.SetData(event.ApplicationJSON, []byte(d)); err != nil {
				t.Fatal(err)
			}
			e.DataBase64 = false
			evs = append(evs, e)
		}
	}
	noData := event.New()
	noData.SetID("no-data")
	noData.SetType(TypeSessionPaused)
	noData.SetSource("rath")
	evs = append(evs, noData)

	fast := 0
	for _, e := range evs {
		for _, seq := range []uint64{1, 7} {
			prev := ""
			if seq > 1 {
				prev = "ab12"
			}
			e.SetExtension(ExtSeq, int64(seq))
			if prev != "" {
				e.SetExtension(ExtPrev, prev)
			}
			want, err := canonicalGeneral(&e)
			if err != nil {
				t.Fatalf("%s: %v", e.ID(), err)
			}
			got, ok := canonicalEvent(&e)
			if !ok {
				continue
			}
			fast++
			if string(got) != string(want) {
				t.Fatalf("event %q:\n got  %s\n want %s", e.ID(), got, want)
			}
		}
	}
	if fast != 2*len(evs) {
		t.Fatalf("the direct writer handled %d of %d events; every one here is in its domain", fast, 2*len(evs))
	}
}

// TestCanonicalFallsBack covers what the direct writer leaves to the general
// path: base64 data is sealed as data_base64; a string that is not UTF-8
// cannot be canonicalised and is refused.
func TestCanonicalFallsBack(t *testing.T) {
	e := event.New()
	e.SetID("x")
	e.SetType(TypeChunkAppended)
	e.SetSource("rath")
	e.SetSubject("bad \xff utf8")
	if err := e.SetData(event.ApplicationJSON, []byte(`{"role":"user","content":"x"}`)); err != nil {
		t.Fatal(err)
	}
	e.DataBase64 = false
	if _, ok := canonicalEvent(&e); ok {
		t.Fatal("invalid UTF-8 took the direct path")
	}
	if _, _, err := Seal(&e, 1, "", testKey); err == nil {
		t.Fatal("sealed a subject that is not UTF-8")
	}
	e.SetSubject("s-1")
	e.DataBase64 = true
	if _, ok := canonicalEvent(&e); ok {
		t.Fatal("base64 data took the direct path")
	}
	body, hash, err := Seal(&e, 1, "", testKey)
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	if got, err := ComputeHash(body); err != nil || got != hash {
		t.Fatalf("ComputeHash = %s, %v; want %s", got, err, hash)
	}
}

func kindOfSchemaFile(name string) (Kind, bool) {
	for _, k := range Kinds() {
		if k.Schema == name {
			return k, true
		}
	}
	return Kind{}, false
}
