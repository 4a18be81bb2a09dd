package events_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

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

// sdkUnmarshal is what events.Unmarshal must agree with: the SDK's decoder
// of valid JSON.
func sdkUnmarshal(b []byte) (event.Event, error) {
	var e event.Event
	err := e.UnmarshalJSON(b)
	return e, err
}

func FuzzUnmarshal(f *testing.F) {
	big := strings.Repeat("a line of a result\n\"quoted\" \\ é\t", 80)
	result, _ := json.Marshal(big)
	for _, head := range []string{
		`{"specversion":"1.0","id":"a","source":"rath","type":"rath.tool.call.completed","subject":"s","data":{"result":%s}}`,
		`{"data":{"result":%s},"specversion":"1.0","id":"a","source":"rath","type":"t","datacontenttype":"application/json"}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","datacontenttype":"text/plain","data":%s}`,
		`{"specversion":"0.3","id":"a","source":"rath","type":"t","data":{"r":%s}}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","data":{"r":%s},"data":1}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","d\u0061ta":{"r":%s}}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","data_base64":"eyJ4IjoxfQ==","data":{"r":%s}}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","rathseq":"x","data":[%s]}`,
		`{"specversion":"1.0","id":"a","source":"rath","type":"t","data":%s}`,
	} {
		f.Add([]byte(fmt.Sprintf(head, result)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // Unmarshal refuses it before any decoder sees it
		}
		got, err := events.Unmarshal(b)
		want, wantErr := sdkUnmarshal(b)
		if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: Unmarshal = %v, %v; the SDK: %v, %v", b, got, err, want, wantErr)
		}
	})
}

// The envelope is decoded around large JSON data of a 1.0 event, and the
// SDK is asked whenever it would treat the data otherwise.
func TestUnmarshalAroundData(t *testing.T) {
	result, _ := json.Marshal(strings.Repeat("a line of a result\n", 100))
	for _, c := range []struct {
		body  string
		taken bool
	}{
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","subject":"s","data":{"result":%s}}`, true},
		{`{"data":{"result":%s},"specversion":"1.0","id":"a","source":"rath","type":"t","datacontenttype":"application/json"}`, true},
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","data":{"result":"short"},"x":%s}`, false},
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","datacontenttype":"text/plain","data":%s}`, false},
		{`{"specversion":"0.3","id":"a","source":"rath","type":"t","data":{"r":%s}}`, false},
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","data":{"r":%s},"data":1}`, false},
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","d\u0061ta":{"r":%s}}`, false},
		{`{"specversion":"1.0","id":"a","source":"rath","type":"t","data_base64":"eyJ4IjoxfQ==","data":{"r":%s}}`, false},
	} {
		b := []byte(fmt.Sprintf(c.body, result))
		got, ok := events.UnmarshalAroundData(b)
		if ok != c.taken {
			t.Errorf("%.80s…: taken %v, want %v", b, ok, c.taken)
			continue
		}
		if want, err := sdkUnmarshal(b); ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("%.80s…: %v; the SDK: %v, %v", b, got, want, err)
		}
	}
}

// Marshal is the SDK's encoding compacted: the same event as json.Marshal's
// once read back, with data given with whitespace compacted and <, >, & and
// U+2028 left as they are.
func TestMarshalIsCompactAndReadsBack(t *testing.T) {
	e, err := events.NewRaw("s-1", events.TypeChunkAppended, []byte("{\n  \"turn_id\": \"t<1>&\u2028\",\n  \"content\": \"a b\"\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"data":{"turn_id":"t<1>&`+"\u2028"+`","content":"a b"}`) {
		t.Errorf("Marshal = %s, want the data compacted with its strings as they are", got)
	}
	std, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	a, err := events.Unmarshal(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.Unmarshal(std)
	if err != nil {
		t.Fatal(err)
	}
	var da, db any
	if json.Unmarshal(a.Data(), &da) != nil || json.Unmarshal(b.Data(), &db) != nil || !reflect.DeepEqual(da, db) ||
		a.ID() != b.ID() || a.Type() != b.Type() || a.Subject() != b.Subject() {
		t.Errorf("read back differently:\n%s\n%s", got, std)
	}
}
