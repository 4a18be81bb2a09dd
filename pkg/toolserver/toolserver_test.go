package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// wordCount is the tool under test; calls counts its runs.
func wordCount(calls *atomic.Int32) Tool {
	return Tool{
		Name:        "word_count",
		Description: "Count the words of a text.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Handle: func(ctx context.Context, args json.RawMessage) (string, error) {
			calls.Add(1)
			var in struct{ Text string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			if in.Text == "boom" {
				return "", errors.New("cannot count an explosion")
			}
			if in.Text == "panic" {
				panic("counting panicked")
			}
			if c, ok := CallFrom(ctx); !ok || c.CallID == "" || c.Attempt != 1 {
				return "", errors.New("no call in the context")
			}
			return strconv.Itoa(len(strings.Fields(in.Text))), nil
		},
	}
}

type rig struct {
	nc    *nats.Conn
	c     *client.Client
	store *eventstore.Store
	// worker proposes calls as the agent worker does, which decided their
	// gates (a call anyone else proposes waits for the tool runner's
	// decision: gate_test.go).
	worker *client.Client
}

// setup runs a ledger; the tool server is the test's to start.
func setup(t *testing.T) *rig {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventstore.Open(context.Background(), nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	worker, err := client.New(nc, client.As(events.Service("agent-worker")))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{nc: nc, c: c, store: store, worker: worker}
}

// serve runs Serve until the test ends, and checks it returns nil then.
func (r *rig) serve(t *testing.T, tool Tool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, r.nc, tool, WithLogger(quiet)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
}

func (r *rig) request(t *testing.T, session, callID, tool, args string) events.Stored {
	t.Helper()
	req := &events.ToolRequested{CallID: callID, Tool: tool, Agent: "a", Arguments: json.RawMessage(args)}
	ack, err := r.worker.Emit(context.Background(), session, req)
	if err != nil {
		t.Fatal(err)
	}
	log, err := r.c.Log(context.Background(), session, client.Range{From: ack.Seq, To: ack.Seq})
	if err != nil || len(log) != 1 {
		t.Fatalf("read back request: %v", err)
	}
	return log[0]
}

// finish waits for the call to complete or fail, and returns the chunk and
// the last event of the call.
func (r *rig) finish(t *testing.T, session, callID string) (*events.ChunkAppended, any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var chunk *events.ChunkAppended
	var last any
	found := errors.New("found")
	err := r.c.Watch(ctx, session, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		switch d := d.(type) {
		case *events.ChunkAppended:
			if d.ToolCallID == callID {
				chunk = d
			}
		case *events.ToolCompleted:
			if d.CallID == callID {
				last = d
				return found
			}
		case *events.ToolFailed:
			if d.CallID == callID {
				last = d
				return found
			}
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("call %s did not finish: %v", callID, err)
	}
	if chunk == nil {
		t.Fatalf("call %s finished without a tool chunk before it", callID)
	}
	return chunk, last
}

func waitRegistered(t *testing.T, store *eventstore.Store, name string) eventstore.ToolSpec {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spec, err := store.Tool(context.Background(), name)
		if err == nil {
			return spec
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not registered: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A call requested in a session is served: started, the result as a tool
// chunk, then the completion, from the tool's own source.
func TestServeRunsRequestedCalls(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	spec := waitRegistered(t, r.store, "word_count")
	if spec.Server != "tool-word_count" || !strings.Contains(string(spec.Parameters), `"text"`) {
		t.Fatalf("registered %+v", spec)
	}
	if _, err := r.c.Start(context.Background(), "s1", events.SessionStarted{Task: "count"}); err != nil {
		t.Fatal(err)
	}
	r.request(t, "s1", "other", "read_file", `{"path":"x"}`) // not ours: left alone
	r.request(t, "s1", "c1", "word_count", `{"text":"one two  three"}`)
	chunk, last := r.finish(t, "s1", "c1")
	done, ok := last.(*events.ToolCompleted)
	if !ok || done.Result != "3" || done.Attempt != 1 || done.ExitCode != 0 {
		t.Fatalf("completion %#v", last)
	}
	if chunk.Role != events.RoleTool || chunk.Content != "3" || chunk.Agent != "a" {
		t.Fatalf("chunk %+v", chunk)
	}
	st, err := r.c.State(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if call := st.Tools["other"]; call.Status != "requested" || len(call.Seqs) != 1 {
		t.Fatalf("another tool's call was touched: %+v", call)
	}
	log, err := r.c.Log(context.Background(), "s1", client.Range{From: 1, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range log {
		if ev.Source == Source("word_count") {
			types = append(types, ev.Type)
		}
	}
	want := []string{events.TypeToolStarted, events.TypeChunkAppended, events.TypeToolCompleted}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("tool server appended %v, want %v", types, want)
	}
}

// A call of the tool that its caller runs (events.RunnerCaller) is not the
// server's: it stays as requested, with nothing recorded about it, while a
// call of the tool after it runs.
func TestServeLeavesCallerRunCalls(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	waitRegistered(t, r.store, "word_count")
	ctx := context.Background()
	if _, err := r.c.Start(ctx, "s1", events.SessionStarted{Task: "count"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Emit(ctx, "s1", &events.ToolRequested{CallID: "mine", Tool: "word_count", Agent: "a",
		Arguments: json.RawMessage(`{"text":"one two"}`), Runner: events.RunnerCaller}); err != nil {
		t.Fatal(err)
	}
	r.request(t, "s1", "c1", "word_count", `{"text":"one two  three"}`)
	if _, last := r.finish(t, "s1", "c1"); last.(*events.ToolCompleted).Result != "3" {
		t.Fatalf("completion %#v", last)
	}
	st, err := r.c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if call := st.Tools["mine"]; call.Status != session.ToolRequested || len(call.Seqs) != 1 || call.Runner != events.RunnerCaller {
		t.Fatalf("the caller's call was touched: %+v", call)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("Handle ran %d times, want once", n)
	}
}

// Bad arguments, an error and a panic of Handle each fail the call, and
// the model reads why.
func TestFailedCallsSayWhy(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	waitRegistered(t, r.store, "word_count")
	if _, err := r.c.Start(context.Background(), "s2", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, args, want string }{
		{"bad", `{"text":5}`, "word_count: invalid arguments: /text: got number, want string"},
		{"extra", `{"text":"a","x":1}`, "invalid arguments: /: additional properties 'x' not allowed"},
		{"boom", `{"text":"boom"}`, "cannot count an explosion"},
		{"panic", `{"text":"panic"}`, "tool word_count panicked: counting panicked"},
	} {
		r.request(t, "s2", c.id, "word_count", c.args)
		chunk, last := r.finish(t, "s2", c.id)
		failed, ok := last.(*events.ToolFailed)
		if !ok || !strings.Contains(failed.Error, c.want) || chunk.Content != "error: "+failed.Error {
			t.Errorf("%s: %#v, chunk %q; want an error with %q", c.id, last, chunk.Content, c.want)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Handle ran %d times, want 2 (bad arguments never reach it)", n)
	}
}

// A session's workflow decides which agents may call the tool, read from
// its bundle's tools table (the server does not parse the spec); a bundle
// without the table refuses every call.
func TestWorkflowAllowList(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	r.serve(t, wordCount(&calls))
	bundle := func(spec string) string {
		wf, err := workflow.Parse([]byte(spec), "w.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return testrig.Bundle(t, r.store, wf)
	}
	const rules = "rules:\n  - {name: r, when: \"false\", route: {agent: a}}\n"
	noTable, err := r.store.PutBlob(context.Background(), []byte(`{"path":"w.yaml","spec":"bmFtZTogdwo="}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, ref, want string // want: "" for a completed call
	}{
		{"tool not listed", bundle("name: w\nagents:\n  - {name: a, provider: openai, model: m, tools: [read_file]}\n" + rules), "tool word_count is not allowed for agent a"},
		{"tool listed", bundle("name: w\nagents:\n  - {name: a, provider: openai, model: m, tools: [word_count]}\n" + rules), ""},
		{"agent not in the workflow", bundle("name: w\nagents:\n  - {name: b, provider: openai, model: m, tools: [word_count]}\nrules:\n  - {name: r, when: \"false\", route: {agent: b}}\n"), `agent "a" is not in workflow w`},
		{"bundle without a tools table", noTable, "has no tools table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("allow%d", i)
			if _, err := r.c.Start(context.Background(), id, events.SessionStarted{Workflow: "w", WorkflowRef: tc.ref}); err != nil {
				t.Fatal(err)
			}
			before := calls.Load()
			r.request(t, id, "c", "word_count", `{"text":"a"}`)
			_, last := r.finish(t, id, "c")
			if tc.want == "" {
				if _, ok := last.(*events.ToolCompleted); !ok || calls.Load() != before+1 {
					t.Fatalf("%#v after %d runs", last, calls.Load()-before)
				}
				return
			}
			if failed, ok := last.(*events.ToolFailed); !ok || !strings.Contains(failed.Error, tc.want) {
				t.Fatalf("%#v, want a failure with %q", last, tc.want)
			}
			if calls.Load() != before {
				t.Fatal("Handle ran for a call the workflow does not allow")
			}
		})
	}
}

// A redelivered request records nothing new and runs nothing again; a
// request whose attempt started and never ended runs again as attempt 2,
// with events of their own.
func TestRedeliveryRecordsOnce(t *testing.T) {
	r := setup(t)
	var calls atomic.Int32
	tool := wordCount(&calls)
	store, err := eventstore.Attach(context.Background(), r.nc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(r.nc, client.WithSource(Source(tool.Name)))
	schema, err := compile(tool)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: tool, durable: Durable(tool.Name), states: fold.NewCache(store, fold.CacheConfig{}), schema: schema,
		rec: evidence.New(c, store, Durable(tool.Name), ""), allow: newAllowList(store.GetBlob)}
	if _, err := r.c.Start(context.Background(), "s4", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	req := r.request(t, "s4", "c", "word_count", `{"text":"a b"}`)
	for range 2 {
		if err := s.handle(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := r.c.State(ctx, "s4")
	if calls.Load() != 1 || st.Seq != 5 || st.Tools["c"].Status != "completed" {
		t.Fatalf("after a redelivery: %d runs, head %d, call %+v", calls.Load(), st.Seq, st.Tools["c"])
	}

	// Attempt 1 started, then the server died.
	req2 := r.request(t, "s4", "c2", "word_count", `{"text":"x"}`)
	e := s.rec.Attempt(req2, &events.ToolRequested{CallID: "c2", Tool: tool.Name}, 1)
	if err := e.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	tool.Handle = func(ctx context.Context, _ json.RawMessage) (string, error) {
		c, _ := CallFrom(ctx)
		return "attempt " + strconv.Itoa(c.Attempt), nil
	}
	s.t = tool
	if err := s.handle(ctx, req2); err != nil {
		t.Fatal(err)
	}
	st, _ = r.c.State(ctx, "s4")
	if call := st.Tools["c2"]; call.Status != "completed" || call.Attempts != 2 || len(st.Chunks) == 0 || st.Chunks[len(st.Chunks)-1].Content != "attempt 2" {
		t.Fatalf("after a crash: %+v", call)
	}
}

// A name already served by another server, and names that are not a
// custom tool's, are refused before anything is registered.
func TestServeRefusesNames(t *testing.T) {
	r := setup(t)
	if err := r.store.PutTool(context.Background(), eventstore.ToolSpec{Name: "read_file", Server: "tool-runner"}); err != nil {
		t.Fatal(err)
	}
	handle := func(context.Context, json.RawMessage) (string, error) { return "", nil }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Serve(ctx, r.nc, Tool{Name: "read_file", Handle: handle}); !errors.Is(err, ErrTaken) {
		t.Errorf("built-in name: %v", err)
	}
	for _, name := range []string{"", "fs.read", "runner", "a b", strings.Repeat("x", 65)} {
		if err := Serve(ctx, r.nc, Tool{Name: name, Handle: handle}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if err := Serve(ctx, r.nc, Tool{Name: "ok", Handle: handle, Parameters: json.RawMessage(`{"type":3}`)}); err == nil {
		t.Error("invalid schema accepted")
	}
}

// Whatever a tool returns is recorded as valid UTF-8 of bounded size, the
// same in the completion and in the model's chunk: a result cut inside a
// rune at the inline limit keeps no half of it, a longer or invalid one is
// kept whole in the blob store, and an error without a message still
// fails the call.
func TestHostileResultsAreRecordedValid(t *testing.T) {
	r := setup(t)
	a := func(n int) string { return strings.Repeat("a", n) }
	results := map[string]struct {
		result, head string // head: the inline text before the blob's note
		blob         bool   // the result goes to the blob store
	}{
		"cut2":    {result: a(evidence.InlineLimit-1) + "é" + "tail", head: a(evidence.InlineLimit - 1), blob: true},
		"cut3":    {result: a(evidence.InlineLimit-2) + "€" + "tail", head: a(evidence.InlineLimit - 2), blob: true},
		"cut4":    {result: a(evidence.InlineLimit-1) + "😀" + "tail", head: a(evidence.InlineLimit - 1), blob: true},
		"limit":   {result: a(evidence.InlineLimit-3) + "€", head: a(evidence.InlineLimit-3) + "€"},
		"over":    {result: a(evidence.InlineLimit + 1), head: a(evidence.InlineLimit), blob: true},
		"invalid": {result: "ok \xff\xfe done", head: "ok \uFFFD done"},
		"empty":   {},
		"huge":    {result: a(4 << 20), head: a(evidence.InlineLimit), blob: true},
	}
	tool := Tool{
		Name:        "hostile",
		Description: "Return a hostile result.",
		Handle: func(_ context.Context, args json.RawMessage) (string, error) {
			var in struct{ Case string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			if in.Case == "silent" {
				return "", errors.New("")
			}
			return results[in.Case].result, nil
		},
	}
	r.serve(t, tool)
	waitRegistered(t, r.store, tool.Name)
	if _, err := r.c.Start(context.Background(), "h", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range results {
		t.Run(name, func(t *testing.T) {
			r.request(t, "h", name, tool.Name, `{"case":"`+name+`"}`)
			chunk, last := r.finish(t, "h", name)
			done, ok := last.(*events.ToolCompleted)
			if !ok {
				t.Fatalf("ended with %#v", last)
			}
			if !utf8.ValidString(done.Result) || chunk.Content != done.Result {
				t.Fatalf("result valid %v, chunk the same %v", utf8.ValidString(done.Result), chunk.Content == done.Result)
			}
			if !want.blob {
				if done.Result != want.head || done.ResultRef != "" {
					t.Fatalf("result %q (ref %q), want %q inline", done.Result, done.ResultRef, want.head)
				}
				return
			}
			head, note, _ := strings.Cut(done.Result, "\n… [")
			if head != want.head || note != fmt.Sprintf("%d bytes in all: %s]", len(want.result), done.ResultRef) {
				t.Fatalf("result of %d bytes ending %q, note %q; want %d bytes ending %q", len(head), head[max(len(head)-8, 0):], note, len(want.head), want.head[len(want.head)-8:])
			}
			blob, err := r.store.GetBlob(context.Background(), done.ResultRef)
			if err != nil || string(blob) != want.result {
				t.Fatalf("blob of %d bytes (%v), want the whole %d", len(blob), err, len(want.result))
			}
		})
	}
	r.request(t, "h", "silent", tool.Name, `{"case":"silent"}`)
	chunk, last := r.finish(t, "h", "silent")
	if failed, ok := last.(*events.ToolFailed); !ok || failed.Error == "" || chunk.Content != "error: "+failed.Error {
		t.Fatalf("an error without a message: %#v, chunk %q", last, chunk.Content)
	}
}
