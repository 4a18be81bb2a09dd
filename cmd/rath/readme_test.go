package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// readmeCommand is one `rath …`, `cp …` or `rm …` line of the README's
// shell blocks.
type readmeCommand struct {
	line    string // as written, continuations joined
	args    []string
	comment string
	stdout  string // "> FILE": stdout goes to FILE
	bg      bool   // "&": runs in the background until the block ends
}

// readmeCommands reads the shell blocks of the README between the headings
// from and to, and returns their rath, cp and rm commands in order.
func readmeCommands(t *testing.T, readme, from, to string) []readmeCommand {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+from+"\n")
	if !ok {
		t.Fatalf("README has no heading %q", from)
	}
	section, _, ok := strings.Cut(rest, "\n"+to+"\n")
	if !ok {
		t.Fatalf("README has no heading %q", to)
	}
	var out []readmeCommand
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		src := strings.ReplaceAll(block[1], "\\\n", " ")
		for _, line := range strings.Split(src, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "rath ") && !strings.HasPrefix(line, "cp ") && !strings.HasPrefix(line, "rm ") {
				continue
			}
			c, err := parseShell(line)
			if err != nil {
				t.Fatalf("README line %q: %v", line, err)
			}
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no rath commands between %q and %q", from, to)
	}
	return out
}

// parseShell splits a README command line as sh would: words, single and
// double quotes, a trailing comment, "> FILE" and a trailing "&".
func parseShell(line string) (readmeCommand, error) {
	c := readmeCommand{line: line}
	var words []string
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\'' || ch == '"':
			j := strings.IndexByte(line[i+1:], ch)
			if j < 0 {
				return c, errors.New("unclosed quote")
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case ch == ' ' || ch == '\t':
			end()
		case ch == '#' && !inWord:
			c.comment = strings.TrimSpace(line[i+1:])
			i = len(line)
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	end()
	if n := len(words); n > 0 && words[n-1] == "&" {
		c.bg, words = true, words[:n-1]
	}
	if n := len(words); n > 1 && words[n-2] == ">" {
		c.stdout, words = words[n-1], words[:n-2]
	}
	if words[0] == "cp" || words[0] == "rm" {
		c.args = words
	} else {
		c.args = words[1:] // without rath
	}
	return c, nil
}

// TestREADMECommands runs the README's five-minute tour and its "Agents at
// work" commands as written, in order, in a directory laid out as the
// README's user has it (the repository's examples, rath up's ./.rath/data),
// against a runtime with every service: each exits 0, or 4 where its
// comment says it is refused. It checks what the comments promise where it
// matters: replay reproduces the session started as --id fix, the what-if
// continues on another model (an OpenAI-compatible server in the test, the
// one flag added to the README's line) and prints the comparison, and diff
// compares with a branch that exists. Its rm lines remove what the commands
// wrote, so that the clone holds nothing more than rath up's ./.rath after
// them.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent loop, a replay and a what-if")
	}
	needBwrap(t)
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	tour := readmeCommands(t, readme, "## A five-minute tour", "### Agents at work")
	agents := readmeCommands(t, readme, "### Agents at work", "### The same with the plain `nats` CLI")

	model := httptest.NewServer(&fixCalcModel{})
	defer model.Close()

	// The README's user works in a clone: a copy of the example the
	// commands name, which they may change.
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "examples", "fix-calc"), os.DirFS(filepath.Join(repo, "examples", "fix-calc"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg := runtime.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Ledger.Ledger.Name = "rath-readme"
	cfg.Worker.AllowBaseURLs = []string{"openai=" + model.URL + "/v1"}
	ctx := context.Background()
	rt, err := startRuntime(ctx, cfg, "rath-readme", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	rt.StartLoop()
	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}

	// run runs one command as the README's user does: the client
	// credentials are found in ./.rath/data, as rath up wrote them. An rm
	// must name paths that exist: what the commands before it wrote.
	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(ctx)
	defer func() { stopBg(); bg.Wait() }()
	run := func(cmd readmeCommand) result {
		t.Helper()
		if cmd.args[0] == "cp" {
			if len(cmd.args) != 3 {
				t.Fatalf("%s: the test copies one file", cmd.line)
			}
			raw, err := os.ReadFile(cmd.args[1])
			if err == nil {
				err = os.WriteFile(cmd.args[2], raw, 0o644)
			}
			if err != nil {
				t.Fatalf("%s: %v", cmd.line, err)
			}
			return result{}
		}
		if cmd.args[0] == "rm" {
			for _, path := range cmd.args[1:] {
				if strings.HasPrefix(path, "-") {
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("%s: nothing to remove: %v", cmd.line, err)
				}
				if err := os.RemoveAll(path); err != nil {
					t.Fatalf("%s: %v", cmd.line, err)
				}
			}
			return result{}
		}
		var out, errb bytes.Buffer
		e := env{Args: append([]string{"--nats", rt.URL}, cmd.args...), Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
		if cmd.bg {
			e.Stdout, e.Stderr = &syncBuffer{}, &syncBuffer{}
			bg.Add(1)
			go func() { defer bg.Done(); execute(bgCtx, e) }()
			return result{}
		}
		code := execute(ctx, e)
		r := result{code: code, stdout: out.String(), stderr: errb.String()}
		if cmd.stdout != "" {
			if err := os.WriteFile(cmd.stdout, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want := exitOK
		if strings.HasPrefix(cmd.comment, "refused") {
			want = exitRefused
		}
		if r.code != want {
			t.Fatalf("%s\nexit %d, want %d\nstdout:\n%s\nstderr:\n%s", cmd.line, r.code, want, r.stdout, r.stderr)
		}
		t.Logf("%s\n%s%s", cmd.line, r.stdout, r.stderr)
		return r
	}

	for _, cmd := range tour {
		run(cmd)
	}

	var forked string
	for _, cmd := range agents {
		// The README's what-if asks OpenAI; here the test's server answers.
		if slices.Contains(cmd.args, "--fork") {
			cmd.args = append(cmd.args, "--base-url", model.URL+"/v1")
		}
		r := run(cmd)
		switch {
		case cmd.args[0] == "start" && slices.Contains(cmd.args, "--workflow"):
			// The user reads the log when the agents are done.
			waitClosed(t, c, cmd.args[2])
		case cmd.args[0] == "replay" && slices.Contains(cmd.args, "--fork"):
			_, after, found := strings.Cut(r.stderr, "what-if fork ")
			forked, _, _ = strings.Cut(after, " ")
			if !found || !strings.Contains(r.stdout, "calc.go") {
				t.Fatalf("%s: no fork named, or a comparison without calc.go:\n%s\n%s", cmd.line, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, "rath diff fix "+forked) {
				t.Errorf("%s does not say how to compare again:\n%s", cmd.line, r.stdout)
			}
		case cmd.args[0] == "replay":
			if !strings.Contains(r.stdout, "reproduced: ") {
				t.Fatalf("%s did not reproduce:\n%s", cmd.line, r.stdout)
			}
		case cmd.args[0] == "diff":
			if forked == "" || cmd.args[2] != forked || !strings.Contains(r.stdout, "B "+forked) {
				t.Fatalf("%s: compares with %q, the what-if made %q:\n%s", cmd.line, cmd.args[2], forked, r.stdout)
			}
		}
	}
	if forked == "" {
		t.Fatal("the README's Agents at work has no what-if")
	}
	// The clone as it was, and rath up's data.
	left, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if e.Name() != "examples" && e.Name() != ".rath" {
			t.Errorf("the README's commands leave %s in the clone: remove it with the rm lines", e.Name())
		}
	}
	if err := fs.WalkDir(os.DirFS(filepath.Join("examples", "fix-calc")), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(repo, "examples", "fix-calc", path)); err != nil {
			t.Errorf("the README's commands leave examples/fix-calc/%s in the clone: remove it with the rm lines", path)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The refusal the README quotes.
	r := rath(t, rt.URL, "replay", "fix", "--from", "12", "--fork", "--provider", "openai", "--model", "m")
	if want := "sequence 12 of fix is inside the turn of researcher (events 12..16): fork between turns: use --from 11 or --from 16"; r.code != exitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("a what-if inside a turn: exit %d, %q; want %d and %q", r.code, r.stderr, exitUsage, want)
	}
	st, err := c.State(ctx, forked)
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != "succeeded" || st.Usage.ByModel == nil {
		t.Fatalf("the what-if fork %s: outcome %q, usage %+v\n%s", forked, st.Outcome, st.Usage.ByModel, ok(t, rt.URL, "log", forked))
	}
}

// waitClosed waits until the session closes.
func waitClosed(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	closed := errors.New("closed")
	err := c.Watch(ctx, id, func(e events.Stored) error {
		if e.Type == events.TypeSessionClosed {
			return closed
		}
		return nil
	})
	if !errors.Is(err, closed) {
		t.Fatalf("%s did not close: %v", id, err)
	}
}

// fixCalcModel speaks the chat completions wire format for the coder of
// examples/fix-calc, as its script does: it writes the fix, runs the tests,
// then says they pass.
type fixCalcModel struct{}

func (fixCalcModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	// The last tool result says which step is done.
	last := ""
	for i := len(req.Messages) - 1; i >= 0 && last == ""; i-- {
		if req.Messages[i].Role == "tool" {
			last = req.Messages[i].ToolCallID
		}
	}
	message := map[string]any{"role": "assistant"}
	finish := "stop"
	call := func(name string, args any) {
		raw, _ := json.Marshal(args)
		message["tool_calls"] = []any{map[string]any{"id": "call_" + name, "type": "function",
			"function": map[string]any{"name": name, "arguments": string(raw)}}}
		finish = "tool_calls"
	}
	switch last {
	case "call_write_file":
		message["content"] = "Now the tests."
		call("run", map[string]any{"command": []string{"go", "test", "./..."}})
	case "call_run":
		message["content"] = "The tests pass."
	default:
		message["content"] = "Add subtracts; it must add."
		call("write_file", map[string]string{"path": "calc.go", "content": "// Package calc adds numbers.\npackage calc\n\n// Add returns a plus b.\nfunc Add(a, b int) int { return a + b }\n"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-readme", "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
	})
}
