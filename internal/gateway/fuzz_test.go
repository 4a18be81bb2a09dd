package gateway

import (
	"bytes"
	"io"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

// FuzzWire: whatever a caller sends or a provider streams, each wire
// format reads it or refuses it with an error, never a panic, and a stream
// is written on as it was read, however it ends.
func FuzzWire(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"x"}]}]}`))
	f.Add([]byte(`{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]},{"type":"image"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]}]}`))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\",\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, w := range []wire{openAI{}, anthropic{}} {
			if req, err := w.parseRequest(b); err == nil {
				digests(req.Messages)
			}
			if ans, err := w.parseResponse(b); err == nil {
				digest(ans.Message)
			}
			var out bytes.Buffer
			ans, raw, err := w.copyStream(bytes.NewReader(b), &out, nil, false, func(events.Delta) {})
			if err == nil && ans == nil {
				t.Fatalf("%s: a stream read without error gave no answer", w.kind())
			}
			if !bytes.HasPrefix(b, bytes.TrimSuffix(raw, []byte("\n"))) && !bytes.Contains(b, []byte("\r")) {
				t.Fatalf("%s: raw %q is not what was read of %q", w.kind(), raw, b)
			}
			_, _ = io.Copy(io.Discard, &out)
		}
	})
}
