package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The subset of OpenSandbox's APIs the remote backend speaks (ADR 0041):
//
//	lifecycle (URL/v1):
//	  GET    /sandboxes?pageSize=1               probe: up, and the key is accepted
//	  POST   /sandboxes                          create {image, entrypoint, timeout, resourceLimits, metadata}
//	  GET    /sandboxes/{id}                     wait until status.state is Running
//	  GET    /sandboxes/{id}/endpoints/{port}    the execd endpoint
//	  DELETE /sandboxes/{id}
//	execd (at that endpoint):
//	  POST   /command                            {command, cwd, timeout}: an SSE stream of events
//	  DELETE /command?id=                        interrupt, when the runner's own deadline passes
//	  GET    /files/search?path=&pattern=**      the sandbox's files
//	  POST   /files/upload                       multipart: metadata (JSON), file; repeated
//	  GET    /files/download?path=
//	  DELETE /files?path=                        repeated path

// apiKeyHeader carries Remote.Key on every request.
const apiKeyHeader = "OPEN-SANDBOX-API-KEY"

// maxJSON bounds a JSON answer but a listing's; maxListing a listing's;
// maxEvent one event of a command's stream; maxSnippet what an error
// quotes of a failed answer.
const (
	maxJSON    = 1 << 20
	maxEvent   = 4 << 20
	maxSnippet = 256
)

// errGone is a sandbox the service does not know (404): expired, or
// deleted behind the runner's back.
var errGone = errors.New("the remote sandbox is gone (expired or deleted)")

// lifecycle is the URL of a lifecycle API path, its segments escaped.
func (r *remote) lifecycle(segs ...string) *url.URL {
	return r.base.JoinPath(append([]string{"v1"}, segs...)...)
}

// call sends one request and decodes a JSON answer of at most max bytes
// into out (when out is not nil). Errors name the method, the path and the
// status, quote at most maxSnippet bytes of the answer, with the key
// removed should the service echo it, and wrap errGone for a 404.
func (r *remote) call(ctx context.Context, u *url.URL, method string, q url.Values, body io.Reader, contentType string, out any, max int64) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.do(ctx, u, method, q, body, contentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSON))
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u.Path, err)
	}
	if int64(len(b)) > max {
		return fmt.Errorf("%s %s: the answer is larger than %d bytes", method, u.Path, max)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: malformed JSON answer: %w", method, u.Path, err)
	}
	return nil
}

// do sends one request and returns a 2xx response, whose body the caller
// closes; any other status is an error.
func (r *remote) do(ctx context.Context, u *url.URL, method string, q url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u2 := *u
	if q != nil {
		u2.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u2.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Path, err)
	}
	if r.cfg.Key != "" {
		req.Header.Set(apiKeyHeader, r.cfg.Key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		// url.Error names the method and URL (which hold no key) and the
		// transport's failure.
		return nil, r.redact(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxSnippet))
	msg := r.redact(errors.New(printable(snippet))).Error()
	err = fmt.Errorf("%s %s: %s", method, u.Path, resp.Status)
	if msg != "" {
		err = fmt.Errorf("%w: %s", err, msg)
	}
	if resp.StatusCode == http.StatusNotFound {
		err = fmt.Errorf("%w (%w)", errGone, err)
	}
	return nil, err
}

// redact removes the key from an error's text, should anything the service
// or the transport says repeat it. The error's chain is kept when the key
// is not in it.
func (r *remote) redact(err error) error {
	if err == nil || r.cfg.Key == "" || !strings.Contains(err.Error(), r.cfg.Key) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), r.cfg.Key, "[redacted]"))
}

// printable is text fit for an error message: valid UTF-8, one line.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	return strings.Join(strings.Fields(s), " ")
}

// sandboxIDRE admits the service's sandbox IDs as one URL path segment.
var sandboxIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// create makes a sandbox and waits until it runs; it returns its ID and
// execd endpoint. A sandbox that does not come up is deleted.
func (r *remote) create(ctx context.Context, sessionID, tenant string) (string, *url.URL, error) {
	req := map[string]any{
		"image":          map[string]string{"uri": r.cfg.Image},
		"entrypoint":     r.cfg.Entrypoint,
		"timeout":        int64(r.cfg.TTL / time.Second),
		"resourceLimits": r.cfg.Resources,
		"metadata":       map[string]string{"rath.session": sessionID, "rath.tenant": tenant},
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", nil, err
	}
	var made struct {
		ID string `json:"id"`
	}
	if err := r.call(ctx, r.lifecycle("sandboxes"), http.MethodPost, nil, bytes.NewReader(body), "application/json", &made, maxJSON); err != nil {
		return "", nil, fmt.Errorf("create a remote sandbox: %w", err)
	}
	if !sandboxIDRE.MatchString(made.ID) {
		return "", nil, fmt.Errorf("create a remote sandbox: the service answered an unusable sandbox ID %q", clip(made.ID))
	}
	exec, err := r.started(ctx, made.ID)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.delete(dctx, made.ID)
		return "", nil, fmt.Errorf("remote sandbox %s: %w", made.ID, err)
	}
	return made.ID, exec, nil
}

// startPoll is how often create asks whether a new sandbox runs yet.
const startPoll = 250 * time.Millisecond

// started waits until the sandbox runs, then asks for its execd endpoint.
func (r *remote) started(ctx context.Context, id string) (*url.URL, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	for {
		var sb struct {
			Status struct {
				State   string `json:"state"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"status"`
		}
		if err := r.call(ctx, r.lifecycle("sandboxes", id), http.MethodGet, nil, nil, "", &sb, maxJSON); err != nil {
			return nil, err
		}
		switch sb.Status.State {
		case "Running":
			return r.endpoint(ctx, id)
		case "Pending", "":
		default:
			return nil, fmt.Errorf("it is %s, not running: %s %s", clip(sb.Status.State), clip(sb.Status.Reason), clip(sb.Status.Message))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not running after %v: %w", r.cfg.StartTimeout, ctx.Err())
		case <-time.After(startPoll):
		}
	}
}

// endpoint asks where the sandbox's execd listens. The answer must be on the
// service's own host and scheme (as OpenSandbox's server proxy gives it):
// the key goes with every execd request, so a host the service names is
// never trusted with it.
func (r *remote) endpoint(ctx context.Context, id string) (*url.URL, error) {
	var ep struct {
		Endpoint string `json:"endpoint"`
	}
	if err := r.call(ctx, r.lifecycle("sandboxes", id, "endpoints", strconv.Itoa(r.cfg.ExecdPort)), http.MethodGet, nil, nil, "", &ep, maxJSON); err != nil {
		return nil, fmt.Errorf("execd endpoint: %w", err)
	}
	raw := ep.Endpoint
	if !strings.Contains(raw, "://") {
		raw = r.base.Scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("execd endpoint %q: not a plain URL", clip(ep.Endpoint))
	}
	if u.Scheme != r.base.Scheme || u.Hostname() != r.base.Hostname() {
		return nil, fmt.Errorf("execd endpoint %q is not on the service's host %s: the key is sent to that host only", clip(ep.Endpoint), r.base.Hostname())
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// delete deletes a sandbox; one already gone is deleted.
func (r *remote) delete(ctx context.Context, id string) error {
	err := r.call(ctx, r.lifecycle("sandboxes", id), http.MethodDelete, nil, nil, "", nil, 0)
	if err != nil && !errors.Is(err, errGone) {
		return fmt.Errorf("delete remote sandbox %s: %w", id, err)
	}
	return nil
}

// clip is at most 100 bytes of what the service said, for an error.
func clip(s string) string {
	if len(s) > 100 {
		s = s[:100]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return printable([]byte(s))
}

// event is one event of execd's command stream.
type event struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		EName  string `json:"ename"`
		EValue string `json:"evalue"`
	} `json:"error"`
}

// outcome is how a command's stream said the command ended.
type outcome struct {
	session  string // the init event's ID, to interrupt the command
	complete bool   // execution_complete came
	failed   bool   // an error event came
	exitCode int
	message  string // the error event's text when it names no exit code
}

// exitRE finds the exit code execd's error event gives as its value ("3",
// or "exit status 3").
var exitRE = regexp.MustCompile(`(?:^|\s)(\d{1,3})$`)

// stream reads a command's events into stdout and stderr until the command
// completes, fails or the stream ends. Events are JSON objects, one a line,
// with or without SSE's "data:" prefix; blank lines, comments and other
// SSE fields are skipped.
func stream(body io.Reader, stdout, stderr io.Writer) (outcome, error) {
	var out outcome
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxEvent)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			line = bytes.TrimSpace(d)
		}
		if len(line) == 0 || line[0] != '{' {
			continue // blank, ":" comment, "event:", "id:", "retry:"
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return out, fmt.Errorf("malformed event in the command's stream: %w", err)
		}
		switch ev.Type {
		case "init":
			out.session = ev.Text
		case "stdout":
			io.WriteString(stdout, ev.Text)
		case "stderr":
			io.WriteString(stderr, ev.Text)
		case "error":
			out.failed = true
			out.exitCode = 1
			if ev.Error != nil {
				if m := exitRE.FindStringSubmatch(strings.TrimSpace(ev.Error.EValue)); m != nil {
					out.exitCode, _ = strconv.Atoi(m[1])
				} else {
					out.message = strings.TrimSpace(ev.Error.EName + ": " + ev.Error.EValue)
				}
			}
		case "execution_complete":
			out.complete = true
			return out, nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return out, fmt.Errorf("an event of the command's stream is larger than %d bytes", maxEvent)
		}
		return out, fmt.Errorf("reading the command's stream: %w", err)
	}
	if !out.failed {
		return out, errors.New("the command's stream ended before the command did")
	}
	return out, nil
}
