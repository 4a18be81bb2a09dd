package provider

import (
	"context"
	"encoding/json"
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

// Complete sends req as one message.
func (a *Anthropic) Complete(ctx context.Context, req Request) (Response, error) {
	params, err := a.params(req)
	if err != nil {
		return Response{}, &Error{Provider: a.Name(), Message: redact(err.Error(), a.key)}
	}
	x := exchange{check: a.check}
	m, err := a.messages.New(ctx, params, option.WithMiddleware(x.middleware))
	if err != nil {
		return Response{}, x.failure(ctx, a.Name(), a.key, err)
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
