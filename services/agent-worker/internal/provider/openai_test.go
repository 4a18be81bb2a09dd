package provider

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

const openAIToolCallReply = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": "Let me look at the test.",
      "tool_calls": [
        {"id": "call_Dr2ZzPwzLUAmg6TWrYj0QfOW", "type": "function",
         "function": {"name": "read_file", "arguments": "{\"path\":\"calc_test.go\"}"}},
        {"id": "call_Vq0JtNiCrTjqEoUpRHLAs1yy", "type": "function",
         "function": {"name": "run_tests", "arguments": ""}}
      ],
      "refusal": null,
      "annotations": []
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {
    "prompt_tokens": 182, "completion_tokens": 41, "total_tokens": 223,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_b3f1157249"
}`

const openAIFinalReply = `{
  "id": "chatcmpl-B9MC1", "object": "chat.completion", "created": 1741569960,
  "model": "gpt-4.1-2025-04-14",
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Fixed: Add now returns a+b.", "refusal": null, "annotations": []},
               "logprobs": null, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 260, "completion_tokens": 12, "total_tokens": 272}
}`

func TestOpenAIWireFormat(t *testing.T) {
	s := newWireServer(t, reply{status: 200, body: openAIToolCallReply}, reply{status: 200, body: openAIFinalReply})
	p := newWireProvider(t, KindOpenAI, s)

	req := conversation()
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	calls := s.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	c := calls[0]
	if c.Path != "/v1/chat/completions" {
		t.Errorf("path %q", c.Path)
	}
	if got := c.Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization = %q", got)
	}
	assertJSON(t, "request", c.Body, `{
	  "model": "gpt-4.1",
	  "max_completion_tokens": 1024,
	  "messages": [
	    {"role": "system", "content": "You are a careful Go engineer."},
	    {"role": "user", "content": "Make the tests pass."},
	    {"role": "assistant", "content": "Running the tests first.", "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{\"package\":\"./...\"}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"calc.go\"}"}}
	    ]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "--- FAIL: TestAdd (0.00s)"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "package calc"}
	  ],
	  "tools": [{"type": "function", "function": {
	    "name": "run_tests",
	    "description": "Run go test on a package.",
	    "parameters": {"type": "object", "properties": {"package": {"type": "string", "description": "import path pattern"}},
	                   "required": ["package"], "additionalProperties": false}
	  }}]
	}`)

	want := Response{
		Content: "Let me look at the test.",
		ToolCalls: []ToolCall{
			{ID: "call_Dr2ZzPwzLUAmg6TWrYj0QfOW", Name: "read_file", Arguments: json.RawMessage(`{"path":"calc_test.go"}`)},
			{ID: "call_Vq0JtNiCrTjqEoUpRHLAs1yy", Name: "run_tests", Arguments: json.RawMessage(`{}`)},
		},
		StopReason:   StopToolUse,
		TokensIn:     182,
		TokensOut:    41,
		Model:        "gpt-4.1-2025-04-14",
		RequestBody:  c.Body,
		ResponseBody: []byte(openAIToolCallReply),
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response\n got %+v\nwant %+v", resp, want)
	}

	// Round trip: the answer's tool calls and their results go back.
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
		Message{Role: RoleTool, ToolCallID: resp.ToolCalls[0].ID, Content: "func TestAdd(t *testing.T) {}"},
		Message{Role: RoleTool, ToolCallID: resp.ToolCalls[1].ID, Content: "ok"},
	)
	req.Model = "gpt-4.1-mini"
	final, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if final.Content != "Fixed: Add now returns a+b." || final.StopReason != StopEndTurn || final.ToolCalls != nil || final.TokensIn != 260 {
		t.Errorf("final response %+v", final)
	}
	var body struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(s.Calls()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "gpt-4.1-mini" || len(body.Messages) != 8 {
		t.Fatalf("second request: model %q, %d messages", body.Model, len(body.Messages))
	}
	assertJSON(t, "round-tripped assistant message", body.Messages[5], `{"role": "assistant", "content": "Let me look at the test.", "tool_calls": [
	  {"id": "call_Dr2ZzPwzLUAmg6TWrYj0QfOW", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"calc_test.go\"}"}},
	  {"id": "call_Vq0JtNiCrTjqEoUpRHLAs1yy", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}
	]}`)
	assertJSON(t, "tool result", body.Messages[6], `{"role": "tool", "tool_call_id": "call_Dr2ZzPwzLUAmg6TWrYj0QfOW", "content": "func TestAdd(t *testing.T) {}"}`)
}

func TestOpenAIWithoutKeyOrTools(t *testing.T) {
	// A local server (Ollama, llama.cpp) with no key: no Authorization
	// header, and no tools or token limit in the body.
	s := newWireServer(t, reply{status: 200, body: openAIFinalReply})
	p, err := New(Config{Kind: KindOpenAI, BaseURL: s.URL + "/v1/", Model: "qwen2.5-coder:7b", HTTPClient: s.Client(), Endpoints: local})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	c := s.Calls()[0]
	if h := c.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q, want none", h)
	}
	assertJSON(t, "request", c.Body, `{"model": "qwen2.5-coder:7b", "messages": [{"role": "user", "content": "hi"}]}`)
}

func TestOpenAIMalformedArguments(t *testing.T) {
	body := `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
	  "message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\": "}}]}}],
	  "usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	s := newWireServer(t, reply{status: 200, body: body})
	resp, err := newWireProvider(t, KindOpenAI, s).Complete(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.ToolCalls[0].Arguments); got != `"{\"path\": "` {
		t.Errorf("arguments = %s, want the text as a JSON string", got)
	}
}

func TestOpenAIStopReasons(t *testing.T) {
	for in, want := range map[string]string{"stop": StopEndTurn, "tool_calls": StopToolUse, "length": StopMaxTokens, "content_filter": "content_filter"} {
		if got := openAIStopReason(in); got != want {
			t.Errorf("openAIStopReason(%q) = %q, want %q", in, got, want)
		}
	}
}
