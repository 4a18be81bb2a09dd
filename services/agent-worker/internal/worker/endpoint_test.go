package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// openAIServer is an OpenAI-compatible endpoint that counts its requests
// and answers each with a final answer, streamed when asked to (the worker
// streams, to say the answer's pieces as they come).
func openAIServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n.Add(1)
		openAIAnswer(w, req, `"content":"Done."`, "stop")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// openAIAnswer writes a chat completion whose message has fields (JSON
// members, e.g. `"content":"Done."`) and finish reason, as one chunk of an
// event stream when the request asks for a stream, else as one JSON body.
func openAIAnswer(w http.ResponseWriter, req *http.Request, fields, finish string) {
	body, _ := io.ReadAll(req.Body)
	const usage = `"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`
	if !strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test",
			"choices":[{"index":0,"finish_reason":%q,"message":{"role":"assistant",%s}}],%s}`, finish, fields, usage)
		return
	}
	// An event's data is one line.
	var delta bytes.Buffer
	if err := json.Compact(&delta, []byte(`{"role":"assistant",`+fields+`}`)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	const head = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test",`
	fmt.Fprintf(w, "%s\"choices\":[{\"index\":0,\"finish_reason\":%q,\"delta\":%s}]}\n\n", head, finish, delta.Bytes())
	fmt.Fprintf(w, "%s\"choices\":[],%s}\n\ndata: [DONE]\n\n", head, usage)
}

// notAllowed is what a turn's failure says of an endpoint not allowed.
var notAllowed = []string{"not an endpoint this agent worker allows", "no request was sent", "--allow-base-url openai=URL"}

// An agent whose base URL, from its workflow or from a session label that
// any client can set, names an endpoint the operator did not allow fails
// its turn, saying why, and the endpoint gets no request: the key stays
// home. Allowed by name, the same endpoint answers.
func TestTurnFailsOnAnEndpointNotAllowed(t *testing.T) {
	const key = "sk-rath-endpoint-3c1d9a"
	srv, served := openAIServer(t)
	base := srv.URL + "/v1/"
	keys := map[string]string{"openai": key}
	tests := []struct {
		name      string
		workflow  string            // the agents' base URL in the workflow; "" keeps testdata's
		labels    map[string]string // the session's
		endpoints provider.Endpoints
		completes bool
		reason    []string // what the turn's failure says, besides naming the agent; default notAllowed
	}{
		{name: "workflow", workflow: base},
		{name: "label", labels: map[string]string{worker.LabelProvider: "openai", worker.LabelModel: "gpt-x", worker.LabelBaseURL: base}},
		{name: "label with the official host as user information", labels: map[string]string{worker.LabelProvider: "openai", worker.LabelModel: "gpt-x",
			worker.LabelBaseURL: strings.Replace(base, "http://", "http://api.openai.com@", 1)},
			endpoints: provider.Endpoints{Loopback: true}, reason: []string{"user information is not allowed"}},
		{name: "another endpoint allowed", workflow: base, endpoints: provider.Endpoints{Allowed: []provider.Endpoint{{Kind: provider.KindOpenAI, URL: srv.URL + "/v2"}}}},
		{name: "allowed for another provider", workflow: base, endpoints: provider.Endpoints{Allowed: []provider.Endpoint{{Kind: provider.KindAnthropic, URL: base}}}},
		{name: "allowed by name", workflow: base, endpoints: provider.Endpoints{Allowed: []provider.Endpoint{{Kind: provider.KindOpenAI, URL: srv.URL + "/v1"}}}, completes: true},
		{name: "label allowed as loopback", labels: map[string]string{worker.LabelProvider: "openai", worker.LabelModel: "gpt-x", worker.LabelBaseURL: base},
			endpoints: provider.Endpoints{Loopback: true}, completes: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := setup(t, tt.workflow)
			logs := &syncBuffer{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r.run(t, r.newWorker(t, worker.Config{Keys: keys, Retry: fastRetry, Endpoints: tt.endpoints}, log), log)
			before := served.Load()
			if _, err := r.c.Start(context.Background(), "s1", events.SessionStarted{Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(),
				WorkflowRef: r.ref, Task: "make TestAdd pass", Labels: tt.labels}); err != nil {
				t.Fatal(err)
			}
			end := r.end(t, r.request(t, "s1", "turn-1", "coder"))
			calls := served.Load() - before
			if tt.completes {
				if end.Type != events.TypeTurnCompleted || calls != 1 {
					t.Fatalf("turn ended with %s after %d requests, want completed after 1", end.Type, calls)
				}
				return
			}
			if calls != 0 {
				t.Fatalf("the endpoint got %d requests, want none", calls)
			}
			if end.Type != events.TypeTurnFailed {
				t.Fatalf("turn ended with %s, want failed", end.Type)
			}
			f := decode[events.TurnFailed](t, end)
			reason := tt.reason
			if reason == nil {
				reason = notAllowed
			}
			for _, want := range append(reason, "agent coder") {
				if !strings.Contains(f.Error, want) {
					t.Errorf("reason %q does not say %q", f.Error, want)
				}
			}
			if f.Attempts != 0 {
				t.Errorf("%d attempts recorded, want 0", f.Attempts)
			}
			if strings.Contains(f.Error, key) || strings.Contains(logs.String(), key) {
				t.Errorf("the key is in the reason or the logs")
			}
		})
	}
}
