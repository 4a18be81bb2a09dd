package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// record runs a two-call tool loop of an agent in session id and returns
// the agent's two requests, as it sent them.
func (r *rig) record(id string, stream bool) (first, second msg) {
	r.t.Helper()
	r.prov.answers = []string{"tool:weather", "It is sunny in Oslo."}
	sys := msg{"role": "system", "content": "You are terse."}
	user := msg{"role": "user", "content": "Weather in Oslo?"}
	first = chat(stream, sys, user)
	code, body := r.post("/s/"+id+"/v1/chat/completions", "rath_alice", first)
	if code != http.StatusOK {
		r.t.Fatalf("first call: %d %s", code, body)
	}
	a := answerOf(r.t, stream, body)
	tool := msg{"role": "tool", "tool_call_id": a["tool_calls"].([]any)[0].(msg)["id"], "content": "sunny, 21C"}
	second = chat(stream, sys, user, a, tool)
	if code, body := r.post("/s/"+id+"/v1/chat/completions", "rath_alice", second); code != http.StatusOK {
		r.t.Fatalf("second call: %d %s", code, body)
	}
	return first, second
}

// TestReplayAnswersFromTheRecord: the agent run again against the replay
// endpoint gets the recorded answers, byte for byte, without a provider
// call or a new event; a request that differs is refused naming the
// message and field; another tenant's session and a missing one have no
// record to replay.
func TestReplayAnswersFromTheRecord(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "response", true: "stream"}[stream], func(t *testing.T) {
			r := start(t)
			first, second := r.record("trip", stream)
			recorded := r.kinds("trip")
			calls := len(r.prov.calls)
			r.url = r.another() // a gateway that recorded nothing of it
			var bodies [2][]byte
			for i, req := range []msg{first, second} {
				code, body := r.post("/replay/trip/v1/chat/completions", "rath_alice", req)
				if code != http.StatusOK {
					t.Fatalf("replayed call %d: %d %s", i+1, code, body)
				}
				bodies[i] = body
			}
			if got := answerOf(t, stream, bodies[1])["content"]; got != "It is sunny in Oslo." {
				t.Fatalf("replayed answer: %v", got)
			}
			if len(r.prov.calls) != calls {
				t.Fatalf("replay asked the provider %d times", len(r.prov.calls)-calls)
			}
			if got := r.kinds("trip"); strings.Join(got, "\n") != strings.Join(recorded, "\n") {
				t.Fatalf("replay recorded events:\n%s", strings.Join(got[len(recorded):], "\n"))
			}
			changed := chat(stream, msg{"role": "system", "content": "You are terse."}, msg{"role": "user", "content": "Weather in Bergen?"})
			for _, tc := range []struct {
				name, path, token string
				body              msg
				status            int
				says              string
			}{
				{"a changed message", "/replay/trip/v1/chat/completions", "rath_alice", changed, 409,
					`messages[1].content: recorded "Weather in Oslo?", got "Weather in Bergen?"`},
				{"one message more", "/replay/trip/v1/chat/completions", "rath_alice", chat(stream, append(second["messages"].([]msg), msg{"role": "user", "content": "more"})...), 409,
					"messages: recorded 4, got 5"},
				{"streaming changed", "/replay/trip/v1/chat/completions", "rath_alice", chat(!stream, first["messages"].([]msg)...), 409, "stream: recorded"},
				{"another tenant's session", "/replay/trip/v1/chat/completions", "rath_bob", first, 404, "no record"},
				{"no such session", "/replay/nothing/v1/chat/completions", "rath_alice", first, 404, "no record"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					code, body := r.post(tc.path, tc.token, tc.body)
					if code != tc.status || !strings.Contains(errorOf(body), tc.says) {
						t.Fatalf("got %d %s, want %d saying %q", code, body, tc.status, tc.says)
					}
				})
			}
			if len(r.prov.calls) != calls {
				t.Fatalf("refused replays asked the provider")
			}
		})
	}
}

// TestForkAnswersFromTheRecordThenLive: the agent run again, with another
// model, against a fork of its session made after its first call gets the
// first answer from the record and the second live, recorded in the fork.
func TestForkAnswersFromTheRecordThenLive(t *testing.T) {
	r := start(t)
	first, second := r.record("orig", false)
	evs, err := r.c.Log(context.Background(), "orig", client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var at uint64
	for _, ev := range evs {
		if ev.Type == events.TypeModelCalled {
			at = ev.Seq // the first call's
			break
		}
	}
	if _, err := r.c.Fork(context.Background(), api.ForkRequest{Parent: "orig", At: at, ID: "orig-b", Reason: "another model"}); err != nil {
		t.Fatal(err)
	}
	calls := len(r.prov.calls)
	r.prov.answers = append(r.prov.answers, "Sunny, 21C, in Oslo.")
	for _, req := range []msg{first, second} {
		req["model"] = "another-model"
		if code, body := r.post("/s/orig-b/v1/chat/completions", "rath_alice", req); code != http.StatusOK {
			t.Fatalf("call of the fork: %d %s", code, body)
		}
	}
	if n := len(r.prov.calls) - calls; n != 1 {
		t.Fatalf("the provider was asked %d times, want once (the call after the fork point)", n)
	}
	if m := r.prov.calls[len(r.prov.calls)-1]["model"]; m != "another-model" {
		t.Fatalf("the live call asked for %v", m)
	}
	got := r.kinds("orig-b")
	want := []string{
		"tool.call.completed:call_1:weather:sunny, 21C",
		"conversation.chunk.appended:assistant:Sunny, 21C, in Oslo.",
		"model.called:openai:m-1:11/7:stop",
	}
	if len(got) < len(want) || strings.Join(got[len(got)-len(want):], "\n") != strings.Join(want, "\n") || !strings.HasPrefix(got[len(got)-len(want)-1], "session.forked") {
		t.Fatalf("the fork recorded:\n%s\nwant after its fork event:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
