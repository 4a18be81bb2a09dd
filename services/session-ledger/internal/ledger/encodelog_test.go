package ledger

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// TestEncodeLogIsLogReply checks the hand-written encoding against the
// reply server's encoding of the same reply, and that it decodes back whole.
func TestEncodeLogIsLogReply(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []json.RawMessage
		more bool
	}{
		{"none", nil, false},
		{"none, more", []json.RawMessage{}, true},
		{"one", []json.RawMessage{json.RawMessage(`{"id":"a","rathseq":1}`)}, false},
		{"several, more", []json.RawMessage{json.RawMessage(`{"id":"a","rathseq":1}`), json.RawMessage(`{"id":"b","data":{"s":"\u00e9,]} <a&b>"}}`)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := encodeLog(tc.evs, tc.more)
			evs := tc.evs
			if evs == nil {
				evs = []json.RawMessage{}
			}
			// As reqrep encodes any other reply: no HTML escaping.
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(api.LogReply{Events: evs, More: tc.more}); err != nil {
				t.Fatal(err)
			}
			if want := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); string(got) != string(want) {
				t.Fatalf("encodeLog = %s\nwant       %s", got, want)
			}
			var back api.LogReply
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Events, evs) || back.More != tc.more {
				t.Fatalf("decoded %+v, want %d events, more %v", back, len(evs), tc.more)
			}
		})
	}
}
