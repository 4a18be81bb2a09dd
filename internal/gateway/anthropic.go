package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// anthropic is the Anthropic Messages wire format, as much of it as the
// gateway reads; the caller's body goes upstream untouched.
type anthropic struct{}

func (anthropic) kind() string { return kindAnthropic }
func (anthropic) path() string { return "/v1/messages" }

type messagesRequest struct {
	Model    string            `json:"model"`
	System   json.RawMessage   `json:"system,omitempty"`
	Messages []messagesMessage `json:"messages"`
	Stream   bool              `json:"stream,omitempty"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is a content block of a message or an answer.
type block struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

type messagesResponse struct {
	Type       string  `json:"type"`
	Model      string  `json:"model"`
	Content    []block `json:"content"`
	StopReason string  `json:"stop_reason"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// blocks reads a content: a string (one text block) or an array of blocks.
func blocks(raw json.RawMessage) ([]block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []block{{Type: "text", Text: s}}, nil
	}
	var bs []block
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("want a string or an array of content blocks")
	}
	return bs, nil
}

// blocksText is the text of blocks, joined by newlines; a block of another
// kind than text is named (thinking is left out: it is not the answer).
func blocksText(bs []block) string {
	var parts []string
	for _, b := range bs {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "thinking", "redacted_thinking", "tool_use", "tool_result":
		default:
			parts = append(parts, "["+b.Type+" block]")
		}
	}
	return strings.Join(parts, "\n")
}

func (anthropic) parseRequest(body []byte) (*request, error) {
	var r messagesRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the body is not a Messages request: %w", err)
	}
	if r.Model == "" {
		return nil, errors.New("model is required")
	}
	if len(r.Messages) == 0 {
		return nil, errors.New("messages must hold at least one message")
	}
	out := &request{Model: r.Model, Stream: r.Stream}
	if len(r.System) > 0 {
		bs, err := blocks(r.System)
		if err != nil {
			return nil, fmt.Errorf("system: %w", err)
		}
		if t := blocksText(bs); t != "" {
			out.Messages = append(out.Messages, message{Role: "system", Text: t})
		}
	}
	for i, m := range r.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		switch m.Role {
		case "user":
			// Tool results first, each its own message, then what the
			// user says.
			var rest []block
			for _, b := range bs {
				if b.Type != "tool_result" {
					rest = append(rest, b)
					continue
				}
				if b.ToolUseID == "" {
					return nil, fmt.Errorf("messages[%d]: a tool_result block needs its tool_use_id", i)
				}
				rbs, err := blocks(b.Content)
				if err != nil {
					return nil, fmt.Errorf("messages[%d]: tool_result content: %w", i, err)
				}
				out.Messages = append(out.Messages, message{Role: "tool", ToolCallID: b.ToolUseID, Text: blocksText(rbs)})
			}
			if len(rest) > 0 || len(bs) == 0 {
				out.Messages = append(out.Messages, message{Role: "user", Text: blocksText(rest)})
			}
		case "assistant":
			out.Messages = append(out.Messages, assistantOf(bs))
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q (want user or assistant)", i, m.Role)
		}
	}
	return out, nil
}

// assistantOf is an assistant's message of content blocks.
func assistantOf(bs []block) message {
	m := message{Role: "assistant", Text: blocksText(bs)}
	for _, b := range bs {
		if b.Type == "tool_use" {
			args := b.Input
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage("{}")
			}
			m.Calls = append(m.Calls, toolUse{ID: b.ID, Name: b.Name, Arguments: compact(args)})
		}
	}
	return m
}

// compact is raw JSON without insignificant space, so that the same input
// digests the same however it was spaced.
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func (anthropic) parseResponse(body []byte) (*answer, error) {
	var r messagesResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the provider's answer is not a Messages response: %w", err)
	}
	if r.Type != "message" {
		return nil, fmt.Errorf("the provider's answer is of type %q, not message", r.Type)
	}
	return &answer{Model: r.Model, Message: assistantOf(r.Content), FinishReason: r.StopReason,
		TokensIn: r.Usage.InputTokens, TokensOut: r.Usage.OutputTokens}, nil
}

// streamEvent is one event of a streamed answer.
type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Model string `json:"model"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	} `json:"message,omitempty"`
	Index        int    `json:"index"`
	ContentBlock *block `json:"content_block,omitempty"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta,omitempty"`
	Usage *struct {
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage,omitempty"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func (anthropic) copyStream(r io.Reader, w io.Writer, flush func(), _ bool, delta func(events.Delta)) (*answer, []byte, error) {
	if delta == nil {
		delta = func(events.Delta) {}
	}
	a := &answer{}
	type building struct {
		b    block
		text strings.Builder
		json strings.Builder
	}
	var bs []*building
	done := false
	raw, err := sse(r, w, flush, func(_ string, data []byte) (bool, bool, error) {
		var e streamEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return false, false, fmt.Errorf("the provider's stream has an event that is not JSON: %w", err)
		}
		switch e.Type {
		case "message_start":
			if e.Message != nil {
				a.Model, a.TokensIn, a.TokensOut = e.Message.Model, e.Message.Usage.InputTokens, e.Message.Usage.OutputTokens
			}
		case "content_block_start":
			if e.ContentBlock == nil || e.Index != len(bs) || len(bs) >= maxToolCalls {
				return false, false, fmt.Errorf("the provider's stream starts block %d out of order", e.Index)
			}
			bl := &building{b: *e.ContentBlock}
			bl.text.WriteString(e.ContentBlock.Text)
			bs = append(bs, bl)
			if bl.b.Type == "tool_use" {
				delta(events.Delta{Tool: &events.DeltaTool{Index: e.Index, ID: bl.b.ID, Name: bl.b.Name}})
			} else if bl.b.Type == "text" && bl.b.Text != "" {
				delta(events.Delta{Text: bl.b.Text})
			}
		case "content_block_delta":
			if e.Delta == nil || e.Index < 0 || e.Index >= len(bs) {
				return false, false, fmt.Errorf("the provider's stream adds to block %d, which it did not start", e.Index)
			}
			bs[e.Index].text.WriteString(e.Delta.Text)
			bs[e.Index].json.WriteString(e.Delta.PartialJSON)
			switch {
			case e.Delta.Text != "" && bs[e.Index].b.Type == "text":
				delta(events.Delta{Text: e.Delta.Text})
			case e.Delta.PartialJSON != "":
				delta(events.Delta{Tool: &events.DeltaTool{Index: e.Index, Arguments: e.Delta.PartialJSON}})
			}
		case "message_delta":
			if e.Delta != nil && e.Delta.StopReason != "" {
				a.FinishReason = e.Delta.StopReason
			}
			if e.Usage != nil {
				a.TokensOut = e.Usage.OutputTokens
			}
		case "message_stop":
			done = true
			return true, true, nil
		case "error":
			msg := "the provider's stream failed"
			if e.Error != nil {
				msg += ": " + e.Error.Message
			}
			return true, true, errors.New(msg)
		}
		return true, false, nil
	})
	if err != nil {
		return nil, raw, err
	}
	if !done {
		return nil, raw, errors.New("the provider's stream ended before message_stop")
	}
	content := make([]block, len(bs))
	for i, bl := range bs {
		content[i] = bl.b
		content[i].Text = bl.text.String()
		if bl.b.Type == "tool_use" && bl.json.Len() > 0 {
			content[i].Input = json.RawMessage(bl.json.String())
		}
	}
	a.Message = assistantOf(content)
	return a, raw, nil
}

func (anthropic) upstreamBody(_ *request, body []byte) ([]byte, bool, error) { return body, false, nil }

func (anthropic) headers(caller, up http.Header, key string) {
	if key != "" {
		up.Set("X-Api-Key", key)
	}
	v := caller.Get("Anthropic-Version")
	if v == "" {
		v = "2023-06-01"
	}
	up.Set("Anthropic-Version", v)
	if b := caller.Get("Anthropic-Beta"); b != "" {
		up.Set("Anthropic-Beta", b)
	}
}

// fail answers an error in the Anthropic error format.
func (anthropic) fail(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status >= 500:
		typ = "api_error"
	}
	var body struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code,omitempty"`
		} `json:"error"`
	}
	body.Type = "error"
	body.Error.Type, body.Error.Message, body.Error.Code = typ, msg, code
	writeJSON(w, status, body)
}
