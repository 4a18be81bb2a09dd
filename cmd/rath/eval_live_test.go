package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/eval"
)

// fakeChat is a local server speaking OpenAI's chat completions wire
// format: it answers every request with a final answer and fixed usage,
// and keeps the Authorization header and model of each request.
type fakeChat struct {
	mu     sync.Mutex
	auth   []string
	models []string
}

func (f *fakeChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model string `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.models = append(f.models, req.Model)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-eval", "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "Done: the notes are read."}}},
		"usage": map[string]any{"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290},
	})
}

// rath eval of a workflow whose agent is a live model (provider openai)
// at a local fake server: the runtime's agent worker has the key and
// allows the endpoint, as rath up with OPENAI_API_KEY and --allow-base-url
// would; every run passes, calls the server with the key, and the report's
// tokens and cost are the server's usage at the price table's prices.
func TestEvalLiveProvider(t *testing.T) {
	fake := &fakeChat{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	base := srv.URL + "/v1"

	cfg := demoConfig(t.TempDir())
	cfg.ToolRunner.Backend = "local"
	cfg.Worker.Keys = map[string]string{"openai": "sk-eval-test"}
	cfg.Worker.AllowBaseURLs = []string{"openai=" + base}
	rt, err := startRuntime(context.Background(), cfg, "rath-eval-live-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	rt.StartLoop()
	upCreds.Store(rt.URL, rt.Creds)
	waitReady(t, rt.URL)

	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("live.yaml", fmt.Sprintf(`name: eval-live
description: One agent on a live model answers once; the session closes as succeeded.
agents:
  - name: agent
    provider: openai
    model: fake-eval-1
    base_url: %s
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: agent}
  - name: done
    when: event.type == "rath.agent.turn.completed" && event.data.stop_reason == "end_turn"
    route: {close: {outcome: succeeded, reason: the agent answered}}
`, base))
	prices := write("prices.yaml", "currency: USD\nprices:\n  - {provider: openai, model: fake-eval-1, input: 2, output: 8}\n")
	tasks := write("tasks.yaml", `tasks:
  - id: live
    task: Read the notes and say when you are done.
    workflow: live.yaml
    grader:
      outcome: succeeded
      cel: state.model_calls == 1
`)

	r := rath(t, rt.URL, "eval", tasks, "--runs", "2", "--run-timeout", "2m", "--prices", prices, "--json")
	if r.code != exitOK {
		t.Fatalf("rath eval: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep eval.Report
	decode(t, r.stdout, &rep)
	if len(rep.Tasks) != 1 || len(rep.Tasks[0].Runs) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	const cost = (1234*2.0 + 56*8.0) / 1e6
	for _, run := range rep.Tasks[0].Runs {
		used := run.Models["openai/fake-eval-1"]
		if !run.Passed || run.TokensIn != 1234 || run.TokensOut != 56 || used.In != 1234 || used.Out != 56 || len(run.Models) != 1 ||
			run.Cost == nil || *run.Cost != cost {
			t.Errorf("try %d: passed %v, tokens %d/%d, models %v, cost %s; want passed, 1234/56 from the server's usage, %v USD",
				run.Try, run.Passed, run.TokensIn, run.TokensOut, run.Models, eval.Money(run.Cost), cost)
		}
	}
	if s := rep.Tasks[0].Summary; s.PassAt1 != 1 || s.TokensIn != 2*1234 || s.TokensOut != 2*56 || s.Cost == nil || *s.Cost != 2*cost {
		t.Errorf("summary %+v", s)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.auth) != 2 || fake.auth[0] != "Bearer sk-eval-test" || fake.auth[1] != "Bearer sk-eval-test" || fake.models[0] != "fake-eval-1" {
		t.Errorf("the server saw keys %q and models %q, want the worker's key twice and fake-eval-1", fake.auth, fake.models)
	}
}
