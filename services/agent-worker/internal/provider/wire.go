package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// exchange records the one HTTP round trip of a model call. Both SDKs take it
// as a per-request middleware, so it sees the request as sent (after the SDK
// has serialised the body) and the response before the SDK decodes it. Only
// bodies, status and response headers are kept: request headers, where the
// API key lives, are never read.
//
// A streamed answer (stream set) is not read here, or its pieces would wait
// for its end: its body is kept as the SDK reads it (recordingBody), so the
// evidence is the event stream as received, and a read that fails is the
// cut that ended it. An error status is read whole either way.
type exchange struct {
	// check, if set, vets the request's URL before anything is sent.
	check        func(*url.URL) error
	refused      error // check's verdict on the request or a redirect
	sent         bool  // the SDK got as far as sending
	requestBody  []byte
	status       int
	header       http.Header
	responseBody []byte
	stream       bool  // the answer is an event stream, read by the SDK
	cut          error // the read that ended a stream early
}

// middleware has the shape of both SDKs' option.Middleware.
func (x *exchange) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if x.check != nil {
		if err := x.check(req.URL); err != nil {
			x.refused = err
			return nil, err
		}
	}
	x.sent = true
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		x.requestBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	res, err := next(req)
	if errors.Is(err, ErrEndpointNotAllowed) {
		x.refused = err // a redirect the client did not follow
	}
	if err != nil || res == nil {
		return res, err
	}
	x.status = res.StatusCode
	x.header = res.Header.Clone()
	if x.stream && res.StatusCode < 400 {
		res.Body = &recordingBody{rc: res.Body, x: x}
		return res, nil
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		// The connection dropped mid-body: report it as a transport failure.
		x.status = 0
		return nil, fmt.Errorf("read response body: %w", err)
	}
	x.responseBody = b
	res.Body = io.NopCloser(bytes.NewReader(b))
	return res, nil
}

// failure turns an SDK error into what Complete returns. A caller that gave
// up (ctx done) gets its context error, which is never retried. An error
// status becomes an *Error carrying the provider's message; a request that
// never got an answer is a retryable connection failure; anything before
// sending or after a 2xx (building or decoding) is a permanent *Error, and
// so is a request or redirect to a URL that is not allowed, which is never
// sent. A stream whose connection failed mid-answer is retryable, like a
// connection that failed before it.
func (x *exchange) failure(ctx context.Context, provider, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", provider, ctxErr)
	}
	switch {
	case x.refused != nil:
		return &Error{Provider: provider, Message: redact("request not sent: "+x.refused.Error(), key), cause: ErrEndpointNotAllowed}
	case x.status >= 400:
		// Redacted before it is cut (a key across the cut would survive
		// in part) and after it is decoded (a key written with JSON
		// escapes shows only then).
		return &Error{
			Provider:   provider,
			Status:     x.status,
			Retryable:  retryableStatus(x.status),
			RetryAfter: retryAfter(x.header, time.Now()),
			Message:    redact(apiMessage(redactBytes(x.responseBody, key), x.status), key),
		}
	case !x.sent:
		return &Error{Provider: provider, Message: redact("request not sent: "+err.Error(), key)}
	case x.status == 0:
		return &Error{Provider: provider, Retryable: true, Message: redact("no response: "+err.Error(), key)}
	case x.cut != nil:
		return &Error{Provider: provider, Status: x.status, Retryable: true, Message: redact("stream cut: "+x.cut.Error(), key)}
	default:
		return &Error{Provider: provider, Status: x.status, Message: redact("decode response: "+err.Error(), key)}
	}
}

// evidence returns the bodies for Response, with the key removed.
func (x *exchange) evidence(key string) (request, response []byte) {
	return redactBytes(x.requestBody, key), redactBytes(x.responseBody, key)
}

// recordingBody is a streamed response body that keeps what the SDK reads,
// and the error, other than its end, that stopped it. The SDK reads it from
// the goroutine that called Complete, so it needs no lock.
type recordingBody struct {
	rc io.ReadCloser
	x  *exchange
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.x.responseBody = append(b.x.responseBody, p[:n]...)
	if err != nil && err != io.EOF && b.x.cut == nil {
		b.x.cut = err
	}
	return n, err
}

func (b *recordingBody) Close() error { return b.rc.Close() }

// streamFailure is the failure of a stream that the provider ended with an
// error event (data, its JSON) after a 2xx: the request was accepted and the
// provider failed mid-answer (Anthropic's overloaded_error), so it is
// retryable like a 5xx.
func (x *exchange) streamFailure(provider, key string, data []byte) error {
	return &Error{Provider: provider, Status: x.status, Retryable: true,
		Message: redact("error event: "+apiMessage(redactBytes(data, key), x.status), key)}
}

// unfinished is the failure of a stream that ended cleanly before its last
// event: a proxy or server closed it early, so it is retryable.
func (x *exchange) unfinished(provider string) error {
	return &Error{Provider: provider, Status: x.status, Retryable: true, Message: "stream ended before the answer did"}
}

// say passes a piece of the answer to deltas, with the key removed (a key
// split across two pieces is not found: deltas are hints, never stored;
// the Response is redacted whole).
func say(deltas func(Delta), key string, d Delta) {
	d.Text = redact(d.Text, key)
	if d.Call != nil {
		d.Call.Arguments = redact(d.Call.Arguments, key)
	}
	deltas(d)
}

// apiMessage extracts the explanation from an error body. OpenAI sends
// {"error":{"message","type","code"}}, Anthropic
// {"type":"error","error":{"type","message"}}; proxies send anything, so the
// fallback is the start of the body or the status text.
func apiMessage(body []byte, status int) string {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		if e.Error.Type != "" {
			return e.Error.Type + ": " + e.Error.Message
		}
		return e.Error.Message
	}
	text := strings.Join(strings.Fields(string(body)), " ")
	if text == "" {
		return http.StatusText(status)
	}
	const limit = 300
	if len(text) > limit {
		text = strings.ToValidUTF8(text[:limit], "") + "…"
	}
	return text
}

// redact removes key from the model's text and tool arguments. A model cannot
// know the key, but an echoing proxy or a prompt that contained it can put it
// there, and the response becomes a session event.
func (r Response) redact(key string) Response {
	r.Content = redact(r.Content, key)
	for i, c := range r.ToolCalls {
		r.ToolCalls[i].Arguments = redactBytes(c.Arguments, key)
	}
	return r
}
