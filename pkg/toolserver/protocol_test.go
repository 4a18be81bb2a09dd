package toolserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// The protocol of docs/tools.md, followed by hand with nothing but NATS and
// JSON, as a server in another language would: register, consume, check the
// state, append the evidence, ack. It connects with the tool runner's
// identity, as the doc says a custom tool server does, so the server's
// permissions are part of what is checked.
func TestProtocolByHand(t *testing.T) {
	r := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := natstest.ConnectAs(t, r.nc.ConnectedUrl(), auth.RoleToolRunner)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// 1. Register.
	kv, err := js.KeyValue(ctx, "rath-tools")
	if err != nil {
		t.Fatal(err)
	}
	entry := `{"name":"shout","description":"Upper-case a text.","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"server":"tool-shout"}`
	if _, err := kv.Put(ctx, "shout", []byte(entry)); err != nil {
		t.Fatal(err)
	}
	if spec, err := r.store.Tool(ctx, "shout"); err != nil || spec.Server != "tool-shout" {
		t.Fatalf("registry entry %+v %v", spec, err)
	}

	// 2. The durable consumer, with the API body of the docs.
	create := `{"stream_name":"RATH_SESSIONS","config":{"durable_name":"tool-shout","filter_subjects":["rath.log.*.*.tool"],"ack_policy":"explicit","ack_wait":60000000000,"deliver_policy":"all","max_ack_pending":512}}`
	reply, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-shout", []byte(create))
	if err != nil || strings.Contains(string(reply.Data), `"error"`) {
		t.Fatalf("create consumer: %v %s", err, reply.Data)
	}

	if _, err := r.c.Start(ctx, "hand", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	r.request(t, "hand", "c1", "shout", `{"text":"hello"}`)

	cons, err := js.Consumer(ctx, "RATH_SESSIONS", "tool-shout")
	if err != nil {
		t.Fatal(err)
	}
	request := func(subject string, body any, header nats.Header) []byte {
		t.Helper()
		b, _ := json.Marshal(body)
		msg := &nats.Msg{Subject: subject, Data: b, Header: header}
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get("Rath-Error"); code != "" {
			t.Fatalf("%s: %s %s", subject, code, reply.Data)
		}
		return reply.Data
	}
	handled := false
	for !handled {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			// 3. Take our requests; ack everything else.
			var ev struct {
				ID, Type, Subject string
				Data              struct {
					CallID    string          `json:"call_id"`
					Tool      string          `json:"tool"`
					Agent     string          `json:"agent"`
					Arguments json.RawMessage `json:"arguments"`
				}
			}
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type != "rath.tool.call.requested" || ev.Data.Tool != "shout" {
				_ = m.Ack()
				continue
			}
			// 4. The state overview says whether the call is still to run.
			type toolCall struct {
				CallID   string `json:"call_id"`
				Status   string `json:"status"`
				Attempts int    `json:"attempts"`
			}
			var st struct {
				Status string `json:"status"`
				Tools  struct {
					Asked []toolCall `json:"asked"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(request("rath.ledger.rath.tool-runner.state", map[string]any{"session": ev.Subject, "tool_calls": []string{ev.Data.CallID}}, nil), &st); err != nil {
				t.Fatal(err)
			}
			ok := len(st.Tools.Asked) == 1
			var call toolCall
			if ok {
				call = st.Tools.Asked[0]
			}
			if st.Status == "closed" || !ok || call.Status == "completed" || call.Status == "failed" {
				_ = m.Ack()
				continue
			}
			attempt := call.Attempts + 1
			// 5-6. Started, the chunk, the completion.
			header := nats.Header{"Content-Type": []string{"application/cloudevents+json"}}
			emit := func(what, typ string, data map[string]any) {
				request("rath.ledger.rath.tool-runner.append", map[string]any{
					"specversion": "1.0", "id": events.DerivedID("tool-shout", ev.ID, what, "1"), "source": "rath/tool/shout",
					"type": typ, "subject": ev.Subject, "causationid": ev.ID, "data": data,
				}, header)
			}
			var in struct{ Text string }
			_ = json.Unmarshal(ev.Data.Arguments, &in)
			result := strings.ToUpper(in.Text)
			emit("started", "rath.tool.call.started", map[string]any{"call_id": ev.Data.CallID, "tool": "shout", "attempt": attempt})
			emit("chunk", "rath.conversation.chunk.appended", map[string]any{"role": "tool", "agent": ev.Data.Agent, "content": result, "tool_call_id": ev.Data.CallID})
			emit("completed", "rath.tool.call.completed", map[string]any{"call_id": ev.Data.CallID, "tool": "shout", "attempt": attempt, "result": result, "exit_code": 0, "duration_ms": 1})
			// A retried append with the same ID is stored once.
			emit("completed", "rath.tool.call.completed", map[string]any{"call_id": ev.Data.CallID, "tool": "shout", "attempt": attempt, "result": result, "exit_code": 0, "duration_ms": 1})
			// 7. Ack once the evidence is stored.
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			handled = true
		}
	}
	chunk, last := r.finish(t, "hand", "c1")
	if done, ok := last.(*events.ToolCompleted); !ok || done.Result != "HELLO" || chunk.Content != "HELLO" {
		t.Fatalf("%#v %+v", last, chunk)
	}
	st, err := r.c.State(ctx, "hand")
	if err != nil || st.Seq != 5 {
		t.Fatalf("head %d (%v): want start, request, started, chunk, completed", st.Seq, err)
	}
}
