package mcpproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// HeaderSession is the streamable HTTP transport's session header: the
// conversation a request belongs to (request ids are the host's within
// one).
const HeaderSession = "Mcp-Session-Id"

// maxBody bounds a POST body the proxy reads for calls: a longer one is
// refused (413), since it must be read whole before it is relayed.
const maxBody = 64 << 20

// Handler returns a reverse proxy of the MCP streamable HTTP transport to
// upstream, an MCP endpoint ("http://host:port/mcp"): every request goes
// to upstream's scheme and host with its own path, method, headers
// (Mcp-Session-Id, MCP-Protocol-Version, Authorization, Last-Event-ID:
// all of them) and body, and every answer comes back as the server sent
// it, an event stream flushed event by event. The JSON-RPC messages of
// POST bodies are noted in r as the host's, those of the answers (JSON,
// or each event of a text/event-stream, a GET's stream too) as the
// server's, in the conversation of the request's Mcp-Session-Id. A POST
// answered with an HTTP error or no body fails the calls it carried; a
// DELETE (the host ends its MCP session) fails the session's calls still
// open.
func Handler(r *Recorder, upstream *url.URL, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = upstream.Scheme, upstream.Host
			pr.Out.Host = upstream.Host
		},
		// An event stream is flushed as it comes (ReverseProxy does so for
		// text/event-stream on its own); -1 flushes a JSON answer at once too.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			conv := resp.Request.Header.Get(HeaderSession)
			calls, _ := resp.Request.Context().Value(callsKey{}).(*postCalls)
			if resp.StatusCode >= 300 || resp.StatusCode == http.StatusAccepted && calls != nil {
				if calls != nil {
					r.failCalls(calls.keys, fmt.Sprintf("the MCP server answered HTTP %s without a JSON-RPC answer", resp.Status))
				}
				return nil
			}
			mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			switch mt {
			case "text/event-stream":
				resp.Body = &sseReader{rc: resp.Body, note: func(data []byte) { r.FromServer(conv, data) }}
			case "application/json":
				resp.Body = &jsonReader{rc: resp.Body, note: func(data []byte) { r.FromServer(conv, data) }}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if calls, _ := req.Context().Value(callsKey{}).(*postCalls); calls != nil {
				r.failCalls(calls.keys, "the MCP server could not be reached: "+err.Error())
			}
			log.Warn("mcp-proxy: upstream unreachable", "upstream", upstream.Redacted(), "err", err)
			http.Error(w, "rath mcp-proxy: the MCP server at "+upstream.Redacted()+" could not be reached", http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.Body != nil {
			body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
			if err != nil {
				http.Error(w, "rath mcp-proxy: reading the request: "+err.Error(), http.StatusBadRequest)
				return
			}
			if len(body) > maxBody {
				http.Error(w, fmt.Sprintf("rath mcp-proxy: a request body over %d bytes is refused", maxBody), http.StatusRequestEntityTooLarge)
				return
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			if keys := r.fromHost(req.Header.Get(HeaderSession), body); len(keys) > 0 {
				req = req.WithContext(context.WithValue(req.Context(), callsKey{}, &postCalls{keys: keys}))
			}
		}
		rp.ServeHTTP(w, req)
		if conv := req.Header.Get(HeaderSession); req.Method == http.MethodDelete && conv != "" {
			r.FailOpen(conv, "the host ended the MCP session before the server answered")
		}
	})
}

// callsKey carries the calls a POST opened to its answer.
type callsKey struct{}

type postCalls struct{ keys []key }

// jsonReader notes a JSON answer once it is read whole (up to maxBody;
// a longer one is relayed and not noted).
type jsonReader struct {
	rc   io.ReadCloser
	buf  []byte
	over bool
	note func([]byte)
	done bool
}

func (j *jsonReader) Read(p []byte) (int, error) {
	n, err := j.rc.Read(p)
	if !j.over {
		if len(j.buf)+n > maxBody {
			j.over, j.buf = true, nil
		} else {
			j.buf = append(j.buf, p[:n]...)
		}
	}
	if err == io.EOF && !j.done {
		j.done = true
		if !j.over {
			j.note(j.buf)
		}
	}
	return n, err
}

func (j *jsonReader) Close() error { return j.rc.Close() }

// sseReader notes the data of each event of an event stream as it passes
// (an event's data longer than maxBody is not noted).
type sseReader struct {
	rc   io.ReadCloser
	line []byte // the line under way
	data []byte // the data of the event under way
	has  bool   // the event under way has data
	over bool
	cr   bool // the last line ended with \r: a \n next ends no line
	note func([]byte)
}

func (s *sseReader) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	s.feed(p[:n])
	return n, err
}

func (s *sseReader) Close() error { return s.rc.Close() }

// feed parses the event stream format: lines end in \n, \r\n or \r; a
// blank line dispatches the event; "data:" lines add to its data.
func (s *sseReader) feed(b []byte) {
	for len(b) > 0 {
		if s.cr && b[0] == '\n' {
			b = b[1:]
		}
		s.cr = false
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			if len(s.line)+len(b) <= maxBody {
				s.line = append(s.line, b...)
			} else {
				s.over = true
			}
			return
		}
		if len(s.line)+i <= maxBody {
			s.line = append(s.line, b[:i]...)
		} else {
			s.over = true
		}
		s.cr = b[i] == '\r'
		s.endLine()
		b = b[i+1:]
	}
}

func (s *sseReader) endLine() {
	line := s.line
	s.line = s.line[:0]
	if len(line) == 0 {
		if s.has && !s.over {
			s.note(s.data)
		}
		s.data, s.has, s.over = s.data[:0], false, false
		return
	}
	field, value, _ := strings.Cut(string(line), ":")
	if field != "data" {
		return
	}
	value = strings.TrimPrefix(value, " ")
	if s.has {
		s.data = append(s.data, '\n')
	}
	if len(s.data)+len(value) > maxBody {
		s.over = true
	}
	s.data, s.has = append(s.data, value...), true
}
