package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// fixedSlug is the patch the fake live model writes.
const fixedSlug = `// Package slug turns titles into URL path segments.
package slug

import (
	"strings"
	"unicode"
)

// Make returns the slug of a title.
func Make(title string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(title), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), "-")
}
`

// fakeOpenAI speaks the chat completions wire format for the demo's coder
// and validator, telling them apart by the tools they are offered: the
// coder writes the fix, the validator runs the tests, and each ends its turn
// once its tool's result is in.
type fakeOpenAI struct {
	mu     sync.Mutex
	models []string
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.models = append(f.models, req.Model)
	f.mu.Unlock()
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Function.Name)
	}
	// The call was answered if a tool result follows the model's last
	// message (a recall may add a user message after it).
	answered := false
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != "assistant"; i-- {
		answered = answered || req.Messages[i].Role == "tool"
	}
	message := map[string]any{"role": "assistant"}
	finish := "stop"
	call := func(name string, args any) {
		raw, _ := json.Marshal(args)
		message["tool_calls"] = []any{map[string]any{"id": "call_" + name, "type": "function",
			"function": map[string]any{"name": name, "arguments": string(raw)}}}
		finish = "tool_calls"
	}
	switch {
	case slices.Contains(tools, "write_file") && !answered:
		message["content"] = "Splitting on everything that is not a letter or a digit."
		call("write_file", map[string]string{"path": "slug.go", "content": fixedSlug})
	case slices.Contains(tools, "validate") && !answered:
		message["content"] = "Running the tests."
		call("validate", map[string]any{"command": []string{"go", "test", "./..."}, "check": "go test"})
	case slices.Contains(tools, "validate"):
		message["content"] = "Accepted. The tests pass."
	default:
		message["content"] = "Patch written."
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
	})
}

// TestWhatIfForkOnALiveModel forks the demo's root from before the coder's
// first turn and continues it on another model (an OpenAI-compatible local
// server): the fork runs its agents on that model only, reaches its own
// verdict, and the comparison with the root names the file both changed.
// The runtime's agent worker allows the server's endpoint, as its operator
// would (rath up --allow-base-url): the fork's label alone does not.
func TestWhatIfForkOnALiveModel(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "") // the runtime's agent worker has no key (below)
	fake := &fakeOpenAI{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	run, _ := runDemoForTest(t, "openai="+srv.URL+"/v1")

	ctx := context.Background()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.State(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	coder := firstDecision(root, "agent:coder")
	if coder == nil {
		t.Fatal("the root has no coder decision")
	}
	at := coder.Seq - 1
	res := rath(t, run.rt.URL, "replay", run.root, "--from", strconv.FormatUint(at, 10), "--fork",
		"--provider", "openai", "--model", "fake-1", "--base-url", srv.URL+"/v1", "--wait", "2m")
	if res.code != exitOK {
		g, _ := c.Lineage(ctx, run.root)
		for _, n := range g.Root.Children {
			t.Logf("fork %s:\n%s", n.Session, rath(t, run.rt.URL, "log", n.Session).stdout)
		}
		t.Fatalf("what-if: exit %d: %s", res.code, res.stderr)
	}
	out := res.stdout
	if !strings.Contains(out, "slug.go") {
		t.Fatalf("what-if comparison does not name slug.go:\n%s", out)
	}

	g, err := c.Lineage(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	var whatIf string
	for _, n := range g.Root.Children {
		if n.ForkSeq == at && n.Session != run.root {
			st, err := c.State(ctx, n.Session)
			if err == nil && st.Labels["rath.provider"] == "openai" {
				whatIf = n.Session
			}
		}
	}
	if whatIf == "" {
		t.Fatalf("no what-if fork at %d among %+v", at, g.Root.Children)
	}
	st, err := c.State(ctx, whatIf)
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "accepted" || lastValidation(st) == nil || !lastValidation(st).Passed {
		t.Fatalf("what-if fork: outcome %q, validations %+v; want accepted", st.Outcome, st.Validations)
	}
	// Its own turns ran on the fake model; the root's stayed scripted.
	log, err := c.Log(ctx, whatIf, client.Range{From: at + 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, ev := range log {
		if ev.Type != events.TypeModelCalled {
			continue
		}
		var m events.ModelCalled
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			t.Fatal(err)
		}
		if m.Provider != "openai" || m.Model != "fake-1" {
			t.Fatalf("what-if model call %s/%s, want openai/fake-1", m.Provider, m.Model)
		}
		calls++
	}
	fake.mu.Lock()
	served := len(fake.models)
	fake.mu.Unlock()
	if calls == 0 || calls != served {
		t.Fatalf("%d model calls recorded on the fork, %d served by the fake model", calls, served)
	}
	for model := range root.Usage.ByModel {
		if strings.Contains(model, "fake-1") {
			t.Fatalf("the root's usage names the what-if model: %+v", root.Usage.ByModel)
		}
	}

	// A what-if whose turn fails (an endpoint the runtime does not allow:
	// no request is sent) ends at once, saying why, and closes its fork,
	// instead of waiting --wait and leaving the fork open.
	res = rath(t, run.rt.URL, "replay", run.root, "--from", strconv.FormatUint(at, 10), "--fork",
		"--provider", "openai", "--model", "fake-1", "--base-url", "http://127.0.0.1:9/v1", "--wait", "2m")
	if res.code == exitOK || !strings.Contains(res.stderr, "the turn of coder failed") || !strings.Contains(res.stderr, "The fork is closed (outcome failed)") {
		t.Fatalf("failing what-if: exit %d: %s", res.code, res.stderr)
	}
	g, err = c.Lineage(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Root.Children {
		if st, err := c.State(ctx, n.Session); err == nil && st.Labels["rath.base_url"] == "http://127.0.0.1:9/v1" && !st.Status.Ended() {
			t.Errorf("the failed what-if fork %s is still %s", n.Session, st.Status)
		}
	}

	// The public endpoint with no key where the agent worker runs: the
	// message says where the key goes (not the shell of rath replay), and
	// how to try again; a second try under the same --id is told that the
	// ID holds the failed what-if, and which one is free.
	args := []string{"replay", run.root, "--from", strconv.FormatUint(at, 10), "--fork", "--id", "keyless",
		"--provider", "openai", "--model", "gpt-4o-mini", "--wait", "2m"}
	res = rath(t, run.rt.URL, args...)
	for _, want := range []string{"what-if fork keyless of " + run.root + ": the turn of coder failed: ", "this agent worker has no OPENAI_API_KEY",
		"the environment of the process that runs the agent worker (rath up", "a key set where rath replay or rath start runs does not reach it",
		"stays in the record as keyless; once the cause is fixed, run it with --id keyless-2"} {
		if res.code != exitError || !strings.Contains(res.stderr, want) {
			t.Errorf("what-if without a key: exit %d, stderr %q; want %d and %q", res.code, res.stderr, exitError, want)
		}
	}
	res = rath(t, run.rt.URL, args...)
	want := "session keyless exists already (session_exists): it is an earlier what-if of " + run.root + " at " + strconv.FormatUint(at, 10) + " (closed, outcome failed: 'rath state keyless' says why), and stays in the record; "
	if res.code != exitRefused || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "and stays in the record; run it with --id keyless-2 (a session ID is never reused), or without --id") {
		t.Errorf("what-if again under its --id: exit %d, stderr %q; want %d and %q", res.code, res.stderr, exitRefused, want)
	}
}
