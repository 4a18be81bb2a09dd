package mcpproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// message is what the proxy reads of a JSON-RPC message; every other
// member is the host's and the server's business.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// messages splits data, one JSON-RPC message or a batch of them, into
// messages. What is not JSON, or not a message, yields nothing: the proxy
// relays it and records nothing of it.
func messages(data []byte) []message {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil
	}
	var raws []json.RawMessage
	if data[0] == '[' {
		if json.Unmarshal(data, &raws) != nil {
			return nil
		}
	} else {
		raws = []json.RawMessage{data}
	}
	out := make([]message, 0, len(raws))
	for _, raw := range raws {
		var m message
		if json.Unmarshal(raw, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// canonicalID is a request's id as a map key: a string id and a number id
// that print alike stay apart. ok is false for an id absent, null or of
// another type (a notification, or no request).
func canonicalID(raw json.RawMessage) (id string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return "s:" + s, true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return "n:" + n.String(), true
	}
	return "", false
}

// method is a message's method, "" for none or one that is not a string.
func (m message) method() string {
	var s string
	if len(m.Method) == 0 || json.Unmarshal(m.Method, &s) != nil {
		return ""
	}
	return s
}

// FromHost notes the messages data carries from the host to the server,
// in conversation conv: a tools/call request opens a call (recorded at
// once), an initialize request waits for the server's name. Call it before
// the server can answer (before relaying data).
func (r *Recorder) FromHost(conv string, data []byte) { r.fromHost(conv, data) }

// fromHost is FromHost, returning the calls it opened.
func (r *Recorder) fromHost(conv string, data []byte) []key {
	msgs := messages(data)
	if len(msgs) == 0 {
		return nil
	}
	var opened []key
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		id, ok := canonicalID(m.ID)
		if !ok {
			continue
		}
		k := key{conv, id}
		switch m.method() {
		case "initialize":
			if len(r.inits) < maxOpen {
				r.inits[k] = true
			}
		case "tools/call":
			if r.callLocked(k, m.Params, now) {
				opened = append(opened, k)
			}
		}
	}
	return opened
}

// failCalls records the calls of keys still open as failed, with why.
func (r *Recorder) failCalls(keys []key, why string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if c := r.open[k]; c != nil {
			delete(r.open, k)
			r.failLocked(c, why, now)
		}
	}
}

// callLocked opens the call k of a tools/call request with params, and
// reports whether it did.
func (r *Recorder) callLocked(k key, params json.RawMessage, now time.Time) bool {
	var p struct {
		Name      json.RawMessage `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	var name string
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p.Name, &name) != nil || name == "" {
		r.log.Warn("mcp-proxy: a tools/call without a tool name is relayed, not recorded", "session", r.cfg.Session, "id", k.id)
		return false
	}
	if len(name) > maxToolName || !utf8.ValidString(name) || strings.ContainsFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		r.log.Warn("mcp-proxy: a tools/call whose tool name is not printable or longer than 128 bytes is relayed, not recorded",
			"session", r.cfg.Session, "id", k.id, "bytes", len(name))
		return false
	}
	if old := r.open[k]; old != nil {
		// The host sent the id again before the server answered: the
		// answer cannot be told apart, so the first call ends here.
		delete(r.open, k)
		r.failLocked(old, fmt.Sprintf("the host sent another request with the same JSON-RPC id %s before the server answered this one: its answer cannot be told apart", printID(k.id)), now)
	}
	if len(r.open) >= maxOpen {
		r.log.Warn("mcp-proxy: too many calls wait for an answer; this one is relayed, not recorded", "session", r.cfg.Session, "open", len(r.open))
		return false
	}
	var args []byte
	if a := bytes.TrimSpace(p.Arguments); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		args = bytes.Clone(a)
	}
	c := &call{id: newCallID(), tool: r.cfg.Name + "." + name, start: now}
	r.open[k] = c
	r.requestedLocked(c, args)
	return true
}

// FromServer notes the messages data carries from the server to the host,
// in conversation conv: the answer of an open call completes or fails it,
// the answer of an initialize names the server.
func (r *Recorder) FromServer(conv string, data []byte) {
	msgs := messages(data)
	if len(msgs) == 0 {
		return
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if len(m.Method) > 0 {
			continue // a request or notification of the server's
		}
		id, ok := canonicalID(m.ID)
		if !ok {
			continue
		}
		k := key{conv, id}
		if r.inits[k] {
			delete(r.inits, k)
			var res struct {
				ServerInfo struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"serverInfo"`
			}
			if json.Unmarshal(m.Result, &res) == nil {
				if s := identity(res.ServerInfo.Name, res.ServerInfo.Version); s != "" {
					r.server = s
				}
			}
			continue
		}
		c := r.open[k]
		if c == nil {
			continue
		}
		delete(r.open, k)
		switch {
		case len(m.Error) > 0 && !bytes.Equal(bytes.TrimSpace(m.Error), []byte("null")):
			r.failLocked(c, rpcError(m.Error), now)
		case len(m.Result) == 0:
			r.failLocked(c, "the server answered with neither a result nor an error", now)
		default:
			text, isError := Render(m.Result)
			if isError {
				if text == "" {
					text = "the MCP tool reported an error without a message"
				}
				r.failLocked(c, text, now)
				continue
			}
			r.completedLocked(c, text, now)
		}
	}
}

// rpcError says what a JSON-RPC error object says.
func rpcError(raw json.RawMessage) string {
	var e struct {
		Code    json.Number     `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "the server answered an error: " + string(raw)
	}
	s := fmt.Sprintf("the server answered error %s: %s", e.Code, e.Message)
	if d := bytes.TrimSpace(e.Data); len(d) > 0 && !bytes.Equal(d, []byte("null")) {
		s += " (" + string(d) + ")"
	}
	return s
}

// printID prints a canonical id as JSON-RPC wrote it.
func printID(id string) string {
	if s, ok := strings.CutPrefix(id, "s:"); ok {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimPrefix(id, "n:")
}
