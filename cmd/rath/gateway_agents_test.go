package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/fakeprovider"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// TestAgentsSDKThroughTheGateway (issue 33): an agent built with an agent
// framework from npm — examples/agents-js, the OpenAI Agents SDK with its
// Chat Completions model, one tool, two user turns — unchanged but for its
// base URL and key, runs through rath up's model gateway against a local
// fake provider. The session records each message once, the tool calls as
// the caller's and every model call; the same program run against
// /replay/<session>/v1 prints the same answers from the record, asking the
// provider nothing and recording nothing; a fork after the first model call,
// run with another model, is answered from the record before its fork point
// and live after it, recorded in the fork. Streaming, it is recorded and
// replayed alike, and a replay that differs from the record is refused,
// the framework's error naming where.
//
// Node and npm are required: without them the test fails, naming the tool
// (scripts/install-node.sh installs them); npm ci reads the registry once,
// then npm's cache.
func TestAgentsSDKThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npm ci and node on examples/agents-js")
	}
	node, npm := needTool(t, "node"), needTool(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agent := installExample(ctx, t, npm, "agents-js", "agent.mjs")

	provider := &countingProvider{h: fakeprovider.Handler()}
	srv := httptest.NewServer(provider)
	defer srv.Close()

	cfg := gatewayRuntime(t)
	gwURL, natsURL := upWithGateway(t, cfg, srv.URL)
	// The operator adds a tenant's user to the running rath up and mints
	// it a token, as the docs say.
	token, alice := gatewayUser(ctx, t, filepath.Join(cfg.Data, "creds"))

	const id, fork = "glossary", "glossary-b"
	// try runs the program against base, asking for model, streaming or
	// not; run fails the test unless it printed its answers.
	try := func(base, model string, stream bool) (agentOutput, string, error) {
		cmd := exec.CommandContext(ctx, node, agent)
		cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+base, "OPENAI_API_KEY="+token, "MODEL="+model, fmt.Sprintf("STREAM=%d", btoi(stream)))
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
	run := func(base, model string, stream bool) agentOutput {
		t.Helper()
		got, out, err := try(base, model, stream)
		if err != nil {
			t.Fatalf("node agent.mjs against %s (stream %v): %v\n%s", base, stream, err, out)
		}
		return got
	}
	want := []string{
		"The tool said: rath: an event-sourced runtime for agent sessions",
		"The tool said: jetstream: the persistence layer of NATS",
	}

	// The session: the program's two turns, four model calls.
	got := run(gwURL+"/s/"+id+"/v1", "gpt-a", false)
	if !slices.Equal(got.Answers, want) {
		t.Fatalf("the agent answered %q, want %q", got.Answers, want)
	}
	if n := provider.count(); n != 4 {
		t.Errorf("the provider was asked %d times, want 4 (two turns of a tool call and an answer)", n)
	}
	// The gateway's first call made the server load alice, added since
	// rath up started: she connects now.
	c := connectAs(t, natsURL, alice)
	log, err := c.Log(ctx, id, client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	const sys = "chunk system: Answer with the glossary: look every term up before you answer."
	wantLog := []string{
		"started",
		sys,
		"chunk user: What is Rath?",
		`tool call_2 lookup {"input":"What is Rath?"} by agent, run by caller`,
		"model openai gpt-a 20+5 tool_calls",
		"done call_2 lookup: rath: an event-sourced runtime for agent sessions",
		"chunk assistant: The tool said: rath: an event-sourced runtime for agent sessions",
		"model openai gpt-a 40+5 stop",
		"chunk user: And JetStream?",
		`tool call_6 lookup {"input":"And JetStream?"} by agent, run by caller`,
		"model openai gpt-a 60+5 tool_calls",
		"done call_6 lookup: jetstream: the persistence layer of NATS",
		"chunk assistant: The tool said: jetstream: the persistence layer of NATS",
		"model openai gpt-a 80+5 stop",
	}
	checkLog(t, id, log, false, wantLog)
	head := log[len(log)-1].Seq

	// The same program against the record: the same answers, nothing asked
	// of the provider, nothing recorded.
	got = run(gwURL+"/replay/"+id+"/v1", "gpt-a", false)
	if !slices.Equal(got.Answers, want) {
		t.Errorf("the replay answered %q, want %q", got.Answers, want)
	}
	if n := provider.count(); n != 4 {
		t.Errorf("the replay asked the provider %d times, want none", n-4)
	}
	if st, err := c.State(ctx, id); err != nil || st.Seq != head {
		t.Errorf("after the replay the session's head is %v (%v), want %d: the replay recorded something", st.Seq, err, head)
	}

	// A fork after the first model call, run with another model: that call
	// is answered from the record, the three after it live.
	at := log[4].Seq
	if log[4].Type != events.TypeModelCalled {
		t.Fatalf("event %d is %s, want the first model call", at, log[4].Type)
	}
	rathOK(ctx, t, "--nats", natsURL, "--creds", alice, "fork", id, "--at", fmt.Sprint(at), "--id", fork)
	got = run(gwURL+"/s/"+fork+"/v1", "gpt-b", false)
	if !slices.Equal(got.Answers, want) {
		t.Errorf("the fork answered %q, want %q", got.Answers, want)
	}
	if models := provider.models(); !slices.Equal(models[4:], []string{"gpt-b", "gpt-b", "gpt-b"}) {
		t.Errorf("the fork asked the provider for %q, want the three calls after its fork point (gpt-b)", models[4:])
	}
	flog, err := c.Log(ctx, fork, client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var wantFork []string
	for _, s := range wantLog[:5] {
		wantFork = append(wantFork, id+" "+s)
	}
	wantFork = append(wantFork, fork+" forked from "+id)
	for _, s := range wantLog[5:] {
		wantFork = append(wantFork, fork+" "+strings.Replace(s, "gpt-a", "gpt-b", 1))
	}
	checkLog(t, fork, flog, true, wantFork)

	// The same program, streaming: recorded alike, replayed streaming; a
	// replay that does not stream differs from the record, and the
	// framework's error says where.
	const streamed = "glossary-s"
	if got := run(gwURL+"/s/"+streamed+"/v1", "gpt-s", true); !slices.Equal(got.Answers, want) {
		t.Errorf("the streaming agent answered %q, want %q", got.Answers, want)
	}
	if models := provider.models(); !slices.Equal(models[7:], []string{"gpt-s", "gpt-s", "gpt-s", "gpt-s"}) {
		t.Errorf("the streaming agent asked the provider for %q, want 4 calls of gpt-s", models[7:])
	}
	streamedLog, err := c.Log(ctx, streamed, client.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var wantStreamed []string
	for _, s := range wantLog {
		wantStreamed = append(wantStreamed, strings.Replace(s, "gpt-a", "gpt-s", 1))
	}
	checkLog(t, streamed, streamedLog, false, wantStreamed)
	if got := run(gwURL+"/replay/"+streamed+"/v1", "gpt-s", true); !slices.Equal(got.Answers, want) {
		t.Errorf("the streaming replay answered %q, want %q", got.Answers, want)
	}
	_, said, err := try(gwURL+"/replay/"+streamed+"/v1", "gpt-s", false)
	if err == nil || !strings.Contains(said, "stream: recorded true, got false") {
		t.Errorf("a replay that does not stream a streamed record: %v, said %q; want it refused, naming the stream", err, said)
	}
	if n := provider.count(); n != 11 {
		t.Errorf("the provider was asked %d times in all, want 11 (4, none to replay, 3 in the fork, 4 streaming)", n)
	}
	if st, err := c.State(ctx, streamed); err != nil || st.Seq != streamedLog[len(streamedLog)-1].Seq {
		t.Errorf("after its replays the streamed session's head is %v (%v), want %d", st.Seq, err, streamedLog[len(streamedLog)-1].Seq)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// agentOutput is what examples/agents-js/agent.mjs prints.
type agentOutput struct {
	Model   string   `json:"model"`
	Answers []string `json:"answers"`
}

// countingProvider serves the fake provider and keeps the model each
// request asked for.
type countingProvider struct {
	h     http.Handler
	mu    sync.Mutex
	asked []string
}

func (p *countingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	if _, err := body.ReadFrom(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct{ Model string }
	_ = json.Unmarshal(body.Bytes(), &req)
	p.mu.Lock()
	p.asked = append(p.asked, req.Model)
	p.mu.Unlock()
	r.Body = io.NopCloser(&body)
	p.h.ServeHTTP(w, r)
}

func (p *countingProvider) count() int { return len(p.models()) }

func (p *countingProvider) models() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

// checkLog compares a session's log, an event a line, with want, and says
// which message it recorded twice. With bySession each line begins with
// the session that recorded it (a fork's log holds its parent's events up
// to the fork point).
func checkLog(t *testing.T, id string, log []events.Stored, bySession bool, want []string) {
	t.Helper()
	var got []string
	seen := map[string]uint64{}
	for _, ev := range log {
		if ev.Actor != "acme/alice" {
			t.Errorf("%s event %d (%s) is by %q, want acme/alice", id, ev.Seq, ev.Type, ev.Actor)
		}
		s := summarize(t, ev)
		if strings.HasPrefix(s, "chunk ") || strings.HasPrefix(s, "tool ") || strings.HasPrefix(s, "done ") {
			if first, ok := seen[s]; ok {
				t.Errorf("%s recorded %q twice: events %d and %d", id, s, first, ev.Seq)
			}
			seen[s] = ev.Seq
		}
		if bySession {
			s = ev.Session + " " + s
		}
		got = append(got, s)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s's log:\n  %s\nwant:\n  %s", id, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// summarize is an event as checkLog compares it.
func summarize(t *testing.T, ev events.Stored) string {
	t.Helper()
	d, err := ev.Decode()
	if err != nil {
		t.Fatalf("event %d: %v", ev.Seq, err)
	}
	switch d := d.(type) {
	case *events.SessionStarted:
		return "started"
	case *events.SessionForked:
		return "forked from " + d.Parent
	case *events.ChunkAppended:
		return "chunk " + d.Role + ": " + d.Content
	case *events.ToolRequested:
		return fmt.Sprintf("tool %s %s %s by %s, run by %s", d.CallID, d.Tool, d.Arguments, d.Agent, d.Runner)
	case *events.ToolCompleted:
		return fmt.Sprintf("done %s %s: %s", d.CallID, d.Tool, d.Result)
	case *events.ModelCalled:
		if d.RequestRef == "" || d.ResponseRef == "" {
			t.Errorf("event %d, a model call, keeps no request or response body", ev.Seq)
		}
		return fmt.Sprintf("model %s %s %d+%d %s", d.Provider, d.Model, d.TokensIn, d.TokensOut, d.StopReason)
	}
	return ev.Type
}

// installExample copies examples/<name>'s package.json, package-lock.json,
// .npmrc and files into a temporary directory and runs npm ci there (the
// source tree gets no node_modules; npm's cache makes a second run read
// nothing from the registry), and returns the path of the copy of main.
func installExample(ctx context.Context, t *testing.T, npm, name, main string) string {
	t.Helper()
	return filepath.Join(npmInstall(ctx, t, npm, filepath.Join("..", "..", "examples", name), main), main)
}

// npmInstall copies the npm package in src (its package.json,
// package-lock.json, .npmrc and the files named) to a directory of the
// test's and runs npm ci there: exactly the lock file, and no node_modules
// in the source tree (npm's cache makes a second run read nothing from the
// registry). It returns the directory.
func npmInstall(ctx context.Context, t *testing.T, npm, src string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range append([]string{"package.json", "package-lock.json", ".npmrc"}, files...) {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ci := exec.CommandContext(ctx, npm, "ci", "--prefer-offline")
	ci.Dir = dir
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of %s: %v\n%s", src, err, out)
	}
	return dir
}

// needTool returns the path of a program the test needs, failing the test
// when it is not installed.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (%v): this test runs Node 20 or later and npm (examples/agents-js, an MCP server from npm); scripts/install-node.sh installs them with apt-get", name, err)
	}
	return p
}

// connectAs returns a client acting with the credentials file creds.
func connectAs(t *testing.T, url, creds string) *client.Client {
	t.Helper()
	opts, who, err := client.Credentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.As(who))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
