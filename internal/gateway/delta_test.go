package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// TestStreamedAnswersPublishDeltas: while an answer streams, its pieces go
// out on the session's delta subject, numbered from 0 and ending with a
// done delta, in both wire formats; a watcher of the tenant joins them into
// the answer the session then stores.
func TestStreamedAnswersPublishDeltas(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		call       func(msgs ...msg) msg
	}{
		{"openai", "/s/d-1/v1/chat/completions", func(msgs ...msg) msg { return chat(true, msgs...) }},
		{"anthropic", "/s/d-1/v1/messages", func(msgs ...msg) msg {
			return msg{"model": "claude-test", "max_tokens": 100, "stream": true, "messages": msgs,
				"tools": []any{msg{"name": "weather", "input_schema": msg{"type": "object"}}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t)
			r.prov.answers = []string{"tool:weather", "It is sunny in Oslo."}
			sub, err := r.c.Conn().SubscribeSync(events.DeltaSubject("acme", "d-1"))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := r.c.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			next := func() (answer, text, tool string) {
				t.Helper()
				var b strings.Builder
				var args, name string
				for n := 0; ; n++ {
					m, err := sub.NextMsg(10 * time.Second)
					if err != nil {
						t.Fatalf("delta %d: %v", n, err)
					}
					var d events.Delta
					if err := json.Unmarshal(m.Data, &d); err != nil {
						t.Fatalf("delta %d: %v", n, err)
					}
					if d.N != n || d.Session != "d-1" || d.Agent != "agent" || (answer != "" && d.Answer != answer) {
						t.Fatalf("delta %d: %+v", n, d)
					}
					answer = d.Answer
					b.WriteString(d.Text)
					if d.Tool != nil {
						name += d.Tool.Name
						args += d.Tool.Arguments
					}
					if d.Done {
						return answer, b.String(), name + args
					}
				}
			}
			user := msg{"role": "user", "content": "Weather in Oslo?"}
			code, body := r.post(tc.path, "rath_alice", tc.call(user))
			if code != http.StatusOK {
				t.Fatalf("first call: %d %s", code, body)
			}
			first, text, tool := next()
			if text != "" || strings.ReplaceAll(tool, " ", "") != `weather{"city":"Oslo"}` {
				t.Fatalf("the tool call's deltas: text %q, tool %q", text, tool)
			}
			var result msg
			if tc.name == "openai" {
				a := answerOf(t, true, body)
				result = msg{"role": "tool", "tool_call_id": a["tool_calls"].([]any)[0].(msg)["id"], "content": "sunny"}
				code, body = r.post(tc.path, "rath_alice", tc.call(user, a, result))
			} else {
				blocks := anthropicAnswer(t, true, body)
				result = msg{"role": "user", "content": []any{msg{"type": "tool_result", "tool_use_id": blocks[0].(msg)["id"], "content": "sunny"}}}
				code, body = r.post(tc.path, "rath_alice", tc.call(user, msg{"role": "assistant", "content": blocks}, result))
			}
			if code != http.StatusOK {
				t.Fatalf("second call: %d %s", code, body)
			}
			second, text, _ := next()
			if text != "It is sunny in Oslo." || second == first {
				t.Fatalf("the answer's deltas: %q (answer %s after %s)", text, second, first)
			}
		})
	}
}
