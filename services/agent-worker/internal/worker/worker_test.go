package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fastRetry keeps the retry tests quick; the backoff itself is WithRetry's.
var fastRetry = provider.Retry{MaxAttempts: 3, Base: time.Millisecond, Max: time.Millisecond}

// rig is a ledger on a real embedded JetStream, and the worker's view of it.
type rig struct {
	nc    *nats.Conn
	c     *client.Client
	store *eventstore.Store
	wf    *workflow.Workflow
	ref   string
}

// setup starts the ledger and uploads the workflow in testdata/coder.yaml,
// with its agents' endpoint replaced by baseURL when that is not empty.
func setup(t *testing.T, baseURL string) *rig {
	t.Helper()
	_, nc := natstest.Start(t)
	return setupFile(t, nc, "testdata/coder.yaml", baseURL)
}

// setupFile starts the ledger on nc, uploads the workflow file's bundle
// (the file and its scripts), with its agents' endpoint replaced by baseURL
// when that is not empty, and registers the agents' tools, as a tool runner
// would have.
func setupFile(t *testing.T, nc *nats.Conn, path, baseURL string) *rig {
	t.Helper()
	r := setupUnregistered(t, nc, path, baseURL)
	for _, a := range r.wf.Agents {
		for _, name := range a.Tools {
			if err := r.store.PutTool(context.Background(), eventstore.ToolSpec{Name: name, Description: "Runs a command.",
				Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// setupUnregistered is setupFile without registering any tool.
func setupUnregistered(t *testing.T, nc *nats.Conn, path, baseURL string) *rig {
	t.Helper()
	testrig.Ledger(t, nc.ConnectedUrl())
	ctx := context.Background()
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if baseURL != "" {
		src = bytes.ReplaceAll(src, []byte("http://127.0.0.1:9/v1/"), []byte(baseURL))
	}
	wf, err := workflow.Parse(src, path)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{nc: nc, c: c, store: store, wf: wf, ref: testrig.Bundle(t, store, wf)}
}

// newWorker returns a worker wired as service.Run wires it.
func (r *rig) newWorker(t *testing.T, cfg worker.Config, log *slog.Logger) *worker.Worker {
	t.Helper()
	wc, err := client.New(r.nc, client.WithSource(worker.Source))
	if err != nil {
		t.Fatal(err)
	}
	return worker.New(wc, r.store, workflow.NewLibrary(r.store.GetBlob), cfg, log)
}

// run consumes turn requests with w through the consumer runner until the
// test ends; it stops before the ledger (cleanups run last first) and must
// stop cleanly.
func (r *rig) run(t *testing.T, w *worker.Worker, log *slog.Logger) {
	t.Helper()
	wc, err := client.New(r.nc, client.WithSource(worker.Source))
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "worker", func(ctx context.Context) error {
		return consume.Run(ctx, r.nc, w.Handler(), consume.RecordInSession(wc), log)
	})
}

func (r *rig) start(t *testing.T, id string) {
	t.Helper()
	if _, err := r.c.Start(context.Background(), id, events.SessionStarted{
		Workflow: r.wf.Name, WorkflowHash: r.wf.Hash(), WorkflowRef: r.ref, Task: "make TestAdd pass",
	}); err != nil {
		t.Fatal(err)
	}
}

// emit appends an event and returns it as stored.
func (r *rig) emit(t *testing.T, id string, data any, opts ...events.Option) events.Stored {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, data, opts...)
	if err != nil {
		t.Fatal(err)
	}
	page, err := r.c.Log(context.Background(), id, client.Range{From: a.Seq, To: a.Seq})
	if err != nil || len(page) != 1 {
		t.Fatalf("read back %d of %s: %v", a.Seq, id, err)
	}
	return page[0]
}

// request asks agent for turn turnID, as the selector would.
func (r *rig) request(t *testing.T, id, turnID, agent string, opts ...events.Option) events.Stored {
	t.Helper()
	return r.emit(t, id, &events.TurnRequested{TurnID: turnID, Agent: agent, Rule: "start"}, opts...)
}

// asWorker are the options of an event the worker itself would append for
// req: a crash leaves exactly these behind.
func asWorker(req events.Stored, what string) []events.Option {
	corr := req.Correlation
	if corr == "" {
		d, _ := req.Decode()
		corr = d.(*events.TurnRequested).TurnID
	}
	return []events.Option{events.WithID(events.DerivedID(worker.Durable, req.ID, what)), events.WithSource(worker.Source),
		events.WithCausation(req.ID), events.WithCorrelation(corr)}
}

// end waits for the event that ends the turn req asked for.
func (r *rig) end(t *testing.T, req events.Stored) events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got events.Stored
	found := errors.New("found")
	err := r.c.Watch(ctx, req.Session, func(ev events.Stored) error {
		if ev.Causation == req.ID && (ev.Type == events.TypeTurnCompleted || ev.Type == events.TypeTurnFailed) {
			got = ev
			return found
		}
		return nil
	}, client.From(req.Seq))
	if !errors.Is(err, found) {
		t.Fatalf("turn of request %s did not end: %v; log: %s", req.ID, err, r.types(t, req.Session))
	}
	return got
}

func (r *rig) log(t *testing.T, id string) []events.Stored {
	t.Helper()
	page, err := r.c.Log(context.Background(), id, client.Range{From: 1, Limit: api.MaxLogPage})
	if err != nil {
		t.Fatal(err)
	}
	return page
}

func (r *rig) types(t *testing.T, id string) string {
	var out []string
	for _, ev := range r.log(t, id) {
		out = append(out, fmt.Sprintf("%d:%s", ev.Seq, strings.TrimPrefix(ev.Type, "rath.")))
	}
	return strings.Join(out, " ")
}

// caused returns the events of a session caused by req, in log order.
func caused(log []events.Stored, req events.Stored) []events.Stored {
	var out []events.Stored
	for _, ev := range log {
		if ev.Causation == req.ID {
			out = append(out, ev)
		}
	}
	return out
}

func typesOf(evs []events.Stored) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func decode[T any](t *testing.T, ev events.Stored) *T {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := d.(*T)
	if !ok {
		t.Fatalf("event %d is %s, not %T", ev.Seq, ev.Type, v)
	}
	return v
}

// model is a Provider answering from a function of the call number (1 for
// the first call), recording every request.
type model struct {
	answer func(n int) (provider.Response, error)

	mu   sync.Mutex
	reqs []provider.Request
}

func (m *model) Name() string { return "fake" }

func (m *model) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	n := len(m.reqs)
	m.mu.Unlock()
	return m.answer(n)
}

func (m *model) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.reqs)
}

func (m *model) requests() []provider.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

func answering(resp provider.Response) *model {
	return &model{answer: func(int) (provider.Response, error) { return resp, nil }}
}

func override(p provider.Provider) func(workflow.Agent) (provider.Provider, error) {
	return func(workflow.Agent) (provider.Provider, error) { return p, nil }
}

// toolUse is an answer asking for two tool calls, the second without an ID.
var toolUse = provider.Response{
	Content: "Running the tests.",
	ToolCalls: []provider.ToolCall{
		{ID: "call_a", Name: "run", Arguments: json.RawMessage(`{"cmd":"go test ./..."}`)},
		{Name: "run", Arguments: json.RawMessage(`{"cmd":"go vet ./..."}`)},
	},
	StopReason:   provider.StopToolUse,
	TokensIn:     120,
	TokensOut:    30,
	Model:        "gpt-test-2025",
	RequestBody:  []byte(`{"model":"gpt-test","messages":[]}`),
	ResponseBody: []byte(`{"choices":[{"finish_reason":"tool_calls"}]}`),
}

// A requested turn calls the agent's model with the session's transcript and
// the agent's registered tools, and records the answer, the call and the tool
// calls before ending the turn, every event caused by the request.
func TestWorkerTakesATurn(t *testing.T) {
	r := setup(t, "")
	ctx := context.Background()
	if err := r.store.PutTool(ctx, eventstore.ToolSpec{Name: "run", Description: "Runs a command.",
		Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
		t.Fatal(err)
	}
	m := answering(toolUse)
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)

	r.start(t, "s1")
	r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleUser, Content: "the test is in calc_test.go"})
	req := r.request(t, "s1", "turn-1", "coder", events.WithCorrelation("corr-1"))
	end := r.end(t, req)

	got := caused(r.log(t, "s1"), req)
	want := []string{events.TypeChunkAppended, events.TypeToolRequested, events.TypeToolRequested, events.TypeModelCalled, events.TypeTurnCompleted}
	if !slices.Equal(typesOf(got), want) {
		t.Fatalf("events caused by the request: %v, want %v", typesOf(got), want)
	}
	for i, what := range []string{"chunk", "tool-0", "tool-1", "model", "completed"} {
		ev := got[i]
		if ev.ID != events.DerivedID(worker.Durable, req.ID, what) || ev.Source != worker.Source || ev.Correlation != "corr-1" || ev.Seq <= req.Seq {
			t.Errorf("%s: id %s source %s correlation %s seq %d", ev.Type, ev.ID, ev.Source, ev.Correlation, ev.Seq)
		}
	}
	if end.ID != got[4].ID {
		t.Fatalf("the turn ended with %s", end.Type)
	}

	if c := decode[events.ChunkAppended](t, got[0]); *c != (events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "Running the tests."}) {
		t.Errorf("chunk %+v", c)
	}
	called := decode[events.ModelCalled](t, got[3])
	if called.Agent != "coder" || called.Provider != "openai" || called.Model != "gpt-test-2025" || called.TokensIn != 120 ||
		called.TokensOut != 30 || called.Attempt != 1 || called.StopReason != provider.StopToolUse || called.LatencyMS < 0 {
		t.Errorf("model call %+v", called)
	}
	for _, b := range []struct {
		ref  string
		want []byte
	}{{called.RequestRef, toolUse.RequestBody}, {called.ResponseRef, toolUse.ResponseBody}} {
		if b.ref != eventstore.BlobRef(b.want) {
			t.Errorf("ref %q, want %q", b.ref, eventstore.BlobRef(b.want))
			continue
		}
		body, err := r.store.GetBlob(ctx, b.ref)
		if err != nil || !bytes.Equal(body, b.want) {
			t.Errorf("blob %s: %q %v, want %q", b.ref, body, err, b.want)
		}
	}
	for i, wantID := range []string{"call_a", "turn-1-1"} {
		tr := decode[events.ToolRequested](t, got[1+i])
		if tr.CallID != wantID || tr.Tool != "run" || tr.Agent != "coder" || string(tr.Arguments) != string(toolUse.ToolCalls[i].Arguments) {
			t.Errorf("tool request %d: %+v", i, tr)
		}
	}
	if c := decode[events.TurnCompleted](t, got[4]); *c != (events.TurnCompleted{TurnID: "turn-1", Agent: "coder", StopReason: provider.StopToolUse, ToolCalls: 2}) {
		t.Errorf("completed %+v", c)
	}

	// What the model was asked: the agent's settings, the transcript of the
	// state the request was handled at, and only the registered tools.
	reqs := m.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls", len(reqs))
	}
	asked := reqs[0]
	if asked.Agent != "coder" || asked.Model != "gpt-test" || asked.System != "You fix Go code." || asked.MaxTokens != 512 {
		t.Errorf("request %+v", asked)
	}
	wantMsgs := []provider.Message{user("Task: make TestAdd pass"), user("the test is in calc_test.go")}
	if !slices.EqualFunc(asked.Messages, wantMsgs, func(a, b provider.Message) bool {
		return a.Role == b.Role && a.Content == b.Content && len(a.ToolCalls) == 0
	}) {
		t.Errorf("messages %s", dump(asked.Messages))
	}
	if len(asked.Tools) != 1 || asked.Tools[0].Name != "run" || asked.Tools[0].Description != "Runs a command." || string(asked.Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("tools %+v", asked.Tools)
	}

	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Turn != nil || st.LastAgent != "coder" || st.Usage.ByAgent["coder"].Calls != 1 || len(st.Tools) != 2 {
		t.Fatalf("state: turn %+v last agent %q usage %+v tools %d", st.Turn, st.LastAgent, st.Usage.ByAgent, len(st.Tools))
	}
}

// Without a correlation on the request the turn ID correlates the turn's
// events, and an answer without text or tool calls records no chunk.
func TestWorkerCorrelatesByTurnWithoutACorrelation(t *testing.T) {
	r := setup(t, "")
	m := answering(provider.Response{StopReason: provider.StopEndTurn, TokensIn: 5, TokensOut: 0})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-x", "coder")
	r.end(t, req)
	got := caused(r.log(t, "s1"), req)
	if want := []string{events.TypeModelCalled, events.TypeTurnCompleted}; !slices.Equal(typesOf(got), want) {
		t.Fatalf("events %v, want %v", typesOf(got), want)
	}
	for _, ev := range got {
		if ev.Correlation != "turn-x" {
			t.Errorf("%s correlation %q", ev.Type, ev.Correlation)
		}
	}
	if called := decode[events.ModelCalled](t, got[0]); called.Model != "gpt-test" || called.RequestRef != "" || called.ResponseRef != "" {
		t.Errorf("model call %+v: the agent's model, no bodies", called)
	}
}

func providerError(status int, retryable bool, msg string) error {
	return &provider.Error{Provider: "fake", Status: status, Retryable: retryable, Message: msg}
}

// Retryable failures are retried; each failed attempt is an event, in order,
// before the answer, and the model call records which attempt answered.
func TestWorkerRecordsRetriedModelAttempts(t *testing.T) {
	r := setup(t, "")
	m := &model{answer: func(n int) (provider.Response, error) {
		switch n {
		case 1:
			return provider.Response{}, providerError(http.StatusServiceUnavailable, true, "overloaded")
		case 2:
			return provider.Response{}, providerError(http.StatusTooManyRequests, true, "rate limited")
		}
		return provider.Response{Content: "done", StopReason: provider.StopEndTurn, TokensIn: 3, TokensOut: 1}, nil
	}}
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: provider.Retry{MaxAttempts: 4, Base: time.Millisecond, Max: time.Millisecond}}, quiet), quiet)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	if end := r.end(t, req); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}
	got := caused(r.log(t, "s1"), req)
	want := []string{events.TypeModelCallFailed, events.TypeModelCallFailed, events.TypeChunkAppended, events.TypeModelCalled, events.TypeTurnCompleted}
	if !slices.Equal(typesOf(got), want) {
		t.Fatalf("events %v, want %v", typesOf(got), want)
	}
	for i, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		f := decode[events.ModelCallFailed](t, got[i])
		if f.Attempt != i+1 || f.Status != status || f.TurnID != "turn-1" || f.Agent != "coder" || f.Provider != "openai" ||
			f.Model != "gpt-test" || !strings.Contains(f.Error, []string{"overloaded", "rate limited"}[i]) || f.RetryInMS < 0 {
			t.Errorf("attempt %d: %+v", i+1, f)
		}
		if got[i].ID != events.DerivedID(worker.Durable, req.ID, fmt.Sprintf("attempt-%d", i+1)) {
			t.Errorf("attempt %d has id %s", i+1, got[i].ID)
		}
	}
	if called := decode[events.ModelCalled](t, got[3]); called.Attempt != 3 {
		t.Errorf("model call %+v, want attempt 3", called)
	}
	if m.calls() != 3 {
		t.Errorf("%d model calls, want 3", m.calls())
	}
	st, _ := r.c.State(context.Background(), "s1")
	if st.Counts.ModelFailures != 2 || st.Counts.ModelCalls != 1 || st.Counts.Turns != 1 {
		t.Errorf("counts %+v", st.Counts)
	}
}

// failures are model failures that end a turn: one not worth retrying, and
// retryable ones past the retry policy (fastRetry: 3 attempts).
var failures = []struct {
	name     string
	err      func(n int) error
	statuses []int // of the rath.model.call.failed events
	message  string
}{
	{
		name:     "permanent",
		err:      func(int) error { return providerError(http.StatusBadRequest, false, "context too long") },
		statuses: []int{http.StatusBadRequest},
		message:  "context too long",
	},
	{
		name:     "retries exhausted",
		err:      func(int) error { return providerError(http.StatusBadGateway, true, "bad gateway") },
		statuses: []int{http.StatusBadGateway, http.StatusBadGateway, http.StatusBadGateway},
		message:  "bad gateway",
	},
	{
		name:     "not a provider error",
		err:      func(int) error { return errors.New("no route to model") },
		statuses: []int{0},
		message:  "no route to model",
	},
}

// A model that cannot answer fails the turn with its error, after recording
// every attempt; the failure ends the turn, so nothing is retried later.
func TestWorkerFailsTheTurnWhenTheModelCannotAnswer(t *testing.T) {
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			r := setup(t, "")
			m := &model{answer: func(n int) (provider.Response, error) { return provider.Response{}, tt.err(n) }}
			r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
			r.start(t, "s1")
			req := r.request(t, "s1", "turn-1", "coder")
			end := r.end(t, req)
			if end.Type != events.TypeTurnFailed {
				t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
			}
			f := decode[events.TurnFailed](t, end)
			if f.TurnID != "turn-1" || f.Agent != "coder" || !strings.Contains(f.Error, tt.message) {
				t.Errorf("failed %+v", f)
			}
			got := caused(r.log(t, "s1"), req)
			if len(got) != len(tt.statuses)+1 {
				t.Fatalf("events %v", typesOf(got))
			}
			for i, status := range tt.statuses {
				a := decode[events.ModelCallFailed](t, got[i])
				if a.Attempt != i+1 || a.Status != status || !strings.Contains(a.Error, tt.message) {
					t.Errorf("attempt %d: %+v", i+1, a)
				}
				if last := i == len(tt.statuses)-1; last && a.RetryInMS != 0 {
					t.Errorf("the last attempt says it is retried in %dms", a.RetryInMS)
				}
			}
			if m.calls() != len(tt.statuses) {
				t.Errorf("%d model calls, want %d", m.calls(), len(tt.statuses))
			}
			st, _ := r.c.State(context.Background(), "s1")
			if st.Turn != nil || st.Counts.TurnsFailed != 1 || st.Counts.ModelFailures != len(tt.statuses) || st.Counts.HandlerFailures != 0 {
				t.Errorf("turn %+v counts %+v", st.Turn, st.Counts)
			}
		})
	}
}

// rath.agent.turn.failed says how many model attempts were made.
func TestTurnFailedCountsTheAttemptsMade(t *testing.T) {
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			r := setup(t, "")
			m := &model{answer: func(n int) (provider.Response, error) { return provider.Response{}, tt.err(n) }}
			r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
			r.start(t, "s1")
			req := r.request(t, "s1", "turn-1", "coder")
			end := r.end(t, req)
			if f := decode[events.TurnFailed](t, end); f.Attempts != m.calls() || f.Attempts != len(tt.statuses) {
				t.Fatalf("turn failed after %d attempts, the model was called %d times: %+v", f.Attempts, m.calls(), f)
			}
		})
	}
}

// syncBuffer is a log sink safe for concurrent handlers.
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

// An API key reaches the provider and nothing else: not the session's
// events, not the stored model bodies, not the logs, even when the endpoint
// echoes it back in an error and in an answer.
func TestAPIKeyIsNeverStored(t *testing.T) {
	const key = "sk-rath-test-5f0c9b7e1d2a4c6f8e0b"
	var (
		mu    sync.Mutex
		calls int
		auth  []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		calls++
		n := calls
		auth = append(auth, req.Header.Get("Authorization"))
		mu.Unlock()
		echoed := req.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":{"type":"server_error","message":"upstream refused %s"}}`, echoed)
			return
		}
		args, _ := json.Marshal(`{"token":"` + key + `"}`)
		openAIAnswer(w, req, fmt.Sprintf(`"content":"you sent %s",
			"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"run","arguments":%s}}]`, echoed, args), "tool_calls")
	}))
	t.Cleanup(srv.Close)

	r := setup(t, srv.URL+"/v1/")
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The endpoint is a loopback server, allowed as the operator would.
	r.run(t, r.newWorker(t, worker.Config{Keys: map[string]string{"openai": key}, Retry: fastRetry, Endpoints: provider.Endpoints{Loopback: true}}, log), log)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	if end := r.end(t, req); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}
	mu.Lock()
	seen := slices.Clone(auth)
	mu.Unlock()
	if len(seen) != 2 || seen[0] != "Bearer "+key || seen[1] != "Bearer "+key {
		t.Fatalf("the endpoint saw %d calls with authorization %q", len(seen), seen)
	}

	// The echoes were there, scrubbed: the failed attempt and the answer.
	got := caused(r.log(t, "s1"), req)
	if want := []string{events.TypeModelCallFailed, events.TypeChunkAppended, events.TypeToolRequested, events.TypeModelCalled, events.TypeTurnCompleted}; !slices.Equal(typesOf(got), want) {
		t.Fatalf("events %v, want %v", typesOf(got), want)
	}
	if f := decode[events.ModelCallFailed](t, got[0]); !strings.Contains(f.Error, "[REDACTED]") {
		t.Errorf("failed attempt %+v: the echoed key should show as redacted", f)
	}
	called := decode[events.ModelCalled](t, got[3])
	if called.RequestRef == "" || called.ResponseRef == "" {
		t.Fatalf("model call %+v has no bodies", called)
	}

	// Everything JetStream holds: every message of every stream (events,
	// blobs, snapshots, indexes, dead letters), headers included.
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scanned := 0
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
			scanned++
			if bytes.Contains(m.Data, []byte(key)) || strings.Contains(fmt.Sprint(m.Header), key) {
				t.Errorf("stream %s message %d (%s) holds the key: %s", name, seq, m.Subject, m.Data)
			}
		}
	}
	if names.Err() != nil {
		t.Fatal(names.Err())
	}
	if scanned < len(r.log(t, "s1"))+2 {
		t.Fatalf("scanned only %d messages", scanned)
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("the logs hold the key:\n%s", logs.String())
	}
}

// A turn whose model answer is in the log already (the worker crashed after
// recording it) is finished from the log: the model is not asked again and
// nothing is recorded twice.
func TestWorkerResumesATurnFromTheLog(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	// What the worker had appended when it crashed: everything but the end.
	r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "Running the tests."}, asWorker(req, "chunk")...)
	r.emit(t, "s1", &events.ToolRequested{CallID: "call_a", Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{}`)}, asWorker(req, "tool-0")...)
	r.emit(t, "s1", &events.ToolRequested{CallID: "call_b", Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{}`)}, asWorker(req, "tool-1")...)
	r.emit(t, "s1", &events.ModelCalled{Agent: "coder", Provider: "openai", Model: "gpt-test", TokensIn: 7, TokensOut: 3,
		LatencyMS: 12, Attempt: 1, StopReason: provider.StopToolUse}, asWorker(req, "model")...)

	m := &model{answer: func(int) (provider.Response, error) {
		return provider.Response{Content: "a different answer", StopReason: provider.StopEndTurn}, nil
	}}
	w := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet)
	r.run(t, w, quiet)
	end := r.end(t, req)
	if m.calls() != 0 {
		t.Fatalf("the model was asked again (%d calls)", m.calls())
	}
	if c := decode[events.TurnCompleted](t, end); *c != (events.TurnCompleted{TurnID: "turn-1", Agent: "coder", StopReason: provider.StopToolUse, ToolCalls: 2}) {
		t.Fatalf("completed %+v", c)
	}
	want := []string{events.TypeChunkAppended, events.TypeToolRequested, events.TypeToolRequested, events.TypeModelCalled, events.TypeTurnCompleted}
	if got := caused(r.log(t, "s1"), req); !slices.Equal(typesOf(got), want) {
		t.Fatalf("events %v, want %v", typesOf(got), want)
	}

	// Delivered once more after the turn ended: nothing happens.
	before := len(r.log(t, "s1"))
	if err := w.Handle(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if after := len(r.log(t, "s1")); after != before || m.calls() != 0 {
		t.Fatalf("a redelivered request appended %d events, %d model calls", after-before, m.calls())
	}
	st, _ := r.c.State(context.Background(), "s1")
	if st.Usage.Total.Calls != 1 || st.Counts.Turns != 1 {
		t.Fatalf("usage %+v counts %+v", st.Usage.Total, st.Counts)
	}
}

// An answer is stored all or nothing: one the ledger refuses any event of
// (here a tool call without a name) leaves none of its events in the log,
// and the turn ends as failed.
func TestWorkerRecordsAnAnswerAllOrNothing(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	m := answering(provider.Response{Content: "Calling a tool.", StopReason: provider.StopToolUse, TokensIn: 4, TokensOut: 2,
		ToolCalls: []provider.ToolCall{{ID: "c1", Name: "", Arguments: json.RawMessage(`{}`)}}})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	if end := r.end(t, req); end.Type != events.TypeTurnFailed {
		t.Fatalf("turn ended with %s, want failed", end.Type)
	}
	want := []string{events.TypeTurnFailed}
	if got := caused(r.log(t, "s1"), req); !slices.Equal(typesOf(got), want) {
		t.Fatalf("events %v, want %v: part of a refused answer was stored", typesOf(got), want)
	}
}

// A turn an older worker recorded part of (its text, not its model call:
// answers were not atomic then) is ended as failed, naming why: asking the
// model again could leave two answers in the log.
func TestWorkerFailsAHalfRecordedTurn(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: "All done."}, asWorker(req, "chunk")...)
	m := answering(provider.Response{Content: "All done.", StopReason: provider.StopEndTurn, TokensIn: 4, TokensOut: 2})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	end := r.end(t, req)
	if end.Type != events.TypeTurnFailed {
		t.Fatalf("turn ended with %s, want failed", end.Type)
	}
	if f := decode[events.TurnFailed](t, end); !strings.Contains(f.Error, "part of this turn's answer was recorded") {
		t.Fatalf("failed with %q", f.Error)
	}
	if m.calls() != 0 {
		t.Fatalf("%d model calls, want none", m.calls())
	}
}

// A crash after the model call was recorded but before its tool calls were
// must not lose them: a turn that ended for tool use asks for its tools.
func TestWorkerResumeKeepsTheAnswersToolCalls(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	m := answering(toolUse)
	// The first worker's answer was toolUse; it crashed after recording the
	// call, before the first tool request.
	r.emit(t, "s1", &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: toolUse.Content}, asWorker(req, "chunk")...)
	r.emit(t, "s1", &events.ModelCalled{Agent: "coder", Provider: "openai", Model: toolUse.Model, TokensIn: toolUse.TokensIn,
		TokensOut: toolUse.TokensOut, Attempt: 1, StopReason: toolUse.StopReason}, asWorker(req, "model")...)
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	end := r.end(t, req)
	if end.Type == events.TypeTurnFailed {
		return // failing the turn visibly is an acceptable way out
	}
	c := decode[events.TurnCompleted](t, end)
	requested := 0
	for _, ev := range caused(r.log(t, "s1"), req) {
		if ev.Type == events.TypeToolRequested {
			requested++
		}
	}
	if c.ToolCalls != requested || (c.StopReason == provider.StopToolUse && requested == 0) {
		t.Fatalf("turn completed %+v with %d tool requests: the answer's tool calls are lost", c, requested)
	}
}

// Only the turn in flight is taken: a request superseded by a newer one, or
// whose turn has ended, is acknowledged without effect.
func TestWorkerIgnoresTurnsNotInFlight(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	done := r.request(t, "s1", "turn-done", "coder")
	r.emit(t, "s1", &events.TurnCompleted{TurnID: "turn-done", Agent: "coder"})
	old := r.request(t, "s1", "turn-old", "researcher")
	current := r.request(t, "s1", "turn-new", "coder")

	m := answering(provider.Response{Content: "hi", StopReason: provider.StopEndTurn, TokensIn: 1, TokensOut: 1})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	// One session's events are handled in order: once the newest request's
	// turn has ended, the older ones have been handled.
	if end := r.end(t, current); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}
	log := r.log(t, "s1")
	for _, req := range []events.Stored{done, old} {
		if got := caused(log, req); len(got) != 0 {
			t.Errorf("request %s caused %v", req.ID, typesOf(got))
		}
	}
	if reqs := m.requests(); len(reqs) != 1 || reqs[0].Agent != "coder" {
		t.Fatalf("model requests %+v", reqs)
	}
}

// A turn the worker cannot take at all fails with the reason, without a
// model call.
func TestWorkerFailsTurnsItCannotTake(t *testing.T) {
	r := setup(t, "")
	m := answering(provider.Response{Content: "hi"})
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)

	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "reviewer")
	end := r.end(t, req)
	if f := decode[events.TurnFailed](t, end); !strings.Contains(f.Error, `agent "reviewer" is not in workflow worker-test`) || f.Attempts != 0 {
		t.Errorf("failed %+v", f)
	}

	if _, err := r.c.Start(context.Background(), "s2", events.SessionStarted{Task: "no workflow"}); err != nil {
		t.Fatal(err)
	}
	req = r.request(t, "s2", "turn-1", "coder")
	if f := decode[events.TurnFailed](t, r.end(t, req)); f.Error != "session runs no workflow" {
		t.Errorf("failed %+v", f)
	}
	if m.calls() != 0 {
		t.Fatalf("%d model calls", m.calls())
	}
}

// A turn whose tools are not registered yet (a tool runner still starting)
// waits for them, and the model then sees every tool its workflow gives it;
// a tool that does not come in time fails the turn transiently, before
// anything is asked or stored but the wait itself: pending work naming the
// tool, which the session shows until the tool is registered.
func TestTurnWaitsForItsTools(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupUnregistered(t, nc, "testdata/coder.yaml", "")
	ctx := context.Background()
	m := answering(toolUse)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	runnerUp(t, r.store) // the tool is missing, not late

	impatient := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry, ToolWait: 50 * time.Millisecond, ToolGrace: time.Millisecond}, quiet)
	err := impatient.Handle(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "tool run of agent coder is not registered") {
		t.Fatalf("Handle = %v, want a transient error naming the unregistered tool", err)
	}
	if got := typesOf(caused(r.log(t, "s1"), req)); m.calls() != 0 || !slices.Equal(got, []string{events.TypeWorkPending}) {
		t.Fatalf("the turn went ahead without its tool: %d model calls, events %v", m.calls(), got)
	}
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := st.Pending["tool-wait-turn-1"]; !ok || p.Kind != worker.WorkKindTool || !strings.Contains(p.Description, "turn turn-1 of coder waits for tool run") {
		t.Fatalf("pending work while the turn waits: %+v", st.Pending)
	}

	w := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet)
	done := make(chan error, 1)
	go func() { done <- w.Handle(ctx, req) }()
	if err := r.store.PutTool(ctx, eventstore.ToolSpec{Name: "run", Description: "Runs a command.",
		Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Handle, the tool registered while it waited: %v", err)
	}
	if reqs := m.requests(); len(reqs) != 1 || len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != "run" {
		t.Fatalf("model asked %+v, want once, with the tool run", reqs)
	}
	if st, err = r.c.State(ctx, "s1"); err != nil || len(st.Pending) != 0 {
		t.Fatalf("pending work once the tool came: %+v, %v", st.Pending, err)
	}
}

// A turn that gave up waiting for a tool (the consumer's last attempt
// failed) ends, and so does its wait: the session shows nothing pending.
func TestGivenUpWaitForAToolIsSettled(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupUnregistered(t, nc, "testdata/coder.yaml", "")
	ctx := context.Background()
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	runnerUp(t, r.store)
	w := r.newWorker(t, worker.Config{Override: override(answering(toolUse)), Retry: fastRetry, ToolWait: 50 * time.Millisecond, ToolGrace: time.Millisecond}, quiet)
	herr := w.Handle(ctx, req)
	if herr == nil {
		t.Fatal("the turn went ahead without its tool")
	}
	recorded := false
	gaveUp := w.GaveUp(func(context.Context, events.Stored, events.HandlerFailed) error { recorded = true; return nil })
	if err := gaveUp(ctx, req, events.HandlerFailed{Handler: "agent-worker", EventID: req.ID, EventType: req.Type, Attempts: 5, Error: herr.Error()}); err != nil || !recorded {
		t.Fatalf("GaveUp: %v (recorded %v)", err, recorded)
	}
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 0 || st.Turn != nil {
		t.Fatalf("after giving up: pending %+v, turn %+v", st.Pending, st.Turn)
	}
	if got := typesOf(caused(r.log(t, "s1"), req)); !slices.Equal(got, []string{events.TypeWorkPending, events.TypeTurnFailed, events.TypeWorkDone}) {
		t.Fatalf("the turn's events: %v", got)
	}
}

// A tool of a declared MCP server waits for the tool runner to list the
// server (it does when it handles the session's start, which races the
// first turn) as a built-in tool waits for a starting runner; it failed at
// once, and the consumer's short retries gave up on a runner still starting.
func TestTurnWaitsForItsMCPServersTools(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupUnregistered(t, nc, "testdata/mcp.yaml", "")
	ctx := context.Background()
	m := answering(toolUse)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")

	impatient := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry, ToolWait: time.Millisecond}, quiet)
	// It waited its ToolWait, as for any tool, before failing transiently.
	if err := impatient.Handle(ctx, req); err == nil || !strings.Contains(err.Error(), "tool calc.add of MCP server calc is not registered yet (the tool runner has not listed the server's tools within 1ms)") {
		t.Fatalf("Handle = %v, want a transient error naming the server's tool after the wait", err)
	}

	w := r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet)
	done := make(chan error, 1)
	go func() { done <- w.Handle(ctx, req) }()
	if err := r.store.PutTool(ctx, eventstore.ToolSpec{Name: "calc.add", Description: "Adds.",
		Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Handle, the tool registered while it waited: %v", err)
	}
	if reqs := m.requests(); len(reqs) != 1 || len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != "calc__add" {
		t.Fatalf("model asked %+v, want once, with the tool calc__add", reqs)
	}
}

// A model that reuses a call ID the session has already (a scripted model
// does after a compaction) gets its call recorded under an ID of the turn:
// otherwise the old call's result would be taken for the new call's.
func TestWorkerRenamesAReusedToolCallID(t *testing.T) {
	r := setup(t, "")
	r.start(t, "s1")
	r.emit(t, "s1", &events.ToolRequested{CallID: "call_a", Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{}`)})
	r.emit(t, "s1", &events.ToolCompleted{CallID: "call_a", Tool: "run", Result: "ok"})
	req := r.request(t, "s1", "turn-1", "coder")
	r.run(t, r.newWorker(t, worker.Config{Override: override(answering(toolUse)), Retry: fastRetry}, quiet), quiet)
	if end := r.end(t, req); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}
	var ids []string
	for _, ev := range caused(r.log(t, "s1"), req) {
		if ev.Type == events.TypeToolRequested {
			ids = append(ids, decode[events.ToolRequested](t, ev).CallID)
		}
	}
	if want := []string{"turn-1-0", "turn-1-1"}; !slices.Equal(ids, want) {
		t.Fatalf("tool calls recorded as %v, want %v", ids, want)
	}
}

// A turn of an agent the workflow declares served is a program's
// (pkg/agentserver): the worker asks no model and records nothing, however
// often the request is delivered.
func TestWorkerLeavesServedAgentsAlone(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupFile(t, nc, "testdata/served.yaml", "")
	m := answering(provider.Response{Content: "never", StopReason: provider.StopEndTurn})
	w := r.newWorker(t, worker.Config{Override: override(m)}, quiet)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "planner")
	for range 2 {
		if err := w.Handle(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := caused(r.log(t, "s1"), req); len(got) != 0 || m.calls() != 0 {
		t.Fatalf("the worker recorded %v and asked the model %d times", typesOf(got), m.calls())
	}
}

// runnerUp registers a built-in tool no agent of the tests uses, as a tool
// runner that is up does: a tool still missing then is missing, not late.
func runnerUp(t *testing.T, store *eventstore.Store) {
	t.Helper()
	if err := store.PutTool(context.Background(), eventstore.ToolSpec{Name: "read_file", Description: "Reads a file.",
		Parameters: json.RawMessage(`{"type":"object"}`), Server: "tool-runner"}); err != nil {
		t.Fatal(err)
	}
}

// A turn that comes while the runtime starts (no tool runner has
// registered yet) waits for its tools without recording anything: what a
// session records must not depend on that race, which a replay would see
// as a divergence.
func TestStartupWaitForToolsIsNotRecorded(t *testing.T) {
	_, nc := natstest.Start(t)
	r := setupUnregistered(t, nc, "testdata/coder.yaml", "")
	ctx := context.Background()
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	w := r.newWorker(t, worker.Config{Override: override(answering(toolUse)), Retry: fastRetry, ToolWait: 50 * time.Millisecond, ToolGrace: time.Millisecond}, quiet)
	if err := w.Handle(ctx, req); err == nil || !strings.Contains(err.Error(), "is not registered") {
		t.Fatalf("Handle = %v", err)
	}
	if got := caused(r.log(t, "s1"), req); len(got) != 0 {
		t.Fatalf("a wait while no runner is up recorded %v", typesOf(got))
	}
}
