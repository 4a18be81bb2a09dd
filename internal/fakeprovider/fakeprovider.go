// Package fakeprovider is a local model provider speaking the OpenAI Chat
// Completions wire format (streaming and not), answering by a fixed rule
// instead of a model: to point the model gateway and an agent framework at
// where there is no provider to reach (examples/fake-provider, and tests).
//
// The rule: when the request offers tools and its last message is the
// user's, it calls the first tool with {"input": <what the user said>} (the
// call's ID is call_<number of messages>); when the last message is a
// tool's result, it says "The tool said: <it>"; otherwise it says "You
// said: <what the user said>". The answer's model is the request's.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type request struct {
	Model    string    `json:"model"`
	Messages []message `json:"messages"`
	Stream   bool      `json:"stream"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// text is a content's text: the string, or its text parts joined.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct{ Text string }
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Handler serves POST /v1/chat/completions by the rule: base URL
// http://<its address>/v1.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", answer)
	return mux
}

// answer answers one Chat Completions request, streamed or not.
func answer(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"want a Chat Completions request with messages"}}`, http.StatusBadRequest)
		return
	}
	last := req.Messages[len(req.Messages)-1]
	said := text(last.Content)
	msg := map[string]any{"role": "assistant"}
	finish := "stop"
	var call map[string]any
	switch {
	case last.Role == "tool":
		msg["content"] = "The tool said: " + said
	case len(req.Tools) > 0 && last.Role == "user":
		args, _ := json.Marshal(map[string]string{"input": said})
		call = map[string]any{"id": fmt.Sprintf("call_%d", len(req.Messages)), "type": "function",
			"function": map[string]any{"name": req.Tools[0].Function.Name, "arguments": string(args)}}
		msg["content"], msg["tool_calls"], finish = nil, []any{call}, "tool_calls"
	default:
		msg["content"] = "You said: " + said
	}
	usage := map[string]int{"prompt_tokens": len(req.Messages) * 10, "completion_tokens": 5, "total_tokens": len(req.Messages)*10 + 5}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = "chatcmpl-fake", "chat.completion.chunk", 0, req.Model
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	delta := map[string]any{"role": "assistant"}
	if call != nil {
		call["index"] = 0
		delta["tool_calls"] = []any{call}
	} else {
		delta["content"] = msg["content"]
	}
	chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}})
	chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}})
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		chunk(map[string]any{"choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
