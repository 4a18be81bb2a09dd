package provider

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

const anthropicToolUseReply = `{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "text", "text": "Let me look at the test."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "read_file", "input": {"path": "calc_test.go"}},
    {"type": "tool_use", "id": "toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt", "name": "run_tests", "input": {}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "output_tokens": 89, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard"}
}`

const anthropicFinalReply = `{
  "id": "msg_01B", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
  "content": [{"type": "text", "text": "Fixed: "}, {"type": "text", "text": "Add now returns a+b."}],
  "stop_reason": "end_turn", "stop_sequence": null,
  "usage": {"input_tokens": 610, "output_tokens": 14}
}`

func TestAnthropicWireFormat(t *testing.T) {
	s := newWireServer(t, reply{status: 200, body: anthropicToolUseReply}, reply{status: 200, body: anthropicFinalReply})
	p := newWireProvider(t, KindAnthropic, s)

	req := conversation()
	// A system message inside the conversation joins the system prompt.
	req.Messages = append([]Message{{Role: RoleSystem, Content: "Prefer small diffs."}}, req.Messages...)
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	calls := s.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	c := calls[0]
	if c.Path != "/v1/messages" {
		t.Errorf("path %q", c.Path)
	}
	if got := c.Header.Get("X-Api-Key"); got != testKey {
		t.Errorf("X-Api-Key = %q", got)
	}
	if c.Header.Get("Anthropic-Version") == "" {
		t.Error("no anthropic-version header")
	}
	if got := c.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none next to X-Api-Key", got)
	}
	assertJSON(t, "request", c.Body, `{
	  "model": "claude-sonnet-4-5",
	  "max_tokens": 1024,
	  "system": [
	    {"type": "text", "text": "You are a careful Go engineer."},
	    {"type": "text", "text": "Prefer small diffs."}
	  ],
	  "messages": [
	    {"role": "user", "content": [{"type": "text", "text": "Make the tests pass."}]},
	    {"role": "assistant", "content": [
	      {"type": "text", "text": "Running the tests first."},
	      {"type": "tool_use", "id": "call_1", "name": "run_tests", "input": {"package": "./..."}},
	      {"type": "tool_use", "id": "call_2", "name": "read_file", "input": {"path": "calc.go"}}
	    ]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "--- FAIL: TestAdd (0.00s)"}], "is_error": false},
	      {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "package calc"}], "is_error": false}
	    ]}
	  ],
	  "tools": [{
	    "name": "run_tests",
	    "description": "Run go test on a package.",
	    "input_schema": {"type": "object", "properties": {"package": {"type": "string", "description": "import path pattern"}},
	                     "required": ["package"], "additionalProperties": false}
	  }]
	}`)

	want := Response{
		Content: "Let me look at the test.",
		ToolCalls: []ToolCall{
			{ID: "toolu_01A09q90qw90lq917835lq9", Name: "read_file", Arguments: json.RawMessage(`{"path": "calc_test.go"}`)},
			{ID: "toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt", Name: "run_tests", Arguments: json.RawMessage(`{}`)},
		},
		StopReason:   StopToolUse,
		TokensIn:     472,
		TokensOut:    89,
		Model:        "claude-sonnet-4-5-20250929",
		RequestBody:  c.Body,
		ResponseBody: []byte(anthropicToolUseReply),
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response\n got %+v\nwant %+v", resp, want)
	}

	// Round trip: the answer's tool_use blocks come back as an assistant
	// message, the results as one user message, followed by the user's
	// next words in the same message.
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
		Message{Role: RoleTool, ToolCallID: resp.ToolCalls[0].ID, Content: "func TestAdd(t *testing.T) {}"},
		Message{Role: RoleTool, ToolCallID: resp.ToolCalls[1].ID, Content: "ok"},
		Message{Role: RoleUser, Content: "Keep going."},
	)
	final, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if final.Content != "Fixed: Add now returns a+b." || final.StopReason != StopEndTurn || final.ToolCalls != nil || final.TokensIn != 610 || final.TokensOut != 14 {
		t.Errorf("final response %+v", final)
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(s.Calls()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 5 {
		t.Fatalf("second request has %d messages, want 5", len(body.Messages))
	}
	assertJSON(t, "round-tripped assistant message", body.Messages[3], `{"role": "assistant", "content": [
	  {"type": "text", "text": "Let me look at the test."},
	  {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "read_file", "input": {"path": "calc_test.go"}},
	  {"type": "tool_use", "id": "toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt", "name": "run_tests", "input": {}}
	]}`)
	assertJSON(t, "tool results", body.Messages[4], `{"role": "user", "content": [
	  {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": [{"type": "text", "text": "func TestAdd(t *testing.T) {}"}], "is_error": false},
	  {"type": "tool_result", "tool_use_id": "toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt", "content": [{"type": "text", "text": "ok"}], "is_error": false},
	  {"type": "text", "text": "Keep going."}
	]}`)
}

func TestAnthropicDefaults(t *testing.T) {
	s := newWireServer(t, reply{status: 200, body: anthropicFinalReply})
	p := newWireProvider(t, KindAnthropic, s)
	if _, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "request", s.Calls()[0].Body, `{"model": "claude-sonnet-4-5", "max_tokens": 4096,
	  "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`)
}
