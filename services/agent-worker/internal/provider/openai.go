package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultOpenAIBaseURL is used when Config.BaseURL is empty.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1/"

// OpenAI is a Provider speaking the Chat Completions API with function tools.
// Any server with that API works (vLLM, Ollama, llama.cpp, LM Studio) given
// its base URL, e.g. http://localhost:11434/v1/.
type OpenAI struct {
	chat  openai.ChatCompletionService
	model string
	key   string
	check func(*url.URL) error // every request's URL, before it is sent
}

// NewOpenAI returns an OpenAI provider. It reads nothing from the
// environment: the SDK's client constructor would pick up OPENAI_BASE_URL,
// OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS, so the
// completions service is built directly. The SDK's own retries are off;
// wrap the provider in WithRetry. Requests go only to cfg.Endpoints: the
// base URL is checked here, and each request and redirect before it is sent.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	cfg.Kind = KindOpenAI
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	check := func(u *url.URL) error { return cfg.Endpoints.checkRequest(KindOpenAI, u) }
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(guarded(cfg.HTTPClient, check)),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &OpenAI{chat: openai.NewChatCompletionService(opts...), model: cfg.Model, key: cfg.APIKey, check: check}, nil
}

// Name returns "openai".
func (o *OpenAI) Name() string { return string(KindOpenAI) }

// Complete sends req as one chat completion. With req.Deltas set the
// answer is streamed (stream_options.include_usage, so its tokens are
// counted), each piece said as it comes, and accumulated into the same
// Response; its ResponseBody is then the event stream as received. Nothing
// reads a worker's ResponseBody back as JSON: re-execution rebuilds answers
// from the session's events (worker.RecordedAnswers), and the gateway reads
// only the calls it recorded itself.
func (o *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	params, err := o.params(req)
	if err != nil {
		return Response{}, &Error{Provider: o.Name(), Message: redact(err.Error(), o.key)}
	}
	x := exchange{check: o.check, stream: req.Deltas != nil}
	var c *openai.ChatCompletion
	if x.stream {
		c, err = o.stream(ctx, params, req.Deltas, &x)
	} else {
		c, err = o.chat.New(ctx, params, option.WithMiddleware(x.middleware))
		if err != nil {
			err = x.failure(ctx, o.Name(), o.key, err)
		}
	}
	if err != nil {
		return Response{}, err
	}
	resp := Response{
		TokensIn:  c.Usage.PromptTokens,
		TokensOut: c.Usage.CompletionTokens,
		Model:     c.Model,
	}
	resp.RequestBody, resp.ResponseBody = x.evidence(o.key)
	if len(c.Choices) == 0 {
		return Response{}, &Error{Provider: o.Name(), Status: x.status, Message: "response has no choices"}
	}
	choice := c.Choices[0]
	resp.Content = choice.Message.Content
	resp.StopReason = openAIStopReason(choice.FinishReason)
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "function" && tc.Type != "" { // some local servers omit the type
			continue // custom (free-text) tools are never offered
		}
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{
			ID:        tc.ID,
			Name:      tc.Function.Name,
			Arguments: argumentsJSON(tc.Function.Arguments),
		})
	}
	return resp.redact(o.key), nil
}

// stream sends params as a streamed completion, says the first choice's
// text and tool-call pieces to deltas, and returns the accumulated answer.
// An answer without a finish reason was cut, even if the stream ended
// cleanly; the usage chunk comes after it.
func (o *OpenAI) stream(ctx context.Context, params openai.ChatCompletionNewParams, deltas func(Delta), x *exchange) (*openai.ChatCompletion, error) {
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	s := o.chat.NewStreaming(ctx, params, option.WithMiddleware(x.middleware))
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			return nil, &Error{Provider: o.Name(), Status: x.status, Message: fmt.Sprintf("stream: chunk %q does not continue the answer", chunk.ID)}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.Delta.Content != "" {
				say(deltas, o.key, Delta{Text: ch.Delta.Content})
			}
			for _, tc := range ch.Delta.ToolCalls {
				say(deltas, o.key, Delta{Call: &CallDelta{Index: int(tc.Index), ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
			}
		}
	}
	if err := s.Err(); err != nil {
		var se *ssestream.StreamError
		if errors.As(err, &se) && ctx.Err() == nil {
			return nil, x.streamFailure(o.Name(), o.key, se.Event.Data)
		}
		return nil, x.failure(ctx, o.Name(), o.key, err)
	}
	if len(acc.Choices) == 0 && !strings.Contains(x.header.Get("Content-Type"), "event-stream") {
		// An OpenAI-compatible server that does not stream answers the
		// whole completion: read it as one, said in one piece.
		var c openai.ChatCompletion
		if err := json.Unmarshal(x.responseBody, &c); err == nil && len(c.Choices) > 0 {
			if t := c.Choices[0].Message.Content; t != "" {
				say(deltas, o.key, Delta{Text: t})
			}
			for i, tc := range c.Choices[0].Message.ToolCalls {
				say(deltas, o.key, Delta{Call: &CallDelta{Index: i, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
			}
			return &c, nil
		}
	}
	if len(acc.Choices) == 0 || acc.Choices[0].FinishReason == "" {
		return nil, x.unfinished(o.Name())
	}
	return &acc.ChatCompletion, nil
}

func (o *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = o.model
	}
	if model == "" {
		return openai.ChatCompletionNewParams{}, fmt.Errorf("no model: set Config.Model or Request.Model")
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(model)}
	if req.MaxTokens > 0 {
		// max_tokens is deprecated and refused by OpenAI's reasoning models;
		// servers that only know max_tokens ignore the unknown field.
		p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: string(argumentsOrEmpty(tc.Arguments)),
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &fn.Parameters); err != nil {
				return p, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
			}
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// openAIStopReason maps finish_reason to the Stop* vocabulary.
func openAIStopReason(r string) string {
	switch r {
	case "stop":
		return StopEndTurn
	case "tool_calls", "function_call":
		return StopToolUse
	case "length":
		return StopMaxTokens
	default:
		return r
	}
}

// argumentsJSON turns a model's argument string into JSON. Models sometimes
// emit malformed arguments; those are kept as a JSON string so the tool
// runner can reject them with the text the model wrote.
func argumentsJSON(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

func argumentsOrEmpty(a json.RawMessage) json.RawMessage {
	if len(a) == 0 {
		return json.RawMessage(`{}`)
	}
	return a
}
