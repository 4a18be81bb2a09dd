package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

var (
	alice = events.Principal{Tenant: "acme", User: "alice"}
	bob   = events.Principal{Tenant: "other", User: "bob"}
)

// tokens is an Authenticator of fixed tokens (auth.Tokens reads them from
// a file; its own tests cover it).
type tokens map[string]events.Principal

func (t tokens) Lookup(tok string) (events.Principal, string, error) {
	p, ok := t[tok]
	if !ok {
		return events.Principal{}, "", errors.New("unknown token")
	}
	return p, "test", nil
}

// provider is a local server speaking the Chat Completions wire format: it
// answers from a script, one answer per call, and keeps what it was sent.
type provider struct {
	mu      sync.Mutex
	answers []string // content "" with tools: a tool call
	calls   []map[string]any
	auth    []string
	status  int
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/messages" {
		p.messages(w, r)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "no such path "+r.URL.Path, http.StatusNotFound)
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls = append(p.calls, req)
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	n := len(p.calls)
	status := p.status
	p.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"rate limited for key sk-operator-secret","type":"rate_limit"}}`)
		return
	}
	say := "done"
	if n <= len(p.answers) {
		say = p.answers[n-1]
	}
	var tool string
	if rest, ok := strings.CutPrefix(say, "tool:"); ok {
		tool, say = rest, ""
	}
	if stream, _ := req["stream"].(bool); stream {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s) }
		if tool != "" {
			chunk(`{"model":"m-1","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_` + fmt.Sprint(n) + `","type":"function","function":{"name":"` + tool + `","arguments":""}}]}}]}`)
			chunk(`{"model":"m-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`)
			chunk(`{"model":"m-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}`)
		} else {
			for _, word := range strings.SplitAfter(say, " ") {
				b, _ := json.Marshal(word)
				chunk(`{"model":"m-1","choices":[{"index":0,"delta":{"content":` + string(b) + `}}]}`)
			}
			chunk(`{"model":"m-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		}
		if so, _ := req["stream_options"].(map[string]any); so["include_usage"] == true {
			chunk(`{"model":"m-1","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}`)
		}
		chunk("[DONE]")
		return
	}
	msg := map[string]any{"role": "assistant", "content": say}
	finish := "stop"
	if tool != "" {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": fmt.Sprintf("call_%d", n), "type": "function", "function": map[string]any{"name": tool, "arguments": `{"city":"Oslo"}`}}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m-1",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 11, "completion_tokens": 7}})
}

type rig struct {
	t    *testing.T
	url  string // the gateway's
	prov *provider
	c    *client.Client // alice's, to read what was recorded
	log  *bytes.Buffer
	// another starts another gateway on the same bus and provider (another
	// process, or this one restarted) and returns its URL.
	another func() string
}

func start(t *testing.T) *rig {
	t.Helper()
	_, nc := natstest.Start(t)
	url := nc.ConnectedUrl()
	natstest.AddUsers(t, url, alice, bob)
	testrig.Ledger(t, url)
	var mu sync.Mutex
	conns := map[events.Principal]*client.Client{}
	clients := func(_ context.Context, p events.Principal) (*client.Client, error) {
		mu.Lock()
		defer mu.Unlock()
		if c := conns[p]; c != nil {
			return c, nil
		}
		c, err := client.New(natstest.ConnectUser(t, url, p), client.As(p))
		conns[p] = c
		return c, err
	}
	prov := &provider{}
	up := httptest.NewServer(prov)
	t.Cleanup(up.Close)
	var logs bytes.Buffer
	r := &rig{t: t, prov: prov, log: &logs}
	r.another = func() string {
		g, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{Kind: "openai", BaseURL: up.URL + "/v1", Key: "sk-operator-secret"}, {Kind: "anthropic", BaseURL: up.URL, Key: "sk-operator-secret"}}},
			tokens{"rath_alice": alice, "rath_bob": bob}, clients, slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	r.url = r.another()
	r.c, _ = clients(context.Background(), alice)
	return r
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// post sends a Chat Completions request and returns the status and body.
func (r *rig) post(path, token string, body any, headers ...string) (int, []byte) {
	r.t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	req, _ := http.NewRequest(http.MethodPost, r.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type msg = map[string]any

func chat(stream bool, msgs ...msg) msg {
	return msg{"model": "gpt-test", "stream": stream, "messages": msgs,
		"tools": []any{msg{"type": "function", "function": msg{"name": "weather", "parameters": msg{"type": "object"}}}}}
}

// kinds lists the session's events as type[:detail] strings.
func (r *rig) kinds(id string) []string {
	r.t.Helper()
	evs, err := r.c.Log(context.Background(), id, client.Range{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		d, err := ev.Decode()
		if err != nil {
			r.t.Fatal(err)
		}
		s := strings.TrimPrefix(ev.Type, "rath.")
		switch d := d.(type) {
		case *events.ChunkAppended:
			s += ":" + d.Role + ":" + d.Content
		case *events.ToolRequested:
			s += ":" + d.CallID + ":" + d.Tool + ":" + string(d.Arguments) + ":" + d.Runner
		case *events.ToolCompleted:
			s += ":" + d.CallID + ":" + d.Tool + ":" + d.Result
		case *events.ModelCalled:
			s += fmt.Sprintf(":%s:%s:%d/%d:%s", d.Provider, d.Model, d.TokensIn, d.TokensOut, d.StopReason)
			if d.RequestRef == "" || d.ResponseRef == "" {
				r.t.Errorf("model call at %d stores no bodies: %+v", ev.Seq, d)
			}
		case *events.ModelCallFailed:
			s += fmt.Sprintf(":%d:%s", d.Status, d.Error)
		}
		if ev.Actor != alice.String() {
			r.t.Errorf("event %d (%s) is by %q, want the caller %s", ev.Seq, ev.Type, ev.Actor, alice)
		}
		out = append(out, s)
	}
	return out
}

func TestToolLoopRecordsOnlyWhatEachCallAdds(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			r := start(t)
			r.prov.answers = []string{"tool:weather", "It is sunny in Oslo."}
			sys := msg{"role": "system", "content": "You are terse."}
			user := msg{"role": "user", "content": "Weather in Oslo?"}
			code, body := r.post("/s/trip-1/v1/chat/completions", "rath_alice", chat(stream, sys, user))
			if code != http.StatusOK {
				t.Fatalf("first call: %d %s", code, body)
			}
			first := answerOf(t, stream, body)
			calls, _ := first["tool_calls"].([]any)
			if len(calls) != 1 {
				t.Fatalf("first answer: want one tool call, got %v", first)
			}
			call := calls[0].(msg)
			tool := msg{"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"}
			code, body = r.post("/s/trip-1/v1/chat/completions", "rath_alice", chat(stream, sys, user, first, tool))
			if code != http.StatusOK {
				t.Fatalf("second call: %d %s", code, body)
			}
			if got := answerOf(t, stream, body)["content"]; got != "It is sunny in Oslo." {
				t.Fatalf("second answer: %v", got)
			}
			want := []string{
				"session.started",
				"conversation.chunk.appended:system:You are terse.",
				"conversation.chunk.appended:user:Weather in Oslo?",
				`tool.call.requested:call_1:weather:{"city":"Oslo"}:caller`,
				"model.called:openai:m-1:11/7:tool_calls",
				"tool.call.completed:call_1:weather:sunny, 21C",
				"conversation.chunk.appended:assistant:It is sunny in Oslo.",
				"model.called:openai:m-1:11/7:stop",
			}
			if got := r.kinds("trip-1"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for i, a := range r.prov.auth {
				if a != "Bearer sk-operator-secret" {
					t.Errorf("provider call %d carried %q, want the operator's key", i, a)
				}
			}
			if stream {
				// The gateway asked for the usage; the caller, who did not,
				// was not sent it.
				if so, _ := r.prov.calls[0]["stream_options"].(msg); so["include_usage"] != true {
					t.Errorf("provider was not asked for the usage: %v", r.prov.calls[0])
				}
			}
		})
	}
}

// answerOf is the assistant message of a response or of an event stream.
func answerOf(t *testing.T, stream bool, body []byte) msg {
	t.Helper()
	if !stream {
		var resp struct {
			Choices []struct {
				Message msg `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) == 0 {
			t.Fatalf("not a response: %s", body)
		}
		return resp.Choices[0].Message
	}
	out := msg{"role": "assistant"}
	var content strings.Builder
	var calls []any
	sc := bufio.NewScanner(bytes.NewReader(body))
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Function struct {
							Name, Arguments string
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Usage any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Usage != nil {
			t.Errorf("the caller got a usage chunk it did not ask for: %s", data)
		}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID != "" {
					calls = append(calls, msg{"id": tc.ID, "type": "function", "function": msg{"name": tc.Function.Name, "arguments": ""}})
				}
				f := calls[len(calls)-1].(msg)["function"].(msg)
				f["arguments"] = f["arguments"].(string) + tc.Function.Arguments
			}
		}
	}
	if !done {
		t.Fatalf("stream without [DONE]: %s", body)
	}
	if len(calls) > 0 {
		out["tool_calls"] = calls
		out["content"] = nil
	} else {
		out["content"] = content.String()
	}
	return out
}

// errorOf is the message of an error answer, or the body as it is.
func errorOf(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return string(body)
}

// messages answers in the Anthropic Messages wire format.
func (p *provider) messages(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls = append(p.calls, req)
	p.auth = append(p.auth, r.Header.Get("X-Api-Key")+" "+r.Header.Get("Anthropic-Version")+" "+r.Header.Get("Authorization"))
	n := len(p.calls)
	status := p.status
	p.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited for key sk-operator-secret"}}`)
		return
	}
	say := "done"
	if n <= len(p.answers) {
		say = p.answers[n-1]
	}
	tool, isTool := strings.CutPrefix(say, "tool:")
	if stream, _ := req["stream"].(bool); stream {
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"usage":{"input_tokens":11,"output_tokens":1}}}`)
		ev("ping", `{"type":"ping"}`)
		stop := "end_turn"
		if isTool {
			stop = "tool_use"
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_`+fmt.Sprint(n)+`","name":"`+tool+`","input":{}}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`)
		} else {
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			for _, word := range strings.SplitAfter(say, " ") {
				b, _ := json.Marshal(word)
				ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(b)+`}}`)
			}
		}
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`"},"usage":{"output_tokens":7}}`)
		ev("message_stop", `{"type":"message_stop"}`)
		return
	}
	content := []any{msg{"type": "text", "text": say}}
	stop := "end_turn"
	if isTool {
		content = []any{msg{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n), "name": tool, "input": msg{"city": "Oslo"}}}
		stop = "tool_use"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(msg{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
		"content": content, "stop_reason": stop, "usage": msg{"input_tokens": 11, "output_tokens": 7}})
}
