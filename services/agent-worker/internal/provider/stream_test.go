package provider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sse is the Content-Type of a streamed answer.
var sse = map[string]string{"Content-Type": "text/event-stream"}

// openAIToolCallStream is openAIToolCallReply as a stream: text and a tool
// call's arguments in pieces, the finish reason, then the usage chunk.
const openAIToolCallStream = `data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"content":"look at the test."},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_Dr2ZzPwzLUAmg6TWrYj0QfOW","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"calc_test.go\"}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Vq0JtNiCrTjqEoUpRHLAs1yy","type":"function","function":{"name":"run_tests","arguments":""}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-B9MBs8","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":182,"completion_tokens":41,"total_tokens":223}}

data: [DONE]

`

// anthropicToolUseStream is anthropicToolUseReply as a stream, with a ping
// between its events as the API sends them.
const anthropicToolUseStream = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01Aq9w938a90dw8q","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type":"ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look at the test."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"read_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"calc_test.go\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt","name":"run_tests","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

`

var (
	toolCallStreams = map[Kind]string{KindOpenAI: openAIToolCallStream, KindAnthropic: anthropicToolUseStream}
	toolCallReplies = map[Kind]string{KindOpenAI: openAIToolCallReply, KindAnthropic: anthropicToolUseReply}
	// toolCallDeltas are the pieces both streams say, in order.
	toolCallDeltas = map[Kind][]Delta{
		KindOpenAI: {
			{Text: "Let me "}, {Text: "look at the test."},
			{Call: &CallDelta{Index: 0, ID: "call_Dr2ZzPwzLUAmg6TWrYj0QfOW", Name: "read_file"}},
			{Call: &CallDelta{Index: 0, Arguments: `{"path":`}},
			{Call: &CallDelta{Index: 0, Arguments: `"calc_test.go"}`}},
			{Call: &CallDelta{Index: 1, ID: "call_Vq0JtNiCrTjqEoUpRHLAs1yy", Name: "run_tests"}},
		},
		KindAnthropic: {
			{Text: "Let me "}, {Text: "look at the test."},
			{Call: &CallDelta{Index: 0, ID: "toolu_01A09q90qw90lq917835lq9", Name: "read_file"}},
			{Call: &CallDelta{Index: 0, Arguments: `{"path": `}},
			{Call: &CallDelta{Index: 0, Arguments: `"calc_test.go"}`}},
			{Call: &CallDelta{Index: 1, ID: "toolu_01B7cXq2Vw7H4yN1Lm3Kp8Rt", Name: "run_tests"}},
		},
	}
)

// streamed returns conversation() with Deltas appending to *got.
func streamed(got *[]Delta) Request {
	req := conversation()
	req.Deltas = func(d Delta) { *got = append(*got, d) }
	return req
}

func TestStreamedAnswerIsTheSameAnswer(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			plain, err := newWireProvider(t, kind, newWireServer(t, reply{status: 200, body: toolCallReplies[kind]})).
				Complete(context.Background(), conversation())
			if err != nil {
				t.Fatal(err)
			}
			s := newWireServer(t, reply{status: 200, header: sse, body: toolCallStreams[kind]})
			var deltas []Delta
			resp, err := newWireProvider(t, kind, s).Complete(context.Background(), streamed(&deltas))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(deltas, toolCallDeltas[kind]) {
				t.Errorf("deltas\n got %s\nwant %s", showDeltas(deltas), showDeltas(toolCallDeltas[kind]))
			}
			// The evidence is the request as sent and the stream as received.
			if string(resp.ResponseBody) != toolCallStreams[kind] {
				t.Errorf("response body %q", resp.ResponseBody)
			}
			body := string(s.Calls()[0].Body)
			if string(resp.RequestBody) != body || !strings.Contains(body, `"stream":true`) {
				t.Errorf("request body %s", resp.RequestBody)
			}
			if kind == KindOpenAI && !strings.Contains(body, `"stream_options":{"include_usage":true}`) {
				t.Errorf("request body %s: no include_usage", body)
			}
			resp.RequestBody, resp.ResponseBody, plain.RequestBody, plain.ResponseBody = nil, nil, nil, nil
			if !reflect.DeepEqual(resp, plain) {
				t.Errorf("streamed response\n got %+v\nwant %+v", resp, plain)
			}
		})
	}
}

func showDeltas(ds []Delta) string {
	var b strings.Builder
	for _, d := range ds {
		if c := d.Call; c != nil {
			fmt.Fprintf(&b, "call{%d %q %q %q} ", c.Index, c.ID, c.Name, c.Arguments)
			continue
		}
		fmt.Fprintf(&b, "text{%q} ", d.Text)
	}
	return b.String()
}

func TestCutStreamIsRetried(t *testing.T) {
	for _, kind := range kinds {
		full := toolCallStreams[kind]
		half := full[:len(full)/2]
		half = half[:strings.LastIndex(half, "\n\n")+2] // whole events only
		for _, tc := range []struct {
			name  string
			abort bool
			want  string
		}{
			{"connection dropped", true, "stream cut"},
			{"ended early", false, "stream ended before the answer did"},
		} {
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				s := newWireServer(t,
					reply{status: 200, header: sse, body: half, abort: tc.abort},
					reply{status: 200, header: sse, body: full})
				var deltas []Delta
				resp, attempts, err := completeWithRetry(newWireProvider(t, kind, s), streamed(&deltas))
				if err != nil {
					t.Fatal(err)
				}
				if len(attempts) != 1 || attempts[0].Status != 200 {
					t.Fatalf("attempts %+v, want one failed with status 200", attempts)
				}
				var perr *Error
				if !errors.As(attempts[0].Err, &perr) || !perr.Retryable || !strings.Contains(perr.Message, tc.want) {
					t.Errorf("attempt error %#v, want a retryable %q", attempts[0].Err, tc.want)
				}
				if resp.Content != "Let me look at the test." || len(resp.ToolCalls) != 2 || string(resp.ResponseBody) != full {
					t.Errorf("response %+v", resp)
				}
				// The cut attempt said some pieces, then the retry said them all.
				if n := len(toolCallDeltas[kind]); len(deltas) <= n || !reflect.DeepEqual(deltas[len(deltas)-n:], toolCallDeltas[kind]) {
					t.Errorf("deltas %s", showDeltas(deltas))
				}
			})
		}
	}
}

func TestStreamRateLimitedThenOK(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t,
				reply{status: 429, body: errorBodies[kind][429]},
				reply{status: 200, header: sse, body: toolCallStreams[kind]})
			var deltas []Delta
			resp, attempts, err := completeWithRetry(newWireProvider(t, kind, s), streamed(&deltas))
			if err != nil {
				t.Fatal(err)
			}
			var perr *Error
			if len(attempts) != 1 || !errors.As(attempts[0].Err, &perr) || perr.Status != 429 || !strings.Contains(strings.ToLower(perr.Message), "rate limit") {
				t.Fatalf("attempts %+v", attempts)
			}
			if resp.Content != "Let me look at the test." || !reflect.DeepEqual(deltas, toolCallDeltas[kind]) {
				t.Errorf("response %+v, deltas %s", resp, showDeltas(deltas))
			}
		})
	}
}

func TestBadStreamEvents(t *testing.T) {
	notJSON := map[Kind]string{
		KindOpenAI:    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {not json\n\ndata: [DONE]\n\n",
		KindAnthropic: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: <html>\n\n",
	}
	errorEvent := map[Kind]string{
		KindOpenAI:    "data: {\"error\":{\"message\":\"The server is overloaded\",\"type\":\"server_error\"}}\n\n",
		KindAnthropic: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"The server is overloaded\"}}\n\n",
	}
	outOfOrder := map[Kind]string{
		KindOpenAI:    "data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"there\"}}]}\n\n",
		KindAnthropic: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
	}
	for _, kind := range kinds {
		for _, tc := range []struct {
			name      string
			body      string
			retryable bool
			want      string
		}{
			{"not JSON", notJSON[kind], false, "decode response"},
			{"error event", errorEvent[kind], true, "The server is overloaded"},
			{"out of order", outOfOrder[kind], false, "stream: "},
		} {
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				s := newWireServer(t, reply{status: 200, header: sse, body: tc.body})
				var deltas []Delta
				_, attempts, err := completeWithRetry(newWireProvider(t, kind, s), streamed(&deltas))
				if err == nil {
					t.Fatal("no error")
				}
				var perr *Error
				if !errors.As(err, &perr) || perr.Retryable != tc.retryable || !strings.Contains(perr.Message, tc.want) {
					t.Fatalf("error %#v, want retryable %v with %q", err, tc.retryable, tc.want)
				}
				if want := map[bool]int{false: 1, true: fastRetry.MaxAttempts}[tc.retryable]; len(attempts) != want {
					t.Errorf("%d attempts, want %d", len(attempts), want)
				}
			})
		}
	}
}

func TestAPIKeyNeverLeaksFromAStream(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			body := strings.ReplaceAll(toolCallStreams[kind], "look at", testKey)
			s := newWireServer(t, reply{status: 200, header: sse, body: body})
			var deltas []Delta
			resp, err := newWireProvider(t, kind, s).Complete(context.Background(), streamed(&deltas))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(resp.ResponseBody), testKey) || strings.Contains(resp.Content, testKey) {
				t.Errorf("the key is in the response: %q", resp.Content)
			}
			for _, d := range deltas {
				if strings.Contains(d.Text, testKey) {
					t.Errorf("the key is in a delta: %q", d.Text)
				}
			}
		})
	}
}

// An OpenAI-compatible server that does not stream answers a streamed
// request with the whole completion as JSON: it is read as one answer, the
// same as the plain one, said in one piece per part.
func TestOpenAICompatibleServerThatDoesNotStream(t *testing.T) {
	plain, err := newWireProvider(t, KindOpenAI, newWireServer(t, reply{status: 200, body: toolCallReplies[KindOpenAI]})).
		Complete(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	var deltas []Delta
	resp, err := newWireProvider(t, KindOpenAI, newWireServer(t, reply{status: 200, body: toolCallReplies[KindOpenAI]})).
		Complete(context.Background(), streamed(&deltas))
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) == 0 {
		t.Error("no delta said the answer")
	}
	resp.RequestBody, resp.ResponseBody, plain.RequestBody, plain.ResponseBody = nil, nil, nil, nil
	if !reflect.DeepEqual(resp, plain) {
		t.Errorf("response\n got %+v\nwant %+v", resp, plain)
	}
}
