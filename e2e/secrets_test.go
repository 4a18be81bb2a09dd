package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// The provider key of TestProviderKeyIsNowhere, and a piece of it that no
// cut or prefix of anything else would produce.
const (
	providerKey = "sk-rath-e2e-7d41c09b5ae2f3-never-stored"
	keyPiece    = "7d41c09b5ae2f3"
)

// echoingModel is an OpenAI-compatible endpoint that puts the credentials
// it receives everywhere it can: in an error, in answers, in tool call
// arguments (once with a lone surrogate, which the ledger refuses, so the
// answer becomes a rejection). It answers its Nth request by the script
// below, whatever the request says; one session's turns are sequential.
type echoingModel struct {
	mu   sync.Mutex
	auth []string // the Authorization header of each request
}

func (m *echoingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.auth = append(m.auth, r.Header.Get("Authorization"))
	n := len(m.auth)
	m.mu.Unlock()
	echo := r.Header.Get("Authorization")
	key := strings.TrimPrefix(echo, "Bearer ")
	w.Header().Set("Content-Type", "application/json")
	answer := func(content string, args any) {
		message := map[string]any{"role": "assistant", "content": content}
		finish := "stop"
		if args != nil {
			raw, _ := json.Marshal(args)
			message["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%d", n), "type": "function",
				"function": map[string]any{"name": "run", "arguments": string(raw)}}}
			finish = "tool_calls"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-echo", "object": "chat.completion", "created": 1, "model": "echo-1",
			"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
	}
	switch n {
	case 1: // a failed attempt, retried
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"type":"server_error","message":"upstream refused %s"}}`, echo)
	case 2: // an answer the ledger refuses: the turn fails
		message := map[string]any{"role": "assistant", "content": "You sent " + echo}
		message["tool_calls"] = []any{map[string]any{"id": "call_bad", "type": "function",
			"function": map[string]any{"name": "run", "arguments": `{"command":["echo",` + fmt.Sprintf("%q", key) + `],"note":"\ud800"}`}}}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-echo", "object": "chat.completion", "created": 1, "model": "echo-1",
			"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": "tool_calls"}},
		})
	case 3: // a tool call whose arguments hold the key
		answer("Echoing "+key, map[string]any{"command": []string{"echo", key}})
	default:
		answer("Done; you sent "+echo, nil)
	}
}

func (m *echoingModel) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.auth...)
}

// syncBuffer is a log destination several services write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A provider key reaches the provider and nothing else. A session runs on
// a local model endpoint that echoes the key in an error, in its answers
// and in tool call arguments, one of which the ledger refuses; then every
// message of every stream (events, blobs, rejections, snapshots, dead
// letters, headers included), the rejections as the ledger reports them,
// every service's logs and the session's exported dossier are searched for
// the key and for a piece of it.
func TestProviderKeyIsNowhere(t *testing.T) {
	model := &echoingModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)

	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	wcfg := worker.DefaultConfig()
	wcfg.Keys = map[string]string{"openai": providerKey}
	wcfg.AllowBaseURLs = []string{"openai=" + srv.URL + "/v1"} // as the operator would
	wcfg.Retry.MaxAttempts, wcfg.Retry.Base, wcfg.Retry.Max = 3, time.Millisecond, time.Millisecond
	r := startWith(t, wcfg, log)

	wf := filepath.Join(t.TempDir(), "echo.yaml")
	if err := os.WriteFile(wf, []byte(`name: echo
agents:
  - name: coder
    provider: openai
    model: echo-1
    base_url: `+srv.URL+`/v1
    system: You fix code.
    tools: [run]
rules:
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: coder}
  - name: again
    when: event.type == "rath.agent.turn.failed"
    route: {agent: coder}
  - name: done
    when: event.type == "rath.agent.turn.completed" && event.data.tool_calls == 0
    route: {close: {outcome: succeeded}}
budgets:
  max_turns: 6
`), 0o644); err != nil {
		t.Fatal(err)
	}
	st, evs := r.runPath(t, "keys", wf, "repo")
	if st.Outcome != "succeeded" {
		t.Fatalf("closed %s (%s)", st.Outcome, st.CloseReason)
	}

	// The key was in play: every request carried it, and every echo path
	// was taken (a redacted failed attempt, a refused answer, a tool run).
	reqs := model.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	for i, a := range reqs {
		if a != "Bearer "+providerKey {
			t.Fatalf("request %d carried %q, not the key", i+1, a)
		}
	}
	seen := map[string]string{}
	for _, ev := range evs {
		seen[ev.Type] += string(ev.Data)
	}
	if f := seen[events.TypeModelCallFailed]; !strings.Contains(f, "[REDACTED]") {
		t.Errorf("the failed attempt does not show the echoed key redacted: %s", f)
	}
	if f := seen[events.TypeTurnFailed]; !strings.Contains(f, "the ledger refused the model's answer") {
		t.Errorf("no turn failed on the refused answer: %s", f)
	}
	if done := seen[events.TypeToolCompleted]; !strings.Contains(done, "[REDACTED]") {
		t.Errorf("the tool did not run with the redacted argument: %s", done)
	}

	leaks := func(where string, b []byte) {
		t.Helper()
		if i := bytes.Index(b, []byte(keyPiece)); i >= 0 { // the key holds the piece
			t.Errorf("%s holds the key: …%s…", where, b[max(0, i-200):min(len(b), i+100)])
		}
	}

	// Everything JetStream holds, as an operator reads it.
	ctx := context.Background()
	js, err := jetstream.New(natstest.Connect(t, r.url))
	if err != nil {
		t.Fatal(err)
	}
	scanned := map[string]int{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			scanned[name]++
			leaks(fmt.Sprintf("stream %s message %d (%s)", name, seq, m.Subject), m.Data)
			leaks(fmt.Sprintf("stream %s message %d (%s) headers", name, seq, m.Subject), []byte(fmt.Sprint(m.Header)))
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{events.StreamSessions, events.StreamRejects, "OBJ_rath-blobs"} {
		if scanned[stream] == 0 {
			t.Errorf("nothing scanned in %s (scanned %v)", stream, scanned)
		}
	}

	// The rejections as an operator reads them (every tenant's: the
	// refused answer was the agent worker's, of the tenant rath).
	rejected := 0
	if err := r.store.Rejections(ctx, "", "", 1, func(_ uint64, rj eventstore.Rejection) error {
		rejected++
		raw, err := json.Marshal(rj)
		leaks("rejection", raw)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if rejected == 0 {
		t.Error("no rejection recorded: the refused answer was not exercised")
	}

	// The logs of the ledger, the selector, the agent worker and the tool
	// runner; the ledger's rejection among them.
	if !strings.Contains(logs.String(), "proposal rejected") {
		t.Errorf("the services' logs lack the rejection: not all of them were captured?")
	}
	leaks("the services' logs", []byte(logs.String()))

	// The exported dossier, as rath export writes it.
	d, err := dossier.Build(ctx, r.c, "keys", dossier.Options{Blobs: r.c.GetBlob})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := d.Write(dir); err != nil {
		t.Fatal(err)
	}
	files, redacted := 0, 0
	if err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		redacted += bytes.Count(b, []byte("[REDACTED]"))
		rel, _ := filepath.Rel(dir, path)
		leaks("dossier file "+rel, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if files < 5 || redacted == 0 {
		t.Errorf("the dossier has %d files, %d redacted echoes: the echoes are not in it", files, redacted)
	}
}
