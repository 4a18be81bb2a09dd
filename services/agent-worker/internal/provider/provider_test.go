package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// testKey is the API key the wire tests use. It must never show up outside
// the Authorization / X-Api-Key header.
const testKey = "sk-test-9f2c1e7a-DO-NOT-LEAK"

// fastRetry keeps retry tests quick; Max also caps any Retry-After.
var fastRetry = Retry{MaxAttempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}

// conversation is a request after one round of two parallel tool calls.
func conversation() Request {
	return Request{
		Agent:  "coder",
		System: "You are a careful Go engineer.",
		Messages: []Message{
			{Role: RoleUser, Content: "Make the tests pass."},
			{Role: RoleAssistant, Content: "Running the tests first.", ToolCalls: []ToolCall{
				{ID: "call_1", Name: "run_tests", Arguments: json.RawMessage(`{"package":"./..."}`)},
				{ID: "call_2", Name: "read_file", Arguments: json.RawMessage(`{"path":"calc.go"}`)},
			}},
			{Role: RoleTool, ToolCallID: "call_1", Content: "--- FAIL: TestAdd (0.00s)"},
			{Role: RoleTool, ToolCallID: "call_2", Content: "package calc"},
		},
		Tools:     []Tool{runTestsTool},
		MaxTokens: 1024,
	}
}

var runTestsTool = Tool{
	Name:        "run_tests",
	Description: "Run go test on a package.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"package":{"type":"string","description":"import path pattern"}},"required":["package"],"additionalProperties":false}`),
}

// call is one request a fake provider server received.
type call struct {
	Path   string
	Header http.Header
	Body   []byte
}

// wireServer is a fake provider: it records each request and answers with
// the next reply (the last one repeats).
type wireServer struct {
	*httptest.Server
	mu      sync.Mutex
	calls   []call
	replies []reply
}

type reply struct {
	status int
	header map[string]string // Content-Type is application/json unless set here
	body   string
	abort  bool // drop the connection after the body
}

func newWireServer(t *testing.T, replies ...reply) *wireServer {
	t.Helper()
	s := &wireServer{replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.calls = append(s.calls, call{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		rep := s.replies[min(len(s.calls), len(s.replies))-1]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
		if rep.abort {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *wireServer) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// local allows the loopback endpoints the tests' servers listen on.
var local = Endpoints{Loopback: true}

// newWireProvider returns a provider of kind talking to s, with the base
// URL a local OpenAI-compatible server would have.
func newWireProvider(t *testing.T, kind Kind, s *wireServer) Provider {
	t.Helper()
	base := s.URL
	if kind == KindOpenAI {
		base += "/v1"
	}
	p, err := New(Config{Kind: kind, BaseURL: base, APIKey: testKey, Model: defaultModel[kind], HTTPClient: s.Client(), Endpoints: local})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var defaultModel = map[Kind]string{KindOpenAI: "gpt-4.1", KindAnthropic: "claude-sonnet-4-5"}

// assertJSON compares JSON documents by value, ignoring key order.
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, compact(got), compact([]byte(want)))
	}
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none means valid
	}{
		{"scripted", Config{Kind: KindScripted, Scripts: map[string]Script{"a": {}}}, nil},
		{"scripted without scripts", Config{Kind: KindScripted}, []string{"at least one script"}},
		{"openai public needs key", Config{Kind: KindOpenAI}, []string{"API key"}},
		{"openai local without key", Config{Kind: KindOpenAI, BaseURL: "http://localhost:11434/v1", Endpoints: local}, nil},
		{"openai local not allowed", Config{Kind: KindOpenAI, BaseURL: "http://localhost:11434/v1"}, []string{"not an endpoint this agent worker allows"}},
		{"openai official endpoint", Config{Kind: KindOpenAI, BaseURL: "https://api.openai.com/v1", APIKey: testKey}, nil},
		{"anthropic bad url", Config{Kind: KindAnthropic, BaseURL: "localhost:8080", Endpoints: local}, []string{"not an http or https URL"}},
		{"bad allowed endpoint", Config{Kind: KindOpenAI, APIKey: testKey, Endpoints: Endpoints{Allowed: []Endpoint{{KindOpenAI, "ftp://x"}}}}, []string{"endpoint openai=ftp://x: not an http or https URL"}},
		{"unknown kind", Config{Kind: "gemini"}, []string{`unknown provider kind "gemini"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(tt.cfg); err != nil {
					t.Fatalf("New() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
			if _, err := New(tt.cfg); err == nil {
				t.Error("New() accepted an invalid config")
			}
		})
	}
}

func TestNewKinds(t *testing.T) {
	for _, kind := range []Kind{KindScripted, KindOpenAI, KindAnthropic} {
		p, err := New(Config{Kind: kind, APIKey: testKey, Scripts: map[string]Script{"a": {}}})
		if err != nil {
			t.Fatalf("New(%s): %v", kind, err)
		}
		if p.Name() != string(kind) {
			t.Errorf("New(%s).Name() = %q", kind, p.Name())
		}
	}
}

func ExampleWithRetry() {
	script := Script{Turns: []Turn{{Content: "Hello."}}}
	p := WithRetry(NewScripted(map[string]Script{"greeter": script}), DefaultRetry, func(a Attempt) {
		fmt.Printf("attempt %d failed: %v\n", a.N, a.Err)
	})
	resp, err := p.Complete(context.Background(), Request{Agent: "greeter", Messages: []Message{{Role: RoleUser, Content: "Hi"}}})
	fmt.Println(resp.Content, resp.StopReason, err)
	// Output: Hello. end_turn <nil>
}
