package mcpproxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/mcpproxy"
)

// sseEcho is what the fake HTTP server streams for an echo call: a
// progress notification, then the answer, its data on two lines, with
// \r\n line ends and written in two parts cut inside a line.
const (
	sseEcho1 = "event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\r\n\r\nid: 2\r\ndata: {\"jsonrpc\":\"2.0\", \"id\":\"a\",\r\ndata:  \"result\":{\"content\":[{\"type\":\"text\",\"te"
	sseEcho2 = "xt\":\"streamed\"}]}}\r\n\r\n"
	getSSE   = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"
)

// fakeHTTP is an MCP server of the streamable HTTP transport.
type fakeHTTP struct {
	mu      sync.Mutex
	headers []http.Header // of each request after initialize
}

func (f *fakeHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/mcp" {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, getSSE)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &m)
	if m.Method != "initialize" {
		f.mu.Lock()
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
	}
	switch {
	case m.Method == "initialize":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(mcpproxy.HeaderSession, "sess-1")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"fake-http","version":"0.1"}}}`, m.ID)
	case len(m.ID) == 0:
		w.WriteHeader(http.StatusAccepted)
	case m.Params.Name == "echo":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEcho1)
		w.(http.Flusher).Flush()
		io.WriteString(w, sseEcho2)
	case m.Params.Name == "json":
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"structuredContent":{"n":1},"content":[]}}`, m.ID)
	case m.Params.Name == "down":
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	case m.Params.Name == "accepted":
		w.WriteHeader(http.StatusAccepted)
	case m.Params.Name == "silent":
		w.Header().Set("Content-Type", "text/event-stream")
	}
}

// The HTTP proxy relays requests and answers (JSON, event streams, a GET
// stream, headers) untouched, and records the calls: answered in an event
// stream or in JSON, or failed by the server's HTTP error or its silence.
func TestHTTPRelaysAndRecords(t *testing.T) {
	c := ledger(t)
	var logs syncBuffer
	rec := recorder(t, c, "http", "remote", &logs)
	fake := &fakeHTTP{}
	upstream := httptest.NewServer(fake)
	defer upstream.Close()
	up, _ := url.Parse(upstream.URL + "/mcp")
	proxy := httptest.NewServer(mcpproxy.Handler(rec, up, nil))
	defer proxy.Close()

	post := func(session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set(mcpproxy.HeaderSession, session)
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	sess := resp.Header.Get(mcpproxy.HeaderSession)
	if sess != "sess-1" || !strings.Contains(body, "fake-http") {
		t.Fatalf("initialize: session %q, body %s", sess, body)
	}
	if resp, _ := post(sess, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a notification: %s", resp.Status)
	}
	if resp, body := post(sess, `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`); body != sseEcho1+sseEcho2 ||
		resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the event stream arrived as %s %q", resp.Header.Get("Content-Type"), body)
	}
	if _, body := post(sess, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"json"}}`); body != `{"jsonrpc":"2.0","id":2,"result":{"structuredContent":{"n":1},"content":[]}}` {
		t.Fatalf("the JSON answer arrived as %q", body)
	}
	if resp, body := post(sess, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"down"}}`); resp.StatusCode != http.StatusServiceUnavailable || body != "down for maintenance\n" {
		t.Fatalf("the server's error arrived as %s %q", resp.Status, body)
	}
	post(sess, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"accepted"}}`)
	// Ids are the host's within one MCP session: another session's id "a"
	// is another call (the server forgot it: 404 here).
	if resp, _ := post("sess-2", `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo"}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("sess-2: %s", resp.Status)
	}
	// A call left open when the host ends its MCP session.
	post("sess-3", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"silent"}}`)
	del, _ := http.NewRequest(http.MethodDelete, proxy.URL+"/mcp", nil)
	del.Header.Set(mcpproxy.HeaderSession, "sess-3")
	del.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if resp, err := http.DefaultClient.Do(del); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	get, err := http.Get(proxy.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(get.Body)
	get.Body.Close()
	if string(b) != getSSE {
		t.Fatalf("the GET stream arrived as %q", b)
	}
	if r, err := http.Get(proxy.URL + "/elsewhere"); err != nil || r.StatusCode != http.StatusNotFound {
		t.Fatalf("another path: %v %v", r, err)
	}
	fake.mu.Lock()
	for _, h := range fake.headers {
		if h.Get(mcpproxy.HeaderSession) == "" || h.Get("MCP-Protocol-Version") != "2025-06-18" {
			t.Errorf("the server got headers %v: the session's are lost", h)
		}
	}
	fake.mu.Unlock()
	if err := rec.Close("the proxy stopped"); err != nil {
		t.Fatalf("close: %v\n%s", err, logs.String())
	}

	order, byID, _ := calls(t, c, "http")
	wants := []struct{ tool, result, err string }{
		{"remote.echo", "streamed", ""},
		{"remote.json", `{"n":1}`, ""},
		{"remote.down", "", "the MCP server answered HTTP 503 Service Unavailable without a JSON-RPC answer"},
		{"remote.accepted", "", "the MCP server answered HTTP 202 Accepted without a JSON-RPC answer"},
		{"remote.echo", "streamed", ""},
		{"remote.silent", "", "the host ended the MCP session before the server answered"},
	}
	if len(order) != len(wants) {
		t.Fatalf("%d calls recorded, want %d", len(order), len(wants))
	}
	for i, w := range wants {
		r := byID[order[i]]
		if r.req == nil || r.req.Tool != w.tool || r.started == nil || r.started.Sandbox.SandboxID != "fake-http@0.1" {
			t.Fatalf("call %d: %+v, want %s on fake-http@0.1", i, r, w.tool)
		}
		switch {
		case w.err != "" && (r.failed == nil || r.failed.Error != w.err):
			t.Errorf("call %d: failed %+v, want %q", i, r.failed, w.err)
		case w.err == "" && (r.done == nil || r.done.Result != w.result):
			t.Errorf("call %d: completed %+v, want %q", i, r.done, w.result)
		}
	}
}

// A server that cannot be reached: the host gets 502 and the call is
// recorded as failed.
func TestHTTPUnreachable(t *testing.T) {
	c := ledger(t)
	var logs syncBuffer
	rec := recorder(t, c, "gone", "gone", &logs)
	dead := httptest.NewServer(http.NotFoundHandler())
	up, _ := url.Parse(dead.URL + "/mcp")
	dead.Close()
	proxy := httptest.NewServer(mcpproxy.Handler(rec, up, nil))
	defer proxy.Close()
	resp, err := http.Post(proxy.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %s, want 502", resp.Status)
	}
	if err := rec.Close(""); err != nil {
		t.Fatal(err)
	}
	order, byID, _ := calls(t, c, "gone")
	if len(order) != 1 || byID[order[0]].failed == nil || !strings.HasPrefix(byID[order[0]].failed.Error, "the MCP server could not be reached") {
		t.Fatalf("recorded %d calls: %+v", len(order), byID)
	}
}

// A body over the bound is refused before it is relayed.
func TestHTTPRefusesAHugeBody(t *testing.T) {
	c := ledger(t)
	rec := recorder(t, c, "big", "big", io.Discard)
	defer rec.Close("")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the huge body reached the server")
	}))
	defer upstream.Close()
	up, _ := url.Parse(upstream.URL + "/mcp")
	proxy := httptest.NewServer(mcpproxy.Handler(rec, up, nil))
	defer proxy.Close()
	resp, err := http.Post(proxy.URL+"/mcp", "application/json", io.LimitReader(zeros{}, 65<<20))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "over 67108864 bytes") {
		t.Fatalf("status %s %q, want 413 naming the bound", resp.Status, b)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
