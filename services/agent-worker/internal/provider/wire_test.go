package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// errorBodies are realistic error replies of each provider.
var errorBodies = map[Kind]map[int]string{
	KindOpenAI: {
		429: `{"error":{"message":"Rate limit reached for gpt-4.1 in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
		500: `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
		400: `{"error":{"message":"Invalid schema for function 'run_tests': 'string' is not valid under any of the given schemas.","type":"invalid_request_error","param":"tools[0].function.parameters","code":"invalid_function_parameters"}}`,
	},
	KindAnthropic: {
		429: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
		500: `{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fz"}`,
		400: `{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.1: unexpected tool_use_id found in tool_result blocks: call_9"},"request_id":"req_011CSHoEeqs5C35K2UUqR7G0"}`,
	},
}

var okBodies = map[Kind]string{KindOpenAI: openAIFinalReply, KindAnthropic: anthropicFinalReply}

var kinds = []Kind{KindOpenAI, KindAnthropic}

// completeWithRetry runs one retried call and returns what onAttempt saw.
func completeWithRetry(p Provider, req Request) (Response, []Attempt, error) {
	var attempts []Attempt
	resp, err := WithRetry(p, fastRetry, func(a Attempt) { attempts = append(attempts, a) }).
		Complete(context.Background(), req)
	return resp, attempts, err
}

func TestRateLimitedThenOK(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t,
				reply{status: 429, header: map[string]string{"Retry-After": "1"}, body: errorBodies[kind][429]},
				reply{status: 200, body: okBodies[kind]})
			resp, attempts, err := completeWithRetry(newWireProvider(t, kind, s), conversation())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Content != "Fixed: Add now returns a+b." {
				t.Errorf("content %q", resp.Content)
			}
			if n := len(s.Calls()); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
			if len(attempts) != 1 {
				t.Fatalf("onAttempt called %d times, want 1", len(attempts))
			}
			a := attempts[0]
			// Retry-After (1s) is honoured, capped at Max.
			if a.N != 1 || a.Status != 429 || a.RetryIn != fastRetry.Max {
				t.Errorf("attempt %+v, want N 1, status 429, RetryIn %v", a, fastRetry.Max)
			}
			var perr *Error
			if !errors.As(a.Err, &perr) || !perr.Retryable || perr.RetryAfter.Seconds() != 1 || !strings.Contains(strings.ToLower(perr.Message), "rate limit") {
				t.Errorf("attempt error %#v", a.Err)
			}
		})
	}
}

func TestServerErrorsExhaustAttempts(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t, reply{status: 500, body: errorBodies[kind][500]})
			_, attempts, err := completeWithRetry(newWireProvider(t, kind, s), conversation())
			if err == nil {
				t.Fatal("no error")
			}
			// One request per attempt: the SDK does not retry on its own.
			if n := len(s.Calls()); n != fastRetry.MaxAttempts {
				t.Errorf("server saw %d requests, want %d", n, fastRetry.MaxAttempts)
			}
			if len(attempts) != fastRetry.MaxAttempts {
				t.Fatalf("onAttempt called %d times, want %d", len(attempts), fastRetry.MaxAttempts)
			}
			for i, a := range attempts {
				final := i == len(attempts)-1
				if a.N != i+1 || a.Status != 500 || (a.RetryIn == 0) != final {
					t.Errorf("attempt %d: %+v", i, a)
				}
			}
			var perr *Error
			if !errors.As(err, &perr) || perr.Status != 500 || !perr.Retryable || perr.Provider != string(kind) {
				t.Errorf("final error %#v", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("after %d attempts", fastRetry.MaxAttempts)) {
				t.Errorf("final error %q does not count the attempts", err)
			}
		})
	}
}

func TestBadRequestIsNotRetried(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t, reply{status: 400, body: errorBodies[kind][400]})
			_, attempts, err := completeWithRetry(newWireProvider(t, kind, s), conversation())
			var perr *Error
			if !errors.As(err, &perr) || perr.Status != 400 || perr.Retryable {
				t.Fatalf("error %#v, want a non-retryable 400", err)
			}
			if !strings.HasPrefix(perr.Message, "invalid_request_error: ") {
				t.Errorf("message %q, want the provider's explanation", perr.Message)
			}
			if n := len(s.Calls()); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
			if len(attempts) != 1 || attempts[0].RetryIn != 0 || attempts[0].Status != 400 {
				t.Errorf("attempts %+v, want one final 400", attempts)
			}
		})
	}
}

func TestConnectionErrorIsRetryable(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t, reply{status: 200, body: okBodies[kind]})
			p := newWireProvider(t, kind, s)
			s.Close()
			_, attempts, err := completeWithRetry(p, conversation())
			var perr *Error
			if !errors.As(err, &perr) || perr.Status != 0 || !perr.Retryable {
				t.Fatalf("error %#v, want a retryable connection error", err)
			}
			if len(attempts) != fastRetry.MaxAttempts {
				t.Errorf("%d attempts, want %d", len(attempts), fastRetry.MaxAttempts)
			}
		})
	}
}

func TestCanceledContextIsNotRetried(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t, reply{status: 200, body: okBodies[kind]})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			calls := 0
			_, err := WithRetry(newWireProvider(t, kind, s), fastRetry, func(Attempt) { calls++ }).Complete(ctx, conversation())
			if !errors.Is(err, context.Canceled) || calls != 1 {
				t.Errorf("err %v after %d attempts, want context.Canceled after 1", err, calls)
			}
		})
	}
}

func TestNoModelIsAPermanentError(t *testing.T) {
	for _, kind := range kinds {
		p, err := New(Config{Kind: kind, APIKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(context.Background(), conversation())
		var perr *Error
		if !errors.As(err, &perr) || perr.Retryable || !strings.Contains(err.Error(), "no model") {
			t.Errorf("%s: %v, want a permanent no-model error", kind, err)
		}
	}
}

// TestAPIKeyNeverLeaks drives every path a key could escape through: a
// server echoing the key it received in error bodies (JSON and not) and in a
// successful answer, and a dead server. The key must not appear in errors,
// responses (evidence bodies included), or a log of the attempts.
func TestAPIKeyNeverLeaks(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   func(kind Kind) string // KEY is replaced by the received key
	}{
		{"401 echoing the key", 401, func(Kind) string {
			return `{"type":"error","error":{"type":"authentication_error","message":"Incorrect API key provided: KEY"}}`
		}},
		{"502 html echoing the key", 502, func(Kind) string { return "<html><body>upstream refused KEY</body></html>" }},
		{"200 echoing the key", 200, func(kind Kind) string {
			return strings.Replace(okBodies[kind], "Fixed: ", "Fixed with KEY: ", 1)
		}},
		{"dead server", 0, nil},
	}
	for _, kind := range kinds {
		for _, tt := range tests {
			t.Run(string(kind)+"/"+tt.name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					key := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
					if !strings.Contains(key, testKey) {
						t.Errorf("request carries no key: %q", key)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.status)
					fmt.Fprint(w, strings.ReplaceAll(tt.body(kind), "KEY", key))
				}))
				defer srv.Close()
				base := srv.URL
				if kind == KindOpenAI {
					base += "/v1"
				}
				p, err := New(Config{Kind: kind, BaseURL: base, APIKey: testKey, Model: defaultModel[kind], HTTPClient: srv.Client(), Endpoints: local})
				if err != nil {
					t.Fatal(err)
				}
				if tt.body == nil {
					srv.Close()
				}

				var logs bytes.Buffer
				log := slog.New(slog.NewJSONHandler(&logs, nil))
				resp, err := WithRetry(p, fastRetry, func(a Attempt) {
					log.Warn("model call failed", "attempt", a.N, "status", a.Status, "retry_in", a.RetryIn, "err", a.Err)
				}).Complete(context.Background(), conversation())

				var seen []string
				if err != nil {
					log.Error("model call", "err", err)
					var perr *Error
					errors.As(err, &perr)
					seen = append(seen, err.Error(), fmt.Sprintf("%+v %#v", err, perr))
				} else {
					if len(resp.RequestBody) == 0 || len(resp.ResponseBody) == 0 {
						t.Error("no evidence bodies")
					}
					if !strings.Contains(resp.Content, redacted) {
						t.Errorf("content %q, want the echoed key redacted", resp.Content)
					}
				}
				seen = append(seen, fmt.Sprintf("%+v", resp), string(resp.RequestBody), string(resp.ResponseBody), logs.String())
				for _, s := range seen {
					if strings.Contains(s, testKey) {
						t.Errorf("key leaked: %s", s)
					}
				}
			})
		}
	}
}

// An error body is cut for the message; a key echoed across the cut must
// not survive in part.
func TestAPIKeyAcrossTheCutIsRedacted(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + r.Header.Get("X-Api-Key")
				w.WriteHeader(http.StatusBadGateway)
				fmt.Fprint(w, strings.Repeat("x", 290)+key) // the cut is at 300
			}))
			defer srv.Close()
			p, err := New(Config{Kind: kind, BaseURL: srv.URL, APIKey: testKey, Model: defaultModel[kind], HTTPClient: srv.Client(), Endpoints: local})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), conversation())
			if err == nil || !strings.Contains(err.Error(), "xxxxx") {
				t.Fatalf("got %v, want the cut body", err)
			}
			if part := testKey[:10]; strings.Contains(err.Error(), part) {
				t.Fatalf("part of the key (%q) survived: %v", part, err)
			}
		})
	}
}

// TestSDKsIgnoreEnvironment: the SDKs' client constructors read OPENAI_* and
// ANTHROPIC_* variables; configuration must come from Config alone.
func TestSDKsIgnoreEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: yes")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Env: yes")
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s := newWireServer(t, reply{status: 200, body: okBodies[kind]})
			if _, err := newWireProvider(t, kind, s).Complete(context.Background(), conversation()); err != nil {
				t.Fatal(err)
			}
			h := s.Calls()[0].Header
			for name, values := range h {
				for _, v := range values {
					if strings.Contains(v, "from-env") || strings.Contains(name, "From-Env") {
						t.Errorf("header %s: %s comes from the environment", name, v)
					}
				}
			}
			if h.Get("Authorization")+h.Get("X-Api-Key") == "" {
				t.Error("no key sent")
			}

			// Without a configured key (a local server) none is sent: the
			// environment's key must not reach a third-party endpoint.
			p, err := New(Config{Kind: kind, BaseURL: s.URL, Model: "local", HTTPClient: s.Client(), Endpoints: local})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = p.Complete(context.Background(), conversation())
			h = s.Calls()[1].Header
			if got := h.Get("Authorization") + h.Get("X-Api-Key"); got != "" {
				t.Errorf("credentials sent without a configured key: %q", got)
			}
		})
	}
}

// TestAnthropicLargeMaxTokens: the SDK refuses, before sending, a
// non-streaming request it expects to take over ten minutes (max_tokens above
// about 21,000). That must be a permanent error, not a retried "connection"
// failure.
func TestAnthropicLargeMaxTokens(t *testing.T) {
	s := newWireServer(t, reply{status: 200, body: anthropicFinalReply})
	req := conversation()
	req.MaxTokens = 64000
	_, attempts, err := completeWithRetry(newWireProvider(t, KindAnthropic, s), req)
	var perr *Error
	if !errors.As(err, &perr) || perr.Retryable || !strings.Contains(err.Error(), "streaming is required") {
		t.Fatalf("err %v, want a permanent streaming-required error", err)
	}
	if len(attempts) != 1 || len(s.Calls()) != 0 {
		t.Errorf("%d attempts, %d requests; want 1 attempt, none sent", len(attempts), len(s.Calls()))
	}
}
