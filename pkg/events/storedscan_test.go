package events

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// TestScanStoredMatchesDecoder holds the stored-body scanner to the general
// decoder: on every body the ledger can seal it gives the same Stored or
// steps aside, and it steps aside on whatever it does not expect.
func TestScanStoredMatchesDecoder(t *testing.T) {
	var bodies [][]byte
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden files: %v", err)
	}
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := kindOfSchemaFile(filepath.Base(f))
		for _, text := range []string{"plain", `quo"te \ back`, "line\nbreak\ttab", "é 漢字 😀 \u2028", ""} {
			e := event.New()
			e.SetID("id-" + text)
			e.SetType(k.Type)
			e.SetSource("rath/test " + text)
			e.SetSubject("s-1")
			e.SetTime(time.Date(2026, 11, 22, 3, 4, 5, i*1000+7, time.UTC))
			if text != "" {
				e.SetExtension(ExtCausation, "cause "+text)
				e.SetExtension(ExtCorrelation, "corr")
				e.SetExtension(ExtTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				e.SetExtension(ExtActor, "rath/memory-svc")
				e.SetExtension(ExtOnBehalf, "acme/alice "+text)
				if i%2 == 0 {
					e.SetExtension(ExtTenant, "acme")
				}
			}
			if err := e.SetData(event.ApplicationJSON, data); err != nil {
				t.Fatal(err)
			}
			e.DataBase64 = false
			for _, seq := range []uint64{1, 42} {
				prev := ""
				if seq > 1 {
					prev = strings.Repeat("ab", 32)
				}
				body, _, err := Seal(&e, seq, prev, testKey)
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, body)
			}
		}
	}
	noData := event.New()
	noData.SetID("n")
	noData.SetType(TypeSessionPaused)
	noData.SetSource("rath")
	noData.SetSubject("s-1")
	body, _, err := Seal(&noData, 3, "x", testKey)
	if err != nil {
		t.Fatal(err)
	}
	bodies = append(bodies, body)

	scanned := 0
	for _, body := range bodies {
		want, err := decodeStored(body)
		if err != nil {
			t.Fatalf("decoder: %v on %s", err, body)
		}
		got, ok := scanStored(body)
		if !ok {
			if !strings.Contains(string(body), `\`) {
				t.Fatalf("the scanner stepped aside on a body without escapes: %s", body)
			}
			continue
		}
		scanned++
		if !got.Time.Equal(want.Time) {
			t.Fatalf("time %v, want %v in %s", got.Time, want.Time, body)
		}
		got.Time, want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanned %+v\nwant    %+v\nof %s", got, want, body)
		}
	}
	if scanned < len(bodies)/2 {
		t.Fatalf("scanned %d of %d bodies", scanned, len(bodies))
	}

	// What it does not expect goes to the decoder, which decides.
	for _, odd := range []string{
		`{ "id":"a","rathseq":1}`, `{"id":"a","rathseq":"1"}`, `{"id":"a\"b","rathseq":1}`, `{"i\"d":"a"}`,
		`{"id":"a","rathseq":-1}`, `{"id":"a"`, `["id"]`, `{"id":"a",}`, `{"id":"a","time":"yesterday"}`, `{"id":"a","data":{"x":[1,2}}`, `{"ID":"a"}`, `{"id":"a","Rathseq":1}`,
	} {
		if s, ok := scanStored([]byte(odd)); ok {
			t.Fatalf("scanned %q as %+v", odd, s)
		}
	}
}
