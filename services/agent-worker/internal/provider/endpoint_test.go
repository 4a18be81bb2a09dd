package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestEndpointsCheck(t *testing.T) {
	official := Endpoints{}
	tests := []struct {
		name  string
		e     Endpoints
		kind  Kind
		url   string
		allow bool
	}{
		{"empty is the official endpoint", official, KindOpenAI, "", true},
		{"openai official", official, KindOpenAI, "https://api.openai.com/v1", true},
		{"openai official, trailing slash", official, KindOpenAI, "https://api.openai.com/v1/", true},
		{"openai official, case and default port", official, KindOpenAI, "https://API.OpenAI.com:443/v1", true},
		{"anthropic official", official, KindAnthropic, "https://api.anthropic.com", true},
		{"anthropic official, a path below", official, KindAnthropic, "https://api.anthropic.com/v1", true},
		{"another provider's official endpoint", official, KindAnthropic, "https://api.openai.com/v1", false},
		{"a host that starts with the official one", official, KindOpenAI, "https://api.openai.com.evil.com/v1", false},
		{"the official host as user information", official, KindOpenAI, "https://api.openai.com@evil.com/v1", false},
		{"the official host in the path", official, KindOpenAI, "https://evil.com/api.openai.com/v1", false},
		{"the official URL in the query", official, KindOpenAI, "https://evil.com/?u=https://api.openai.com/v1", false},
		{"plain http to the official host", official, KindOpenAI, "http://api.openai.com/v1", false},
		{"another port of the official host", official, KindOpenAI, "https://api.openai.com:8443/v1", false},
		{"a sibling path", official, KindOpenAI, "https://api.openai.com/v1beta", false},
		{"above the official path", official, KindOpenAI, "https://api.openai.com/", false},
		{"dot segments", official, KindOpenAI, "https://api.openai.com/v1/../admin", false},
		{"escaped dot segments", official, KindOpenAI, "https://api.openai.com/v1/%2e%2e/admin", false},
		{"user information on the official host", official, KindOpenAI, "https://u:p@api.openai.com/v1", false},
		{"a fragment", official, KindOpenAI, "https://api.openai.com/v1#x", false},
		{"a query", official, KindOpenAI, "https://api.openai.com/v1?x=1", false},
		{"a backslash", official, KindOpenAI, `https://api.openai.com\@evil.com/v1`, false},
		{"not http", official, KindOpenAI, "ftp://api.openai.com/v1", false},
		{"loopback by default", official, KindOpenAI, "http://127.0.0.1:8080/v1", false},
		{"localhost by default", official, KindOpenAI, "http://localhost:11434/v1", false},

		{"an allowed endpoint", allowed, KindOpenAI, "http://127.0.0.1:8080/v1", true},
		{"below an allowed endpoint", allowed, KindOpenAI, "http://127.0.0.1:8080/v1/", true},
		{"an allowed endpoint, another port", allowed, KindOpenAI, "http://127.0.0.1:8081/v1", false},
		{"an allowed endpoint, a sibling path", allowed, KindOpenAI, "http://127.0.0.1:8080/v1x", false},
		{"an allowed endpoint, https", allowed, KindOpenAI, "https://127.0.0.1:8080/v1", false},
		{"an allowed endpoint, another provider", allowed, KindAnthropic, "http://127.0.0.1:8080/v1", false},
		{"allowing one keeps the official one", allowed, KindOpenAI, "https://api.openai.com/v1", true},
		{"an allowed host's root", Endpoints{Allowed: []Endpoint{{KindAnthropic, "https://llm.example.com/"}}}, KindAnthropic, "https://llm.example.com/anthropic", true},

		{"loopback: 127.0.0.1", loopback, KindOpenAI, "http://127.0.0.1:1234/v1", true},
		{"loopback: 127.0.0.0/8", loopback, KindAnthropic, "http://127.5.6.7", true},
		{"loopback: ::1", loopback, KindOpenAI, "http://[::1]:8080/v1", true},
		{"loopback: localhost", loopback, KindOpenAI, "http://LOCALHOST:11434/v1", true},
		{"loopback: a name that starts like an address", loopback, KindOpenAI, "http://127.0.0.1.nip.io/v1", false},
		{"loopback: a name that ends like localhost", loopback, KindOpenAI, "http://evil.localhost.com/v1", false},
		{"loopback: the unspecified address", loopback, KindOpenAI, "http://0.0.0.0:8080/v1", false},
		{"loopback: another host", loopback, KindOpenAI, "http://10.0.0.1:8080/v1", false},
		{"loopback: still no user information", loopback, KindOpenAI, "http://u@127.0.0.1:8080/v1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.e.Check(tt.kind, tt.url)
			if tt.allow && err != nil {
				t.Fatalf("Check(%s, %q) = %v, want allowed", tt.kind, tt.url, err)
			}
			if !tt.allow && err == nil {
				t.Fatalf("Check(%s, %q) allowed it", tt.kind, tt.url)
			}
		})
	}
}

var (
	allowed  = Endpoints{Allowed: []Endpoint{{KindOpenAI, "http://127.0.0.1:8080/v1"}}}
	loopback = Endpoints{Loopback: true}
)

// A well-formed URL that is not allowed is ErrEndpointNotAllowed, so
// callers can tell it from a malformed one.
func TestEndpointsCheckSaysNotAllowed(t *testing.T) {
	err := Endpoints{}.Check(KindOpenAI, "http://127.0.0.1:8080/v1")
	if !errors.Is(err, ErrEndpointNotAllowed) || !strings.Contains(err.Error(), `openai base URL "http://127.0.0.1:8080/v1"`) {
		t.Fatalf("got %v, want ErrEndpointNotAllowed naming the URL", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	e, err := ParseEndpoint("openai=http://127.0.0.1:8080/v1")
	if err != nil || e != (Endpoint{KindOpenAI, "http://127.0.0.1:8080/v1"}) {
		t.Fatalf("got %+v, %v", e, err)
	}
	for in, want := range map[string]string{
		"http://127.0.0.1:8080/v1":                "want PROVIDER=URL",
		"scripted=http://127.0.0.1:8080/v1":       "provider must be openai or anthropic",
		"anthropic=127.0.0.1:8080":                "not an http or https URL",
		"openai=https://u:secret@llm.example.com": "user information",
		"openai=https://llm.example.com/v1?k=1":   "no query",
	} {
		_, err := ParseEndpoint(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEndpoint(%q) = %v, want an error saying %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseEndpoint(%q): the error shows the password: %v", in, err)
		}
	}
}

// counter is a server that counts the requests it gets and answers each
// with a final reply of kind.
func counter(t *testing.T, kind Kind) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, okBodies[kind])
	}))
	t.Cleanup(s.Close)
	return s, &n
}

// An agent naming an endpoint that is not allowed gets no provider, and
// the endpoint gets no request.
func TestNoRequestToAnEndpointNotAllowed(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			s, n := counter(t, kind)
			_, err := New(Config{Kind: kind, BaseURL: s.URL + "/v1", APIKey: testKey, Model: defaultModel[kind], HTTPClient: s.Client()})
			if !errors.Is(err, ErrEndpointNotAllowed) {
				t.Fatalf("New = %v, want ErrEndpointNotAllowed", err)
			}
			if got := n.Load(); got != 0 {
				t.Fatalf("the endpoint got %d requests, want 0", got)
			}
			// Allowed by name, it is called.
			p, err := New(Config{Kind: kind, BaseURL: s.URL + "/v1", APIKey: testKey, Model: defaultModel[kind], HTTPClient: s.Client(),
				Endpoints: Endpoints{Allowed: []Endpoint{{kind, s.URL + "/v1"}}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), conversation()); err != nil {
				t.Fatal(err)
			}
			if got := n.Load(); got != 1 {
				t.Fatalf("the allowed endpoint got %d requests, want 1", got)
			}
		})
	}
}

// An allowed endpoint that redirects elsewhere does not take the key with
// it: Go's client would keep x-api-key on any redirect, and Authorization
// on one to another port of the same host, as here. A redirect within the
// allowed endpoint is followed.
func TestRedirectToAnEndpointNotAllowedIsNotFollowed(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			elsewhere, n := counter(t, kind)
			var moved atomic.Int64
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Query().Get("within") != "":
					moved.Add(1)
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, okBodies[kind])
				case r.Header.Get("X-Test") == "within":
					http.Redirect(w, r, r.URL.Path+"?within=1", http.StatusTemporaryRedirect)
				default:
					http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
				}
			}))
			t.Cleanup(s.Close)
			p, err := New(Config{Kind: kind, BaseURL: s.URL + "/v1", APIKey: testKey, Model: defaultModel[kind], HTTPClient: s.Client(),
				Endpoints: Endpoints{Allowed: []Endpoint{{kind, s.URL + "/v1"}}}})
			if err != nil {
				t.Fatal(err)
			}
			attempts := 0
			_, err = WithRetry(p, fastRetry, func(Attempt) { attempts++ }).Complete(context.Background(), conversation())
			var perr *Error
			if !errors.Is(err, ErrEndpointNotAllowed) || !errors.As(err, &perr) || perr.Retryable || attempts != 1 {
				t.Fatalf("err %v after %d attempts, want a permanent ErrEndpointNotAllowed after 1", err, attempts)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
			if got := n.Load(); got != 0 {
				t.Fatalf("the redirect's target got %d requests, want 0", got)
			}

			within, err := New(Config{Kind: kind, BaseURL: s.URL + "/v1", APIKey: testKey, Model: defaultModel[kind],
				HTTPClient: &http.Client{Transport: header{"X-Test", "within", s.Client().Transport}},
				Endpoints:  Endpoints{Allowed: []Endpoint{{kind, s.URL + "/v1"}}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := within.Complete(context.Background(), conversation()); err != nil || moved.Load() != 1 {
				t.Fatalf("redirect within the endpoint: %v, %d answers", err, moved.Load())
			}
		})
	}
}

// header is a transport that sets one request header.
type header struct {
	name, value string
	next        http.RoundTripper
}

func (h header) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.next.RoundTrip(r)
}
