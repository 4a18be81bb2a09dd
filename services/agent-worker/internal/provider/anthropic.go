package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// DefaultAnthropicBaseURL is used when Config.BaseURL is empty.
const DefaultAnthropicBaseURL = "https://api.anthropic.com/"

// DefaultAnthropicMaxTokens is sent when Request.MaxTokens is 0, since the
// Messages API requires max_tokens.
const DefaultAnthropicMaxTokens = 4096

// Anthropic is a Provider speaking the Messages API with tool use.
type Anthropic struct {
	messages anthropic.MessageService
	model    string
	key      string
	check    func(*url.URL) error // every request's URL, before it is sent
}

// NewAnthropic returns an Anthropic provider. It reads nothing from the
// environment or from ~/.config profiles (option.WithoutEnvironmentDefaults).
// The SDK's own retries are off; wrap the provider in WithRetry. The SDK's
// OpenTelemetry spans are off too: they would go to the global tracer
// provider, send trace context to the API, and take their content mode from
// ANTHROPIC_OPEN_TELEMETRY_* variables; the caller spans the model call.
// Requests go only to cfg.Endpoints: the base URL is checked here, and each
// request and redirect before it is sent.
func NewAnthropic(cfg Config) (*Anthropic, error) {
	cfg.Kind = KindAnthropic
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	check := func(u *url.URL) error { return cfg.Endpoints.checkRequest(KindAnthropic, u) }
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(guarded(cfg.HTTPClient, check)),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	client := anthropic.NewClient(opts...)
	return &Anthropic{messages: client.Messages, model: cfg.Model, key: cfg.APIKey, check: check}, nil
}

// Name returns "anthropic".
func (a *Anthropic) Name() string { return string(KindAnthropic) }

// Complete sends req as one message. With req.Deltas set the answer is
// streamed, each piece said as it comes, and accumulated into the same
// Response; its ResponseBody is then the event stream as received (see
// OpenAI.Complete for why nothing breaks on that).
func (a *Anthropic) Complete(ctx context.Context, req Request) (Response, error) {
	params, err := a.params(req)
	if err != nil {
		return Response{}, &Error{Provider: a.Name(), Message: redact(err.Error(), a.key)}
	}
	x := exchange{check: a.check, stream: req.Deltas != nil}
	var m *anthropic.Message
	if x.stream {
		m, err = a.stream(ctx, params, req.Deltas, &x)
	} else {
		m, err = a.messages.New(ctx, params, option.WithMiddleware(x.middleware))
		if err != nil {
			err = x.failure(ctx, a.Name(), a.key, err)
		}
	}
	if err != nil {
		return Response{}, err
	}
	resp := Response{
		StopReason: string(m.StopReason),
		TokensIn:   m.Usage.InputTokens,
		TokensOut:  m.Usage.OutputTokens,
		Model:      string(m.Model),
	}
	resp.RequestBody, resp.ResponseBody = x.evidence(a.key)
	var text []string
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{
				ID:        b.ID,
				Name:      b.Name,
				Arguments: argumentsOrEmpty(append(json.RawMessage(nil), b.Input...)),
			})
		}
	}
	resp.Content = strings.Join(text, "")
	return resp.redact(a.key), nil
}

// stream sends params as a streamed message, says its text and tool-use
// pieces to deltas (a tool call's Index counts tool_use blocks, as
// Response.ToolCalls does), and returns the accumulated message. A stream
// without message_stop was cut, even if it ended cleanly.
func (a *Anthropic) stream(ctx context.Context, params anthropic.MessageNewParams, deltas func(Delta), x *exchange) (*anthropic.Message, error) {
	s := a.messages.NewStreaming(ctx, params, option.WithMiddleware(x.middleware))
	defer s.Close()
	var m anthropic.Message
	tools := map[int64]int{} // content block index → tool call index
	stopped := false
	for s.Next() {
		ev := s.Current()
		if err := m.Accumulate(ev); err != nil {
			return nil, &Error{Provider: a.Name(), Status: x.status, Message: redact("stream: "+err.Error(), a.key)}
		}
		switch ev.Type {
		case "content_block_start":
			switch b := ev.ContentBlock; b.Type {
			case "text":
				if b.Text != "" {
					say(deltas, a.key, Delta{Text: b.Text})
				}
			case "tool_use":
				i := len(tools)
				tools[ev.Index] = i
				say(deltas, a.key, Delta{Call: &CallDelta{Index: i, ID: b.ID, Name: b.Name}})
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				say(deltas, a.key, Delta{Text: ev.Delta.Text})
			case "input_json_delta":
				if i, ok := tools[ev.Index]; ok && ev.Delta.PartialJSON != "" {
					say(deltas, a.key, Delta{Call: &CallDelta{Index: i, Arguments: ev.Delta.PartialJSON}})
				}
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		var aerr *anthropic.Error
		if errors.As(err, &aerr) && x.status < 400 && ctx.Err() == nil {
			return nil, x.streamFailure(a.Name(), a.key, []byte(aerr.RawJSON()))
		}
		return nil, x.failure(ctx, a.Name(), a.key, err)
	}
	if !stopped {
		return nil, x.unfinished(a.Name())
	}
	return &m, nil
}

// params builds the Messages request. The API has no system or tool roles:
// system text goes to the top-level system field, an assistant's tool calls
// become tool_use blocks, and tool results become tool_result blocks of a
// user message. Adjacent user-side messages are merged into one, since every
// result of a turn's tool calls must come in the next user message.
func (a *Anthropic) params(req Request) (anthropic.MessageNewParams, error) {
	model := req.Model
	if model == "" {
		model = a.model
	}
	if model == "" {
		return anthropic.MessageNewParams{}, fmt.Errorf("no model: set Config.Model or Request.Model")
	}
	p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: DefaultAnthropicMaxTokens}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = append(p.System, anthropic.TextBlockParam{Text: req.System})
	}
	appendBlocks := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
			return
		}
		p.Messages = append(p.Messages, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			if m.Content != "" {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case RoleUser:
			if m.Content != "" {
				appendBlocks(anthropic.MessageParamRoleUser, anthropic.NewTextBlock(m.Content))
			}
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, argumentsOrEmpty(tc.Arguments), tc.Name))
			}
			if len(blocks) > 0 { // the API refuses empty content
				appendBlocks(anthropic.MessageParamRoleAssistant, blocks...)
			}
		case RoleTool:
			appendBlocks(anthropic.MessageParamRoleUser, anthropic.NewToolResultBlock(m.ToolCallID, m.Content, false))
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := inputSchema(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// inputSchema splits a JSON Schema object into the SDK's typed fields, with
// everything else ($defs, additionalProperties, ...) passed through as is.
func inputSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var s anthropic.ToolInputSchemaParam
	if len(raw) == 0 {
		return s, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return s, err
	}
	for k, v := range fields {
		switch k {
		case "type":
			// Always "object": the SDK fills it in.
		case "properties":
			s.Properties = v
		case "required":
			if err := json.Unmarshal(v, &s.Required); err != nil {
				return s, fmt.Errorf("required: %w", err)
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = make(map[string]any)
			}
			s.ExtraFields[k] = v
		}
	}
	return s, nil
}
