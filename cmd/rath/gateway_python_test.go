package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/fakeprovider"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// TestPythonAgentThroughTheGateway (issue 33): examples/python/agent.py, a
// tool-using agent written with Python's standard library only (urllib and
// json, the OpenAI Chat Completions wire format by hand, server-sent events
// read by hand), runs through rath up's model gateway against a local fake
// provider, unchanged but for its base URL and key. The session records each
// message once, the tool calls as the caller's (runner caller), each result
// as the completion of its call, and every model call; the same program run
// against /replay/<session>/v1 prints the same answers from the record,
// asking the provider nothing and recording nothing. Streaming (STREAM=1)
// it is recorded and replayed alike. A refused call ends the program with
// the gateway's own message: a replay that does not stream a streamed
// record, a token that is not valid.
//
// python3 is required: without it the test fails, naming it
// (scripts/install-python.sh installs it).
func TestPythonAgentThroughTheGateway(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not installed (%v): this test runs examples/python/agent.py; scripts/install-python.sh installs it with apt-get", err)
	}
	agent, err := filepath.Abs(filepath.Join("..", "..", "examples", "python", "agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	provider := &countingProvider{h: fakeprovider.Handler()}
	srv := httptest.NewServer(provider)
	defer srv.Close()

	cfg := gatewayRuntime(t)
	gwURL, natsURL := upWithGateway(t, cfg, srv.URL)
	// The operator adds a tenant's user to the running rath up and mints
	// it a token, as the docs say.
	token, alice := gatewayUser(ctx, t, filepath.Join(cfg.Data, "creds"))

	// try runs the program against base with key, streaming or not; run
	// fails the test unless it printed its answers.
	try := func(base, key string, stream bool) (agentOutput, string, error) {
		cmd := exec.CommandContext(ctx, python, agent)
		cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+base, "OPENAI_API_KEY="+key, "MODEL=gpt-py",
			fmt.Sprintf("STREAM=%d", btoi(stream)), "PYTHONDONTWRITEBYTECODE=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return agentOutput{}, stdout.String() + stderr.String(), err
		}
		var got agentOutput
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			return agentOutput{}, stdout.String() + stderr.String(), fmt.Errorf("it printed no answers: %w", err)
		}
		return got, stderr.String(), nil
	}
	run := func(base string, stream bool) agentOutput {
		t.Helper()
		got, said, err := try(base, token, stream)
		if err != nil {
			t.Fatalf("python3 agent.py against %s (stream %v): %v\n%s", base, stream, err, said)
		}
		return got
	}
	want := []string{
		"The tool said: rath: an event-sourced runtime for agent sessions",
		"The tool said: jetstream: the persistence layer of NATS",
	}
	wantLog := []string{
		"started",
		"chunk system: Answer with the glossary: look every term up before you answer.",
		"chunk user: What is Rath?",
		`tool call_2 lookup {"input":"What is Rath?"} by agent, run by caller`,
		"model openai gpt-py 20+5 tool_calls",
		"done call_2 lookup: rath: an event-sourced runtime for agent sessions",
		"chunk assistant: The tool said: rath: an event-sourced runtime for agent sessions",
		"model openai gpt-py 40+5 stop",
		"chunk user: And JetStream?",
		`tool call_6 lookup {"input":"And JetStream?"} by agent, run by caller`,
		"model openai gpt-py 60+5 tool_calls",
		"done call_6 lookup: jetstream: the persistence layer of NATS",
		"chunk assistant: The tool said: jetstream: the persistence layer of NATS",
		"model openai gpt-py 80+5 stop",
	}

	var c *client.Client
	asked := 0
	for _, stream := range []bool{false, true} {
		id := "glossary-py"
		if stream {
			id += "-s"
		}
		// The session: the program's two turns, four model calls.
		if got := run(gwURL+"/s/"+id+"/v1", stream); !slices.Equal(got.Answers, want) || got.Model != "gpt-py" {
			t.Fatalf("the agent (stream %v) printed %+v, want the answers %q of gpt-py", stream, got, want)
		}
		asked += 4
		if n := provider.count(); n != asked {
			t.Errorf("the provider was asked %d times, want %d (two turns of a tool call and an answer)", n, asked)
		}
		if c == nil {
			// The gateway's first call made the server load alice, added
			// since rath up started: she connects now.
			c = connectAs(t, natsURL, alice)
		}
		log, err := c.Log(ctx, id, client.Range{})
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, id, log, false, wantLog)
		linked(t, id, log)
		head := log[len(log)-1].Seq

		// The same program against the record: the same answers, nothing
		// asked of the provider, nothing recorded.
		if got := run(gwURL+"/replay/"+id+"/v1", stream); !slices.Equal(got.Answers, want) {
			t.Errorf("the replay of %s (stream %v) answered %q, want %q", id, stream, got.Answers, want)
		}
		if n := provider.count(); n != asked {
			t.Errorf("the replay of %s asked the provider %d times, want none", id, n-asked)
		}
		if st, err := c.State(ctx, id); err != nil || st.Seq != head {
			t.Errorf("after the replay %s's head is %v (%v), want %d: the replay recorded something", id, st.Seq, err, head)
		}
	}

	// Refused calls end the program with the gateway's message.
	_, said, err := try(gwURL+"/replay/glossary-py-s/v1", token, false)
	if err == nil || !strings.Contains(said, "409 Conflict") || !strings.Contains(said, "stream: recorded true, got false (code replay_diverged)") {
		t.Errorf("a replay that does not stream a streamed record: %v, said %q; want it refused with the gateway's message", err, said)
	}
	_, said, err = try(gwURL+"/s/glossary-py/v1", "rath-not-a-token", false)
	if err == nil || !strings.Contains(said, "401 Unauthorized") || !strings.Contains(said, "(code invalid_api_key)") {
		t.Errorf("a token that is not valid: %v, said %q; want it refused with the gateway's message", err, said)
	}
	if n := provider.count(); n != asked {
		t.Errorf("the provider was asked %d times in all, want %d", n, asked)
	}
}

// linked checks that each rath.tool.call.completed of a session's log names
// a call its log requested before it, run by the caller.
func linked(t *testing.T, id string, log []events.Stored) {
	t.Helper()
	requested := map[string]*events.ToolRequested{}
	for _, ev := range log {
		d, err := ev.Decode()
		if err != nil {
			t.Fatalf("%s event %d: %v", id, ev.Seq, err)
		}
		switch d := d.(type) {
		case *events.ToolRequested:
			requested[d.CallID] = d
		case *events.ToolCompleted:
			r, ok := requested[d.CallID]
			if !ok {
				t.Errorf("%s event %d completes call %s, which it did not request before", id, ev.Seq, d.CallID)
			} else if r.Runner != events.RunnerCaller || r.Tool != d.Tool {
				t.Errorf("%s event %d completes %s %s, requested as %s run by %q", id, ev.Seq, d.Tool, d.CallID, r.Tool, r.Runner)
			}
		}
	}
}
