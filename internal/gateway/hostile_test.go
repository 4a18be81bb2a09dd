package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/pkg/events"
)

// TestRefusals: every call the gateway cannot record is refused with a
// status and a message naming the problem, and records nothing.
func TestRefusals(t *testing.T) {
	r := start(t)
	user := msg{"role": "user", "content": "hi"}
	if code, body := r.post("/s/mine/v1/chat/completions", "rath_alice", chat(false, user)); code != http.StatusOK {
		t.Fatalf("alice's first call: %d %s", code, body)
	}
	before := len(r.kinds("mine"))
	big := strings.Repeat("x", 17<<20)
	for _, tc := range []struct {
		name, path, token string
		body              any
		headers           []string
		status            int
		says              string
	}{
		{"no token", "/s/mine/v1/chat/completions", "", chat(false, user), nil, 401, "no Rath gateway token"},
		{"unknown token", "/s/mine/v1/chat/completions", "rath_mallory", chat(false, user), nil, 401, "not valid"},
		{"operator's provider key", "/s/mine/v1/chat/completions", "sk-operator-secret", chat(false, user), nil, 401, "not valid"},
		{"another tenant's session", "/s/mine/v1/chat/completions", "rath_bob", chat(false, user), nil, 409, "belongs to someone else"},
		{"no session", "/v1/chat/completions", "rath_alice", chat(false, user), nil, 400, "name the session"},
		{"bad session ID in the header", "/v1/chat/completions", "rath_alice", chat(false, user), []string{gateway.HeaderSession, "a.b>"}, 400, "invalid session ID"},
		{"bad session ID in the path", "/s/new/v1/chat/completions", "rath_alice", chat(false, user), nil, 400, "reserved"},
		{"bad agent", "/s/mine/v1/chat/completions", "rath_alice", chat(false, user), []string{gateway.HeaderAgent, "../../etc"}, 400, "invalid Rath-Agent"},
		{"not JSON", "/s/mine/v1/chat/completions", "rath_alice", "{not json", nil, 400, "not a Chat Completions request"},
		{"no model", "/s/mine/v1/chat/completions", "rath_alice", msg{"messages": []any{user}}, nil, 400, "model is required"},
		{"no messages", "/s/mine/v1/chat/completions", "rath_alice", msg{"model": "m", "messages": []any{}}, nil, 400, "at least one message"},
		{"unknown role", "/s/mine/v1/chat/completions", "rath_alice", chat(false, msg{"role": "root", "content": "x"}), nil, 400, "unknown role"},
		{"tool message without its call", "/s/mine/v1/chat/completions", "rath_alice", chat(false, user, msg{"role": "tool", "content": "x"}), nil, 400, "tool_call_id"},
		{"content of a wrong type", "/s/mine/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": 42}), nil, 400, "content"},
		{"too large", "/s/mine/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": big}), nil, 413, "larger than"},
		{"unknown endpoint", "/s/mine/v1/embeddings", "rath_alice", msg{}, nil, 404, "no such endpoint"},
		{"messages: a system turn", "/s/mine/v1/messages", "rath_alice", msg{"model": "m", "messages": []any{msg{"role": "system", "content": "x"}}}, nil, 400, `unknown role "system"`},
		{"messages: a tool result without its call", "/s/mine/v1/messages", "rath_alice", msg{"model": "m", "messages": []any{msg{"role": "user", "content": []any{msg{"type": "tool_result", "content": "x"}}}}}, nil, 400, "tool_use_id"},
		{"messages: content of a wrong type", "/s/mine/v1/messages", "rath_alice", msg{"model": "m", "messages": []any{msg{"role": "user", "content": 7}}}, nil, 400, "content blocks"},
		{"messages: unknown token", "/s/mine/v1/messages", "", msg{}, []string{"X-Api-Key", "rath_mallory"}, 401, "not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := r.post(tc.path, tc.token, tc.body, tc.headers...)
			if code != tc.status || !strings.Contains(errorOf(body), tc.says) {
				t.Fatalf("got %d %s, want %d saying %q", code, body, tc.status, tc.says)
			}
			if strings.Contains(string(body), "sk-operator-secret") {
				t.Fatalf("the answer shows the operator's key: %s", body)
			}
		})
	}
	if got := r.kinds("mine"); len(got) != before {
		t.Fatalf("refused calls recorded events: %q", got[before:])
	}
	if calls := len(r.prov.calls); calls != 1 {
		t.Fatalf("refused calls reached the provider: %d calls", calls)
	}
	if strings.Contains(r.log.String(), "rath_mallory") || strings.Contains(r.log.String(), "sk-operator-secret") {
		t.Fatalf("the gateway's log shows a token or the key:\n%s", r.log)
	}
}

// TestProviderRefusalIsRecordedWithoutTheKey: a provider's error is
// recorded as a failed model call, and neither the record nor the caller
// sees the operator's key, even when the provider's message holds it.
func TestProviderRefusalIsRecordedWithoutTheKey(t *testing.T) {
	r := start(t)
	r.prov.status = http.StatusTooManyRequests
	code, body := r.post("/s/rl/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": "hi"}))
	if code != http.StatusTooManyRequests || !strings.Contains(string(body), "rate limited") || strings.Contains(string(body), "sk-operator-secret") {
		t.Fatalf("got %d %s", code, body)
	}
	got := r.kinds("rl")
	if len(got) != 3 || got[1] != "conversation.chunk.appended:user:hi" || !strings.HasPrefix(got[2], "model.call.failed:429:") {
		t.Fatalf("recorded %q", got)
	}
	if strings.Contains(got[2], "sk-operator-secret") || !strings.Contains(got[2], "[key]") {
		t.Fatalf("the record of the failure: %s", got[2])
	}
	// The provider is back: the call sent again records no input twice.
	r.prov.status = 0
	if code, body := r.post("/s/rl/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": "hi"})); code != http.StatusOK {
		t.Fatalf("again: %d %s", code, body)
	}
	if got := r.kinds("rl"); len(got) != 5 || got[3] != "conversation.chunk.appended:assistant:done" {
		t.Fatalf("recorded %q", got)
	}
}

// TestRetryIsAnsweredFromTheRecord: a call sent again after its answer was
// recorded (the caller lost the response) is answered from the record, not
// asked of the provider and recorded twice.
func TestRetryIsAnsweredFromTheRecord(t *testing.T) {
	r := start(t)
	call := chat(false, msg{"role": "user", "content": "hi"})
	_, first := r.post("/s/again/v1/chat/completions", "rath_alice", call)
	code, second := r.post("/s/again/v1/chat/completions", "rath_alice", call)
	if code != http.StatusOK || string(second) != string(first) {
		t.Fatalf("retry: %d %s, want %s", code, second, first)
	}
	if n := len(r.prov.calls); n != 1 {
		t.Fatalf("the provider was asked %d times", n)
	}
	if got := r.kinds("again"); len(got) != 4 {
		t.Fatalf("recorded %q", got)
	}
}

// TestClosedSessionTakesNoCall: a closed session is refused by name.
func TestClosedSessionTakesNoCall(t *testing.T) {
	r := start(t)
	r.post("/s/shut/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": "hi"}))
	if _, err := r.c.Close(context.Background(), "shut", events.SessionClosed{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	code, body := r.post("/s/shut/v1/chat/completions", "rath_alice", chat(false, msg{"role": "user", "content": "more"}))
	if code != http.StatusConflict || !strings.Contains(string(body), "closed") {
		t.Fatalf("got %d %s", code, body)
	}
}

// TestAnotherGatewayGoesOn: a gateway that did not record a session's last
// calls (another instance, or one restarted) reads the conversation so far
// back from the record, and records only what a call adds, for a call
// after an answer and for one sent again after a failure.
func TestAnotherGatewayGoesOn(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "response", true: "stream"}[stream], func(t *testing.T) {
			r := start(t)
			user := msg{"role": "user", "content": "hi"}
			_, body := r.post("/s/on/v1/chat/completions", "rath_alice", chat(stream, user))
			first := answerOf(t, stream, body)
			r.url = r.another()
			more := msg{"role": "user", "content": "and then?"}
			if code, body := r.post("/s/on/v1/chat/completions", "rath_alice", chat(stream, user, first, more)); code != http.StatusOK {
				t.Fatalf("second call, on another gateway: %d %s", code, body)
			}
			r.prov.status = http.StatusBadGateway
			third := chat(stream, user, first, more, msg{"role": "assistant", "content": "done"}, msg{"role": "user", "content": "bye"})
			r.post("/s/on/v1/chat/completions", "rath_alice", third)
			r.prov.status = 0
			r.url = r.another()
			if code, body := r.post("/s/on/v1/chat/completions", "rath_alice", third); code != http.StatusOK {
				t.Fatalf("third call again, on another gateway: %d %s", code, body)
			}
			want := []string{
				"session.started",
				"conversation.chunk.appended:user:hi",
				"conversation.chunk.appended:assistant:done",
				"model.called:openai:m-1:11/7:stop",
				"conversation.chunk.appended:user:and then?",
				"conversation.chunk.appended:assistant:done",
				"model.called:openai:m-1:11/7:stop",
				"conversation.chunk.appended:user:bye",
				"model.call.failed:502:the provider answered 502: rate limited for key [key]",
				"conversation.chunk.appended:assistant:done",
				"model.called:openai:m-1:11/7:stop",
			}
			if got := r.kinds("on"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestSomeoneElseAppendsBetweenCalls: a gateway goes on from the session as
// it left it; an event someone else appended since makes it read the
// session again, and the call is recorded after that event, not refused.
func TestSomeoneElseAppendsBetweenCalls(t *testing.T) {
	r := start(t)
	user := msg{"role": "user", "content": "hi"}
	_, body := r.post("/s/shared/v1/chat/completions", "rath_alice", chat(false, user))
	first := answerOf(t, false, body)
	if _, err := r.c.Emit(context.Background(), "shared", &events.ChunkAppended{Role: events.RoleUser, Content: "a note from a person"}); err != nil {
		t.Fatal(err)
	}
	if code, body := r.post("/s/shared/v1/chat/completions", "rath_alice", chat(false, user, first, msg{"role": "user", "content": "more"})); code != http.StatusOK {
		t.Fatalf("second call: %d %s", code, body)
	}
	got := r.kinds("shared")
	want := []string{"session.started", "conversation.chunk.appended:user:hi", "conversation.chunk.appended:assistant:done",
		"model.called:openai:m-1:11/7:stop", "conversation.chunk.appended:user:a note from a person",
		"conversation.chunk.appended:user:more", "conversation.chunk.appended:assistant:done", "model.called:openai:m-1:11/7:stop"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
