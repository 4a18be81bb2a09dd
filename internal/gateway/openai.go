package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// openAI is the OpenAI Chat Completions wire format, as much of it as the
// gateway reads. Everything else a request carries is passed upstream
// untouched: the gateway forwards the caller's body, not a re-encoding.
type openAI struct{}

func (openAI) kind() string { return kindOpenAI }
func (openAI) path() string { return "/chat/completions" }

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream,omitempty"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a string, an array of parts, or null.
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []toolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message      chatMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage,omitempty"`
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// chatChunk is one server-sent event of a streamed answer.
type chatChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string `json:"content,omitempty"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id,omitempty"`
				Function struct {
					Name      string `json:"name,omitempty"`
					Arguments string `json:"arguments,omitempty"`
				} `json:"function"`
			} `json:"tool_calls,omitempty"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage,omitempty"`
}

func (openAI) parseRequest(body []byte) (*request, error) {
	var r chatRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the body is not a Chat Completions request: %w", err)
	}
	if r.Model == "" {
		return nil, errors.New("model is required")
	}
	if len(r.Messages) == 0 {
		return nil, errors.New("messages must hold at least one message")
	}
	out := &request{Model: r.Model, Stream: r.Stream, WantsUsage: r.StreamOptions != nil && r.StreamOptions.IncludeUsage}
	for i, m := range r.Messages {
		t, err := partsText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		msg := message{Role: m.Role, Text: t}
		switch m.Role {
		case "system", "user":
		case "developer":
			msg.Role = "system"
		case "assistant":
			for _, c := range m.ToolCalls {
				msg.Calls = append(msg.Calls, toolUse{ID: c.ID, Name: c.Function.Name, Arguments: arguments(c.Function.Arguments)})
			}
		case "tool":
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("messages[%d]: a tool message needs its tool_call_id", i)
			}
			msg.ToolCallID = m.ToolCallID
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		out.Messages = append(out.Messages, msg)
	}
	return out, nil
}

// partsText is a content as text: the string, or the text of its text parts
// joined by newlines (another part is named, not kept: the request's body,
// stored whole, holds it).
func partsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Type == "text" {
			b.WriteString(p.Text)
		} else {
			fmt.Fprintf(&b, "[%s part]", p.Type)
		}
	}
	return b.String(), nil
}

func (openAI) parseResponse(body []byte) (*answer, error) {
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the provider's answer is not a Chat Completions response: %w", err)
	}
	if len(r.Choices) == 0 {
		return nil, errors.New("the provider's answer has no choices")
	}
	c := r.Choices[0]
	t, err := partsText(c.Message.Content)
	if err != nil {
		return nil, fmt.Errorf("the provider's answer: %w", err)
	}
	a := &answer{Model: r.Model, FinishReason: c.FinishReason, Message: message{Role: "assistant", Text: t}}
	for _, tc := range c.Message.ToolCalls {
		a.Message.Calls = append(a.Message.Calls, toolUse{ID: tc.ID, Name: tc.Function.Name, Arguments: arguments(tc.Function.Arguments)})
	}
	if r.Usage != nil {
		a.TokensIn, a.TokensOut = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	return a, nil
}

func (openAI) copyStream(r io.Reader, w io.Writer, flush func(), dropUsage bool, delta func(events.Delta)) (*answer, []byte, error) {
	if delta == nil {
		delta = func(events.Delta) {}
	}
	a := &answer{Message: message{Role: "assistant"}}
	var text strings.Builder
	var calls []struct{ id, name, args strings.Builder }
	done := false
	raw, err := sse(r, w, flush, func(_ string, data []byte) (bool, bool, error) {
		if string(data) == "[DONE]" {
			done = true
			return true, true, nil
		}
		var c chatChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return false, false, fmt.Errorf("the provider's stream has an event that is not a chunk: %w", err)
		}
		if c.Model != "" {
			a.Model = c.Model
		}
		if c.Usage != nil {
			a.TokensIn, a.TokensOut = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				continue
			}
			text.WriteString(ch.Delta.Content)
			if ch.Delta.Content != "" {
				delta(events.Delta{Text: ch.Delta.Content})
			}
			for _, d := range ch.Delta.ToolCalls {
				if d.Index < 0 || d.Index >= maxToolCalls {
					return false, false, fmt.Errorf("the provider's stream names tool call %d", d.Index)
				}
				for len(calls) <= d.Index {
					calls = append(calls, struct{ id, name, args strings.Builder }{})
				}
				tc := &calls[d.Index]
				tc.id.WriteString(d.ID)
				tc.name.WriteString(d.Function.Name)
				tc.args.WriteString(d.Function.Arguments)
				delta(events.Delta{Tool: &events.DeltaTool{Index: d.Index, ID: d.ID, Name: d.Function.Name, Arguments: d.Function.Arguments}})
			}
			if ch.FinishReason != nil {
				a.FinishReason = *ch.FinishReason
			}
		}
		return !(dropUsage && len(c.Choices) == 0 && c.Usage != nil), false, nil
	})
	if err != nil {
		return nil, raw, err
	}
	if !done {
		return nil, raw, errors.New("the provider's stream ended before [DONE]")
	}
	a.Message.Text = text.String()
	for i := range calls {
		a.Message.Calls = append(a.Message.Calls, toolUse{ID: calls[i].id.String(), Name: calls[i].name.String(), Arguments: arguments(calls[i].args.String())})
	}
	return a, raw, nil
}

// sse reads server-sent events from r and calls on with each event's
// name and data (its data lines joined); it writes the event to w as read
// (then flushes) when on says to forward it, and stops after the event on
// says is the last. It returns the bytes read. Write errors (the caller
// went away) do not stop the reading: the answer is recorded whole.
func sse(r io.Reader, w io.Writer, flush func(), on func(name string, data []byte) (forward, last bool, err error)) ([]byte, error) {
	var raw, ev bytes.Buffer
	var name string
	var data []byte
	writeOK := true
	end := func() (bool, error) {
		if ev.Len() == 0 {
			return false, nil
		}
		forward, last := true, false
		if len(data) > 0 {
			var err error
			if forward, last, err = on(name, data); err != nil {
				return false, err
			}
		}
		if forward && writeOK {
			ev.WriteByte('\n')
			if _, err := w.Write(ev.Bytes()); err != nil {
				writeOK = false
			} else if flush != nil {
				flush()
			}
		}
		ev.Reset()
		name, data = "", data[:0]
		return last, nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	for sc.Scan() {
		line := sc.Bytes()
		if raw.Len()+len(line) > maxBody {
			return raw.Bytes(), fmt.Errorf("the provider's stream is larger than %d bytes", maxBody)
		}
		raw.Write(line)
		raw.WriteByte('\n')
		if len(line) > 0 {
			ev.Write(line)
			ev.WriteByte('\n')
			if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
				name = string(bytes.TrimSpace(v))
			} else if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, bytes.TrimSpace(v)...)
			}
			continue
		}
		last, err := end()
		if err != nil || last {
			return raw.Bytes(), err
		}
	}
	if err := sc.Err(); err != nil {
		return raw.Bytes(), fmt.Errorf("read the provider's stream: %w", err)
	}
	_, err := end() // an event the stream did not end with a blank line
	return raw.Bytes(), err
}

func (openAI) upstreamBody(req *request, body []byte) ([]byte, bool, error) {
	if !req.Stream || req.WantsUsage {
		return body, false, nil
	}
	// Ask for the usage, to record the tokens; the caller, who did not
	// ask, is not sent it.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, fmt.Errorf("the request body: %w", err)
	}
	m["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	b, err := json.Marshal(m)
	return b, true, err
}

func (openAI) headers(_, up http.Header, key string) {
	if key != "" {
		up.Set("Authorization", "Bearer "+key)
	}
}

// fail answers an error in the OpenAI error format.
func (openAI) fail(w http.ResponseWriter, status int, code, msg string) {
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Code = msg, code
	body.Error.Type = "invalid_request_error"
	if status >= 500 {
		body.Error.Type = "server_error"
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
