package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// anthropicAnswer is the assistant's content blocks of a Messages response
// or of its event stream.
func anthropicAnswer(t *testing.T, stream bool, body []byte) []any {
	t.Helper()
	if !stream {
		var resp struct {
			Type    string `json:"type"`
			Content []any  `json:"content"`
		}
		if err := json.Unmarshal(body, &resp); err != nil || resp.Type != "message" {
			t.Fatalf("not a message: %s", body)
		}
		return resp.Content
	}
	var blocks []msg
	var partial []string
	stopped := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock msg    `json:"content_block"`
			Delta        struct {
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		switch e.Type {
		case "content_block_start":
			blocks, partial = append(blocks, e.ContentBlock), append(partial, "")
		case "content_block_delta":
			if e.Delta.Text != "" {
				blocks[e.Index]["text"] = blocks[e.Index]["text"].(string) + e.Delta.Text
			}
			partial[e.Index] += e.Delta.PartialJSON
		case "message_stop":
			stopped = true
		}
	}
	if !stopped {
		t.Fatalf("stream without message_stop: %s", body)
	}
	out := make([]any, len(blocks))
	for i, b := range blocks {
		if partial[i] != "" {
			var input any
			if err := json.Unmarshal([]byte(partial[i]), &input); err != nil {
				t.Fatalf("tool input %q: %v", partial[i], err)
			}
			b["input"] = input
		}
		out[i] = b
	}
	return out
}

// TestAnthropicToolLoop: an agent on the Messages API, its key the Rath
// token in x-api-key as Anthropic's clients send it, is recorded as one on
// Chat Completions is; the provider gets the operator's key.
func TestAnthropicToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "response", true: "stream"}[stream], func(t *testing.T) {
			r := start(t)
			r.prov.answers = []string{"tool:weather", "It is sunny in Oslo."}
			call := func(msgs ...msg) msg {
				return msg{"model": "claude-test", "max_tokens": 100, "stream": stream, "system": "You are terse.", "messages": msgs,
					"tools": []any{msg{"name": "weather", "input_schema": msg{"type": "object"}}}}
			}
			user := msg{"role": "user", "content": "Weather in Oslo?"}
			code, body := r.post("/s/claude-1/v1/messages", "", call(user), "X-Api-Key", "rath_alice", "Anthropic-Version", "2023-06-01")
			if code != http.StatusOK {
				t.Fatalf("first call: %d %s", code, body)
			}
			first := anthropicAnswer(t, stream, body)
			use := first[0].(msg)
			if use["type"] != "tool_use" {
				t.Fatalf("first answer: %v", first)
			}
			result := msg{"role": "user", "content": []any{msg{"type": "tool_result", "tool_use_id": use["id"], "content": "sunny, 21C"}}}
			code, body = r.post("/s/claude-1/v1/messages", "", call(user, msg{"role": "assistant", "content": first}, result), "X-Api-Key", "rath_alice")
			if code != http.StatusOK {
				t.Fatalf("second call: %d %s", code, body)
			}
			if got := anthropicAnswer(t, stream, body)[0].(msg)["text"]; got != "It is sunny in Oslo." {
				t.Fatalf("second answer: %v", got)
			}
			want := []string{
				"session.started",
				"conversation.chunk.appended:system:You are terse.",
				"conversation.chunk.appended:user:Weather in Oslo?",
				`tool.call.requested:toolu_1:weather:{"city":"Oslo"}:caller`,
				"model.called:anthropic:claude-x:11/7:tool_use",
				"tool.call.completed:toolu_1:weather:sunny, 21C",
				"conversation.chunk.appended:assistant:It is sunny in Oslo.",
				"model.called:anthropic:claude-x:11/7:end_turn",
			}
			if got := r.kinds("claude-1"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for i, a := range r.prov.auth {
				if a != "sk-operator-secret 2023-06-01 " {
					t.Errorf("provider call %d carried key, version and authorization %q", i, a)
				}
			}
			// Run again against its record: answered from it.
			calls := len(r.prov.calls)
			if code, body := r.post("/replay/claude-1/v1/messages", "", call(user), "X-Api-Key", "rath_alice"); code != http.StatusOK {
				t.Fatalf("replay: %d %s", code, body)
			}
			code, body = r.post("/replay/claude-1/v1/messages", "", call(msg{"role": "user", "content": "Weather in Bergen?"}), "X-Api-Key", "rath_alice")
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			_ = json.Unmarshal(body, &e)
			if code != http.StatusConflict || e.Type != "error" || !strings.Contains(e.Error.Message, `messages[1].content: recorded "Weather in Oslo?", got "Weather in Bergen?"`) {
				t.Fatalf("a changed replay: %d %s", code, body)
			}
			if len(r.prov.calls) != calls {
				t.Fatalf("replay asked the provider")
			}
		})
	}
}

// A session the Messages API starts is labelled with its wire format.
func TestAnthropicSessionIsLabelled(t *testing.T) {
	r := start(t)
	code, body := r.post("/s/lab/v1/messages", "", msg{"model": "claude-test", "max_tokens": 10, "messages": []any{msg{"role": "user", "content": "hi"}}}, "X-Api-Key", "rath_alice")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	st, err := r.c.State(context.Background(), "lab")
	if err != nil || st.Labels["rath.gateway"] != "anthropic" {
		t.Fatalf("labels %v, %v", st.Labels, err)
	}
}
