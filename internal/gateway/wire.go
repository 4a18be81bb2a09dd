package gateway

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/openrath/rath/pkg/events"
)

// A wire is a provider's API as the gateway serves and asks it: how its
// requests, answers, event streams and errors read. The gateway records
// what they say in its own terms (request, message, answer), so that
// recording, replay and forks are one code for every wire.
type wire interface {
	// kind is the provider kind ("openai", "anthropic"): the upstream
	// asked, and rath.model.called's provider.
	kind() string
	// path is the upstream path after the base URL.
	path() string
	parseRequest(body []byte) (*request, error)
	parseResponse(body []byte) (*answer, error)
	// copyStream reads an event stream from r until its end, writes each
	// event to w as it comes (flushing), calls delta (if not nil) with what
	// each adds to the answer, and returns the answer it makes and the
	// bytes read. dropUsage leaves out a usage-only event the caller did
	// not ask for. Write errors do not stop the reading.
	copyStream(r io.Reader, w io.Writer, flush func(), dropUsage bool, delta func(events.Delta)) (*answer, []byte, error)
	// upstreamBody is the body sent upstream for the caller's body (the
	// OpenAI wire asks for the usage of a stream).
	upstreamBody(req *request, body []byte) (b []byte, dropUsage bool, err error)
	// headers sets the upstream request's headers: the operator's key,
	// and what of the caller's headers the provider needs.
	headers(caller, upstream http.Header, key string)
	// fail writes an error as the wire's clients read one.
	fail(w http.ResponseWriter, status int, code, msg string)
}

// request is a call as the gateway records it.
type request struct {
	Model    string
	Stream   bool
	Messages []message
	// WantsUsage: a streaming request asked for its usage.
	WantsUsage bool
}

// message is one message of a conversation.
type message struct {
	// Role is system, user, assistant or tool.
	Role string
	Text string
	// ToolCallID is the call a tool message answers.
	ToolCallID string
	// Calls are the tool calls an assistant message makes.
	Calls []toolUse
}

// toolUse is a tool call a model asked for.
type toolUse struct {
	ID, Name string
	// Arguments are the call's arguments as JSON (text that is not JSON
	// is kept as a JSON string).
	Arguments json.RawMessage
}

// answer is a model's answer, from a response or read from a stream.
type answer struct {
	Model        string
	Message      message
	FinishReason string
	TokensIn     int64
	TokensOut    int64
}

// digest identifies a message when the gateway compares a request's
// conversation with what it recorded: its role, text, the call it answers
// and the calls it makes. Two messages with the same digest record the same
// events.
func digest(m message) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q", m.Role, m.Text, m.ToolCallID)
	for _, c := range m.Calls {
		fmt.Fprintf(h, " %q %q %q", c.ID, c.Name, c.Arguments)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// arguments are a call's arguments as JSON: raw, if it is JSON, else the
// text as a JSON string.
func arguments(raw string) json.RawMessage {
	if raw == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(raw)) {
		return json.RawMessage(raw)
	}
	b, _ := json.Marshal(raw)
	return b
}

// wires are the wire formats the gateway serves, by kind.
var wires = map[string]wire{kindOpenAI: openAI{}, kindAnthropic: anthropic{}}

// The provider kinds.
const (
	kindOpenAI    = "openai"
	kindAnthropic = "anthropic"
)
