package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a failed call to a model provider: either the provider answered
// with an error status, or no answer arrived (Status 0). Message is the
// provider's own explanation with the API key removed; it never holds request
// headers.
type Error struct {
	Provider   string
	Status     int  // HTTP status; 0 when none arrived or the request was never sent
	Retryable  bool // 429, 5xx and connection failures
	RetryAfter time.Duration
	Message    string
	// cause is a sentinel of this package the failure is, if any.
	cause error
}

// Unwrap returns the sentinel the failure is, if any: ErrEndpointNotAllowed
// for a request or redirect that was not sent.
func (e *Error) Unwrap() error { return e.cause }

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Provider, e.Message)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Provider, e.Status, e.Message)
}

// Errors the in-process providers return; none is retryable, since asking
// again with the same request gives the same answer.
var (
	// ErrNoScript is returned by Scripted for an agent without a script.
	ErrNoScript = errors.New("no script for agent")
	// ErrScriptExhausted is returned by Scripted when no turn of the agent's
	// script is left for the request.
	ErrScriptExhausted = errors.New("script exhausted")
	// ErrRecordingExhausted is returned by Recorded once every recorded
	// response has been replayed.
	ErrRecordingExhausted = errors.New("recorded responses exhausted")
)

// retryableStatus says whether an HTTP status is worth another attempt: the
// provider is overloaded or rate limiting, not rejecting the request.
func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

const redacted = "[REDACTED]"

// redact removes secret from s. Providers do not echo keys back, but an error
// from a proxy or a transport might, and messages end up in session events.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, redacted)
}

// redactBytes is redact for wire bodies; it returns b itself when the secret
// does not occur.
func redactBytes(b []byte, secret string) []byte {
	if secret == "" || !strings.Contains(string(b), secret) {
		return b
	}
	return []byte(strings.ReplaceAll(string(b), secret, redacted))
}

// retryAfter reads how long the provider asked us to wait: OpenAI's
// Retry-After-Ms, else Retry-After in seconds or as an HTTP date. It returns
// 0 when neither header holds a usable value.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < float64(24*time.Hour/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && s < float64(24*time.Hour/time.Second) {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
