package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The OpenAI Chat Completions wire format, as much of it as the gateway
// reads. Everything else a request carries is passed upstream untouched:
// the gateway forwards the caller's body, not a re-encoding of these types.

// chatRequest is the part of a Chat Completions request the gateway reads.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Stream   bool          `json:"stream,omitempty"`
	// StreamOptions.IncludeUsage asks for a last chunk with the usage.
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

// wantsUsage reports whether a streaming request asked for the usage chunk.
func (r *chatRequest) wantsUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// chatMessage is one message of a conversation, in a request or as a
// response's choice.
type chatMessage struct {
	Role string `json:"role"`
	// Content is a string, an array of parts, or null.
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []toolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int         `json:"index"`
		Message      chatMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage,omitempty"`
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// chatChunk is one server-sent event of a streamed answer.
type chatChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string `json:"role,omitempty"`
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
	Usage *usage `json:"usage,omitempty"`
}

// parseRequest reads a Chat Completions request, refusing one the gateway
// cannot record with a message naming the problem.
func parseRequest(body []byte) (*chatRequest, error) {
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
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		case "tool":
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("messages[%d]: a tool message needs its tool_call_id", i)
			}
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		if _, err := text(m.Content); err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
	}
	return &r, nil
}

// text is a message's content as text: the string, or the text of its
// text parts joined by newlines (an image or audio part is named, not
// kept: the request's body, stored whole, holds it).
func text(raw json.RawMessage) (string, error) {
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

// digest is what identifies a message when the gateway compares a
// request's conversation with what it recorded: its role, text, tool call
// ID and the tool calls it makes. Two messages with the same digest record
// the same events.
func digest(m chatMessage) [32]byte {
	t, _ := text(m.Content)
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q", m.Role, t, m.ToolCallID)
	for _, c := range m.ToolCalls {
		fmt.Fprintf(h, " %q %q %q", c.ID, c.Function.Name, c.Function.Arguments)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// answer is a model's answer, from a response or accumulated from a stream.
type answer struct {
	Model        string
	Message      chatMessage
	FinishReason string
	Usage        usage
}

// parseResponse reads a non-streamed answer.
func parseResponse(body []byte) (*answer, error) {
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the provider's answer is not a Chat Completions response: %w", err)
	}
	if len(r.Choices) == 0 {
		return nil, errors.New("the provider's answer has no choices")
	}
	a := &answer{Model: r.Model, Message: r.Choices[0].Message, FinishReason: r.Choices[0].FinishReason}
	if a.Message.Role == "" {
		a.Message.Role = "assistant"
	}
	if r.Usage != nil {
		a.Usage = *r.Usage
	}
	return a, nil
}

// stream accumulates a streamed answer from the server-sent events it
// reads, and forwards each event's bytes as they come.
type stream struct {
	a        answer
	content  strings.Builder
	calls    []toolCall
	done     bool
	dropNext bool
}

// copyStream reads server-sent events from r until [DONE] or the end,
// writes each to w (and flushes), and returns the answer they make. A
// usage chunk the caller did not ask for (dropUsage: the gateway asked for
// it, to record the tokens) is read and not forwarded. Write errors (the
// caller went away) do not stop the reading: the answer is recorded whole.
func copyStream(r io.Reader, w io.Writer, flush func(), dropUsage bool) (*answer, []byte, error) {
	var s stream
	var raw bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	writeOK := true
	write := func(b []byte) {
		if !writeOK {
			return
		}
		if _, err := w.Write(b); err != nil {
			writeOK = false
			return
		}
		if flush != nil {
			flush()
		}
	}
	for sc.Scan() {
		line := sc.Bytes()
		raw.Write(line)
		raw.WriteByte('\n')
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			if len(line) == 0 {
				continue
			}
			write(append(append([]byte(nil), line...), '\n', '\n'))
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			s.done = true
			write([]byte("data: [DONE]\n\n"))
			break
		}
		var c chatChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, raw.Bytes(), fmt.Errorf("the provider's stream has an event that is not a chunk: %w", err)
		}
		s.add(&c)
		if dropUsage && len(c.Choices) == 0 && c.Usage != nil {
			continue
		}
		write(append(append([]byte("data: "), data...), '\n', '\n'))
	}
	if err := sc.Err(); err != nil {
		return nil, raw.Bytes(), fmt.Errorf("read the provider's stream: %w", err)
	}
	if !s.done {
		return nil, raw.Bytes(), errors.New("the provider's stream ended before [DONE]")
	}
	return s.answer(), raw.Bytes(), nil
}

func (s *stream) add(c *chatChunk) {
	if c.Model != "" {
		s.a.Model = c.Model
	}
	if c.Usage != nil {
		s.a.Usage = *c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		s.content.WriteString(ch.Delta.Content)
		for _, d := range ch.Delta.ToolCalls {
			if d.Index < 0 || d.Index > maxToolCalls {
				continue
			}
			for len(s.calls) <= d.Index {
				s.calls = append(s.calls, toolCall{Type: "function"})
			}
			tc := &s.calls[d.Index]
			if d.ID != "" {
				tc.ID = d.ID
			}
			tc.Function.Name += d.Function.Name
			tc.Function.Arguments += d.Function.Arguments
		}
		if ch.FinishReason != nil {
			s.a.FinishReason = *ch.FinishReason
		}
	}
}

func (s *stream) answer() *answer {
	a := s.a
	a.Message = chatMessage{Role: "assistant", ToolCalls: s.calls}
	if s.content.Len() > 0 || len(s.calls) == 0 {
		a.Message.Content, _ = json.Marshal(s.content.String())
	}
	return &a
}
