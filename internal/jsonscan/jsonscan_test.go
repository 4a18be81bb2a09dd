package jsonscan

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeMembersMatchesUnmarshal(t *testing.T) {
	type sandbox struct {
		Backend string `json:"backend"`
	}
	type d struct {
		DurationMS int64    `json:"duration_ms"`
		Sandbox    *sandbox `json:"sandbox"`
	}
	long := strings.Repeat(`a line \"quoted\" \\ and {braces} [brackets], \n`, 400)
	for _, in := range []string{
		`{"call_id":"c","result":"` + long + `","duration_ms":12,"sandbox":{"backend":"bwrap","note":"}]\""}}`,
		` { "sandbox" : { "backend" : "local" } , "duration_ms" : 7 , "x" : [1,{"a":"\\"}] } `,
		`{"duration_ms":3}`, `{}`, `{"result":["` + long + `"],"duration_ms":-1}`,
		`{"duration_ms":1,"duration_ms":2}`, `{"sandbox":null,"duration_ms":0}`,
	} {
		var got, want d
		DecodeMembers([]byte(in), &got, "duration_ms", "sandbox")
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeMembers(%.60q) = %+v, json.Unmarshal %+v", in, got, want)
		}
	}
}

// TestDecodeMembersHostile: malformed input never panics and leaves v be.
func TestDecodeMembersHostile(t *testing.T) {
	for _, in := range []string{``, `{`, `[1]`, `"x"`, `{"duration_ms"`, `{"duration_ms":`, `{"duration_ms":"unterminated`,
		`{"a":{"b":[}`, `{"a":"\`, `{"duration_ms":1,`, `{"duration_ms":"not a number"}`, `{"duration_ms":1 "x":2}`, `{"duration_ms":{}}`} {
		v := struct {
			DurationMS int64 `json:"duration_ms"`
		}{DurationMS: 99}
		DecodeMembers([]byte(in), &v, "duration_ms")
		if v.DurationMS != 99 && v.DurationMS != 1 {
			t.Errorf("DecodeMembers(%q) set %d", in, v.DurationMS)
		}
	}
}

func TestValueEnd(t *testing.T) {
	for in, want := range map[string]int{`"a\"b"x`: 6, `{"a":"}"}x`: 9, `[1,[2]]x`: 7, `12,`: 2, `true}`: 4, `"\\"x`: 4, `"abc`: -1, `{"a":1`: -1, ``: -1, `,`: -1} {
		if got := ValueEnd([]byte(in), 0); got != want {
			t.Errorf("ValueEnd(%q) = %d, want %d", in, got, want)
		}
	}
}
