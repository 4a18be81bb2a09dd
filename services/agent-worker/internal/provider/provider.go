package provider

import (
	"context"
	"encoding/json"
)

// Role says who wrote a Message.
type Role string

// The roles of a conversation. A tool message carries the result of the
// assistant tool call named by its ToolCallID.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Stop reasons a Response reports, normalised across providers so the caller
// branches on one vocabulary. A provider's own value that has no equivalent
// here is passed through unchanged; the raw value is always in
// Response.ResponseBody.
const (
	StopEndTurn   = "end_turn"   // the model finished its answer (OpenAI "stop")
	StopToolUse   = "tool_use"   // the model wants tool results (OpenAI "tool_calls")
	StopMaxTokens = "max_tokens" // the answer was cut at MaxTokens (OpenAI "length")
)

// Message is one entry of a conversation sent to a model.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall
	// ToolCallID names the call a tool message answers.
	ToolCallID string
}

// ToolCall is a model's request to run one tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage // a JSON value, usually an object
}

// Tool describes a tool the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema object
}

// Request is one model call: the whole conversation so far, since the
// providers are stateless.
type Request struct {
	// Agent names the agent making the call; Scripted picks its script by it.
	Agent string
	// Model overrides the provider's configured model when set.
	Model     string
	System    string
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0: the provider's default
	// Seed seeds a scripted agent's choices (Turn.Choose): the session's
	// seed label (events.LabelSeed), "" without one. Live providers
	// ignore it.
	Seed string
	// Deltas, if not nil, takes the answer's pieces as they come, for
	// watchers (token deltas, never stored): the scripted provider says its
	// answer word by word, then each tool call; OpenAI and Anthropic stream
	// the answer and say its pieces as they arrive. The Response is the
	// whole answer all the same.
	Deltas func(Delta)
}

// Delta is a piece of an answer: text, or a tool call (its index, and its
// ID, name and arguments).
type Delta struct {
	Text string
	// Call is the tool call the piece starts or adds to; nil for text.
	Call *CallDelta
}

// CallDelta is the part of a tool call a Delta adds.
type CallDelta struct {
	Index               int
	ID, Name, Arguments string
}

// Response is a model's answer to one Request.
type Response struct {
	Content    string
	ToolCalls  []ToolCall
	StopReason string
	TokensIn   int64
	TokensOut  int64
	Model      string
	// RequestBody and ResponseBody are the HTTP bodies as sent and received,
	// kept as evidence; a streamed answer's ResponseBody is its event stream. Headers are not kept, so API keys are never inside;
	// a key that somehow appears in a body is replaced by "[REDACTED]".
	// Scripted leaves both nil; Recorded returns what was recorded.
	RequestBody  []byte
	ResponseBody []byte
	// Choice is the draw of a scripted Choose turn that answered; nil for
	// every other answer.
	Choice *Choice
}

// Provider completes a conversation with a model. Implementations are safe
// for concurrent use. A failed call returns an *Error when the provider was
// reached or a connection failed; WithRetry retries those marked Retryable.
type Provider interface {
	Name() string
	Complete(ctx context.Context, req Request) (Response, error)
}
