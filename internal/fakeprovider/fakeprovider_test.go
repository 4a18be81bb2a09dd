package fakeprovider

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The rule, asked plainly and streamed; a body that is not a request is
// refused.
func TestRule(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	tools := `"tools":[{"type":"function","function":{"name":"lookup"}}]`
	for _, c := range []struct {
		name, body string
		status     int
		want       []string
	}{
		{"a tool call", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + tools + `}`, 200,
			[]string{`"tool_calls":[{"function":{"arguments":"{\"input\":\"hi\"}","name":"lookup"},"id":"call_1"`, `"finish_reason":"tool_calls"`, `"model":"m"`}},
		{"after the tool", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"42"}]}],` + tools + `}`, 200,
			[]string{`"content":"The tool said: 42"`, `"finish_reason":"stop"`}},
		{"no tools", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200, []string{`"content":"You said: hi"`}},
		{"streamed with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, 200,
			[]string{`"delta":{"content":"You said: hi","role":"assistant"}`, `"usage":{`, "data: [DONE]"}},
		{"not JSON", `{"model":`, 400, []string{"want a Chat Completions request"}},
		{"no messages", `{"model":"m","messages":[]}`, 400, []string{"want a Chat Completions request"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, b)
			}
			for _, w := range c.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("the answer lacks %s:\n%s", w, b)
				}
			}
		})
	}
}
