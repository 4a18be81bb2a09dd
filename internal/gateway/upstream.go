package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// providerError is a provider's refusal, with its status.
type providerError struct {
	status int
	msg    string
}

func (e *providerError) Error() string {
	return fmt.Sprintf("the provider answered %d: %s", e.status, e.msg)
}

// ask sends the call to the provider and returns its answer and its raw
// body (a response, or the event stream as read). A streamed answer is
// written to w as it comes (at.streaming is then set). status is the
// provider's HTTP status when it refused.
func (g *Gateway) ask(ctx context.Context, w http.ResponseWriter, r *http.Request, k *call, req *request) (ans *answer, raw []byte, at attempt, status int, err error) {
	body, dropUsage, err := k.wire.upstreamBody(req, k.body)
	if err != nil {
		return nil, nil, at, 0, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, k.up.BaseURL+k.wire.path(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, at, 0, fmt.Errorf("the provider's request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	k.wire.headers(r.Header, hr.Header, k.up.Key)
	if req.Stream {
		hr.Header.Set("Accept", "text/event-stream")
	}
	start := time.Now()
	resp, err := g.http.Do(hr)
	if err != nil {
		return nil, nil, at, 0, fmt.Errorf("call the provider: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		at.latency = time.Since(start)
		return nil, nil, at, resp.StatusCode, &providerError{status: resp.StatusCode, msg: providerMessage(b)}
	}
	if !req.Stream {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
		at.latency = time.Since(start)
		if err != nil {
			return nil, nil, at, 0, fmt.Errorf("read the provider's answer: %w", err)
		}
		if len(raw) > maxBody {
			return nil, nil, at, 0, fmt.Errorf("the provider's answer is larger than %d bytes", maxBody)
		}
		ans, err = k.wire.parseResponse(raw)
		return ans, raw, at, 0, err
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	at.streaming = true
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	deltas := g.deltas(k)
	ans, raw, err = k.wire.copyStream(resp.Body, w, flush, dropUsage, deltas)
	deltas(events.Delta{Done: true})
	at.latency = time.Since(start)
	return ans, raw, at, 0, err
}

// providerMessage is the message of a provider's error body, or its first
// bytes.
func providerMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	const max = 512
	if len(b) > max {
		b = b[:max]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// deltas publishes what each event of a streamed answer adds on the
// session's delta subject, as the caller: live hints for watchers, never
// stored (events.Delta). A delta that cannot be published is dropped: the
// stored answer is what counts.
func (g *Gateway) deltas(k *call) func(events.Delta) {
	n := 0
	subject := events.DeltaSubject(k.tenant, k.session)
	return func(d events.Delta) {
		d.Session, d.Answer, d.Agent, d.N = k.session, k.answer, k.agent, n
		n++
		b, err := json.Marshal(d)
		if err == nil {
			err = k.c.Conn().Publish(subject, b)
		}
		if err != nil {
			g.log.Debug("gateway: a delta is not published", "session", k.session, "err", err)
		}
	}
}
