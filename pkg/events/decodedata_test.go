package events_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// stdDecodeData is what DecodeData must agree with: encoding/json into the
// kind's type.
func stdDecodeData(typ string, data []byte) (any, error) {
	k, _ := events.Lookup(typ)
	v := k.New()
	err := json.Unmarshal(data, v)
	return v, err
}

// decodeDataCases are data of a tool's completion that encoding/json reads
// in its own ways: names in another case, a name twice, escapes, invalid
// UTF-8, nulls, and data it refuses.
var decodeDataCases = []string{
	`{"call_id":"c1","tool":"run","result":"line\n\"quoted\"\ttab \u00e9 \ud83d\ude00","exit_code":0,"duration_ms":3}`,
	`{"CALL_ID":"c1","Tool":"run","exit_code":1,"duration_ms":2}`,
	`{"call_id":"a","call_id":"b","exit_code":0,"duration_ms":0}`,
	"{\"call_id\":\"c\",\"result\":\"bad \xff\xfe utf-8\",\"exit_code\":0,\"duration_ms\":0}",
	`{"call_id":"c","result":"\ud83d lone","exit_code":0,"duration_ms":0}`,
	`{"call_id":null,"sandbox":null,"exit_code":0,"duration_ms":0}`,
	`{"call_id":"c","sandbox":{"backend":"bwrap","host":"h"},"exit_code":0,"duration_ms":0,"unknown":[1,{"x":2}]}`,
	`{"call_id":"c","exit_code":1.0,"duration_ms":0}`,
	`{"call_id":"c","exit_code":"1","duration_ms":0}`,
	`{"call_id":"c","exit_code":1e400,"duration_ms":0}`,
	`{"call_id":5}`,
	`[]`, `"x"`, `{`, `{"call_id":"c",}`,
}

func TestDecodeDataMatchesEncodingJSON(t *testing.T) {
	check := func(typ string, data []byte) {
		t.Helper()
		got, err := events.DecodeData(typ, data)
		want, wantErr := stdDecodeData(typ, data)
		if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s %q: DecodeData = %+v, %v; encoding/json: %+v, %v", typ, data, got, err, want, wantErr)
		}
	}
	for _, c := range decodeDataCases {
		check(events.TypeToolCompleted, []byte(c))
	}
	for _, k := range events.Kinds() {
		golden, err := os.ReadFile(filepath.Join("testdata", k.Schema))
		if err != nil {
			t.Fatal(err)
		}
		check(k.Type, golden)
	}
}

func FuzzDecodeData(f *testing.F) {
	for _, c := range decodeDataCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return // absent data is the empty object (DecodeData's doc)
		}
		got, err := events.DecodeData(events.TypeToolCompleted, data)
		want, wantErr := stdDecodeData(events.TypeToolCompleted, data)
		if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: DecodeData = %+v, %v; encoding/json: %+v, %v", data, got, err, want, wantErr)
		}
	})
}

func FuzzValidJSON(f *testing.F) {
	for _, c := range decodeDataCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(" {} "))
	f.Add([]byte("{} {}"))
	f.Add([]byte("\"\xff\""))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := events.ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid: %v", b, got, want)
		}
	})
}
