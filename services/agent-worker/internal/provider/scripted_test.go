package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const coderScript = `
turns:
  - content: Running the tests.
    tool_calls:
      - name: run_tests
        arguments: {package: ./..., flags: [-race, -count=1], verbose: true}
  - when_contains: FAIL
    content: Fixing the failing test.
    tool_calls:
      - name: edit_file
        arguments:
          path: calc.go
          1: numeric key
  - when_contains: ok
    content: All tests pass.
    tokens_in: 1200
    tokens_out: 40
    stop_reason: end_turn
`

func loadTestScript(t *testing.T, text string) Script {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadScript(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// history builds a coder conversation: the task, then for each tool output
// an assistant turn calling a tool and the tool's answer.
func history(toolOutputs ...string) Request {
	req := Request{Agent: "coder", Model: "scripted-1", Messages: []Message{{Role: RoleUser, Content: "Make the tests pass."}}}
	for i, out := range toolOutputs {
		id := "call_coder_" + string(rune('0'+i)) + "_0"
		req.Messages = append(req.Messages,
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "run_tests", Arguments: json.RawMessage(`{}`)}}},
			Message{Role: RoleTool, ToolCallID: id, Content: out},
		)
	}
	return req
}

func TestLoadScript(t *testing.T) {
	s := loadTestScript(t, coderScript)
	if len(s.Turns) != 3 {
		t.Fatalf("got %d turns, want 3", len(s.Turns))
	}
	assertJSON(t, "turn 0 arguments", s.Turns[0].ToolCalls[0].Arguments,
		`{"package":"./...","flags":["-race","-count=1"],"verbose":true}`)
	assertJSON(t, "turn 1 arguments", s.Turns[1].ToolCalls[0].Arguments, `{"path":"calc.go","1":"numeric key"}`)
	if s.Turns[1].WhenContains != "FAIL" || s.Turns[2].TokensIn != 1200 || s.Turns[2].StopReason != "end_turn" {
		t.Errorf("fields not decoded: %+v", s.Turns)
	}

	bare := loadTestScript(t, "- content: hi\n- tool_calls: [{name: ls}]\n")
	if len(bare.Turns) != 2 || string(bare.Turns[1].ToolCalls[0].Arguments) != "{}" {
		t.Errorf("bare list: %+v", bare.Turns)
	}
}

func TestLoadScriptErrors(t *testing.T) {
	tests := map[string]string{
		"unknown turn field":  "turns:\n  - content: hi\n    when_contain: FAIL\n",
		"unknown call field":  "turns:\n  - tool_calls: [{name: ls, args: {}}]\n",
		"call without name":   "turns:\n  - tool_calls: [{arguments: {}}]\n",
		"no turns":            "turns: []\n",
		"not yaml":            "turns: [\n",
		"one_of with content": "turns:\n  - content: x\n    one_of: [{content: a}]\n",
		"empty one_of":        "turns:\n  - one_of: []\n",
		"nested one_of":       "turns:\n  - one_of: [{one_of: [{content: a}]}]\n",
		"choose and one_of":   "turns:\n  - choose: [{content: a}]\n    one_of: [{content: b}]\n",
		"choose with content": "turns:\n  - content: x\n    choose: [{content: a}]\n",
		"choose with weight":  "turns:\n  - weight: 2\n    choose: [{content: a}]\n",
		"empty choose":        "turns:\n  - choose: []\n",
		"nested choose":       "turns:\n  - choose: [{choose: [{content: a}]}]\n",
		"choose in one_of":    "turns:\n  - one_of: [{choose: [{content: a}]}]\n",
		"weight in one_of":    "turns:\n  - one_of: [{content: a, weight: 2}]\n",
		"zero weight":         "turns:\n  - choose: [{content: a, weight: 0}, {content: b}]\n",
		"negative weight":     "turns:\n  - choose: [{content: a, weight: -1}, {content: b}]\n",
		"weight not a number": "turns:\n  - choose: [{content: a, weight: heavy}]\n",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "script.yaml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadScript(path); err == nil {
				t.Error("LoadScript accepted a bad script")
			}
		})
	}
	if _, err := LoadScript(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestScriptedTurnSelection(t *testing.T) {
	p := NewScripted(map[string]Script{"coder": loadTestScript(t, coderScript)})
	tests := []struct {
		name     string
		req      Request
		content  string
		toolCall *ToolCall
		stop     string
	}{
		{"first turn", history(), "Running the tests.",
			&ToolCall{ID: "call_coder_0_0", Name: "run_tests", Arguments: json.RawMessage(`{"flags":["-race","-count=1"],"package":"./...","verbose":true}`)},
			StopToolUse},
		{"branch on failure", history("--- FAIL: TestAdd"), "Fixing the failing test.",
			&ToolCall{ID: "call_coder_1_0", Name: "edit_file", Arguments: json.RawMessage(`{"1":"numeric key","path":"calc.go"}`)},
			StopToolUse},
		{"branch on success skips the FAIL turn", history("ok  \texample.com/calc\t0.01s"), "All tests pass.", nil, StopEndTurn},
		{"after the fix", history("--- FAIL: TestAdd", "edited", "ok  \texample.com/calc"), "", nil, ""},
		{"fix then pass", history("--- FAIL: TestAdd", "ok  \texample.com/calc"), "All tests pass.", nil, StopEndTurn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := p.Complete(context.Background(), tt.req)
			if tt.content == "" {
				if !errors.Is(err, ErrScriptExhausted) {
					t.Fatalf("Complete() = %+v, %v; want ErrScriptExhausted", resp, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Content != tt.content || resp.StopReason != tt.stop || resp.Model != "scripted-1" {
				t.Errorf("got content %q stop %q model %q, want %q %q", resp.Content, resp.StopReason, resp.Model, tt.content, tt.stop)
			}
			var want []ToolCall
			if tt.toolCall != nil {
				want = []ToolCall{*tt.toolCall}
			}
			if !reflect.DeepEqual(resp.ToolCalls, want) {
				t.Errorf("tool calls = %s, want %s", mustJSON(resp.ToolCalls), mustJSON(want))
			}
			if resp.TokensIn <= 0 || resp.TokensOut <= 0 {
				t.Errorf("tokens %d/%d, want derived positive counts", resp.TokensIn, resp.TokensOut)
			}
		})
	}
}

func TestScriptedTokens(t *testing.T) {
	p := NewScripted(map[string]Script{"coder": loadTestScript(t, coderScript)})
	resp, err := p.Complete(context.Background(), history("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.TokensIn != 1200 || resp.TokensOut != 40 {
		t.Errorf("explicit tokens: got %d/%d, want 1200/40", resp.TokensIn, resp.TokensOut)
	}
	short, _ := p.Complete(context.Background(), history())
	long := history()
	long.Messages[0].Content = strings.Repeat("longer task ", 100)
	longResp, _ := p.Complete(context.Background(), long)
	if longResp.TokensIn <= short.TokensIn {
		t.Errorf("derived tokens_in does not grow with the input: %d <= %d", longResp.TokensIn, short.TokensIn)
	}
}

func TestScriptedDeterministic(t *testing.T) {
	script := loadTestScript(t, coderScript)
	req := history("--- FAIL: TestAdd")
	first, err := NewScripted(map[string]Script{"coder": script}).Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh provider (a restarted worker) and a repeated call give the
	// same answer: selection depends on the request only.
	p := NewScripted(map[string]Script{"coder": script})
	for range 3 {
		again, err := p.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("responses differ:\n%+v\n%+v", first, again)
		}
	}
}

func TestScriptedErrorsAreNotRetried(t *testing.T) {
	p := NewScripted(map[string]Script{"coder": {Turns: []Turn{{Content: "only turn"}}}})
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"exhausted", history("ok"), ErrScriptExhausted},
		{"unknown agent", Request{Agent: "reviewer"}, ErrNoScript},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var attempts []Attempt
			_, err := WithRetry(p, fastRetry, func(a Attempt) { attempts = append(attempts, a) }).Complete(context.Background(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var perr *Error
			if errors.As(err, &perr) {
				t.Errorf("scripted error is an *Error: %v", perr)
			}
			if len(attempts) != 1 || attempts[0].RetryIn != 0 {
				t.Errorf("attempts = %+v, want one final attempt", attempts)
			}
			if !strings.Contains(err.Error(), "after 1 attempt") {
				t.Errorf("err = %q, want the attempt count", err)
			}
		})
	}
}

func TestRecorded(t *testing.T) {
	recorded := []Response{
		{Content: "one", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "ls", Arguments: json.RawMessage(`{}`)}}, TokensIn: 10, TokensOut: 2, RequestBody: []byte(`{}`)},
		{Content: "two", StopReason: StopEndTurn},
	}
	p := FromRecorded(recorded)
	for i, want := range recorded {
		got, err := p.Complete(context.Background(), Request{Agent: "whatever"})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("response %d = %+v, want %+v", i, got, want)
		}
	}
	if _, err := p.Complete(context.Background(), Request{}); !errors.Is(err, ErrRecordingExhausted) {
		t.Errorf("after the recording: %v, want ErrRecordingExhausted", err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A one_of turn answers with its first matching alternative and keeps the
// turns after it aligned, whichever alternative was taken.
func TestScriptedOneOf(t *testing.T) {
	script, err := ParseScript([]byte(`
- one_of:
    - when_contains: rejected before
      content: A careful fix.
      tool_calls: [{name: write, arguments: {v: 2}}]
    - content: A quick fix.
      tool_calls: [{name: write, arguments: {v: 1}}]
- content: Done.
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := NewScripted(map[string]Script{"coder": script})
	for _, tc := range []struct {
		input, first, callID string
	}{
		{"Fix it.", "A quick fix.", "call_coder_0b_0"},
		{"Fix it. Note: the quick fix was rejected before.", "A careful fix.", "call_coder_0a_0"},
	} {
		req := Request{Agent: "coder", Messages: []Message{{Role: RoleUser, Content: tc.input}}}
		resp, err := p.Complete(context.Background(), req)
		if err != nil || resp.Content != tc.first || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != tc.callID {
			t.Fatalf("%q: %+v %v; want %q with call %s", tc.input, resp, err, tc.first, tc.callID)
		}
		req.Messages = append(req.Messages,
			Message{Role: RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
			Message{Role: RoleTool, ToolCallID: tc.callID, Content: "written"})
		resp, err = p.Complete(context.Background(), req)
		if err != nil || resp.Content != "Done." {
			t.Fatalf("%q, second answer: %+v %v; want Done.", tc.input, resp, err)
		}
	}
}

const chooseScript = `
- choose:
    - content: The right fix.
      weight: 3
      tool_calls: [{name: write, arguments: {v: right}}]
    - content: A wrong fix.
      tool_calls: [{name: write, arguments: {v: wrong}}]
    - when_contains: never in the input
      content: Never drawn.
      weight: 100
- content: Done.
`

// A choose turn draws among its matching alternatives by the request's
// seed: the same seed always draws the same, other seeds draw others in
// about the weights' proportions, the draw is in the Response, and the
// turns after it stay aligned.
func TestScriptedChoose(t *testing.T) {
	script, err := ParseScript([]byte(chooseScript), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := NewScripted(map[string]Script{"coder": script})
	ctx := context.Background()
	drawn := map[string]int{}
	for i := range 400 {
		seed := fmt.Sprintf("task/%d", i)
		req := Request{Agent: "coder", Seed: seed, Messages: []Message{{Role: RoleUser, Content: "Fix it."}}}
		resp, err := p.Complete(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := p.Complete(ctx, req)
		if err != nil || !reflect.DeepEqual(again, resp) {
			t.Fatalf("seed %q: drew %+v, then %+v (%v)", seed, resp, again, err)
		}
		c := resp.Choice
		if c == nil || c.Turn != 0 || c.Of != 2 || c.Seed != seed || c.Alternative > 1 {
			t.Fatalf("seed %q: choice %+v", seed, c)
		}
		want := map[int]string{0: "The right fix.", 1: "A wrong fix."}[c.Alternative]
		if resp.Content != want || resp.ToolCalls[0].ID != fmt.Sprintf("call_coder_0%c_0", 'a'+c.Alternative) {
			t.Fatalf("seed %q: alternative %d answered %+v", seed, c.Alternative, resp)
		}
		drawn[resp.Content]++
		req.Messages = append(req.Messages,
			Message{Role: RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
			Message{Role: RoleTool, ToolCallID: resp.ToolCalls[0].ID, Content: "written"})
		if resp, err = p.Complete(ctx, req); err != nil || resp.Content != "Done." || resp.Choice != nil {
			t.Fatalf("seed %q, second answer: %+v %v; want Done. without a choice", seed, resp, err)
		}
	}
	// 3:1 over 400 seeds: about 300 and 100. The draws are a hash of the
	// seeds, so these counts are the same on every run; the bounds only
	// say the weights are honoured.
	if drawn["The right fix."] < 250 || drawn["A wrong fix."] < 60 || drawn["Never drawn."] != 0 {
		t.Errorf("draws over 400 seeds: %v, want about 300 right and 100 wrong", drawn)
	}

	// A choose none of whose alternatives matches is passed over, like a
	// turn whose when_contains does not match.
	only, err := ParseScript([]byte("- choose: [{when_contains: FAIL, content: Retry.}]\n- content: Done.\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	p = NewScripted(map[string]Script{"coder": only})
	for input, want := range map[string]string{"ok": "Done.", "FAIL": "Retry."} {
		resp, err := p.Complete(ctx, Request{Agent: "coder", Messages: []Message{{Role: RoleUser, Content: input}}})
		if err != nil || resp.Content != want || (resp.Choice != nil) != (want == "Retry.") {
			t.Errorf("input %q: %+v %v, want %q", input, resp, err, want)
		}
	}
}

// A scripted answer asked with Deltas says itself word by word, then each
// tool call, and answers the same as without.
func TestScriptedSaysItsAnswerInPieces(t *testing.T) {
	p := NewScripted(map[string]Script{"coder": {Turns: []Turn{{Content: "Running the tests now.",
		ToolCalls: []ScriptCall{{Name: "run", Arguments: json.RawMessage(`{"cmd":"ls"}`)}}}}}})
	plain, err := p.Complete(context.Background(), Request{Agent: "coder"})
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	streamed, err := p.Complete(context.Background(), Request{Agent: "coder", Deltas: func(d Delta) {
		if d.Call != nil {
			pieces = append(pieces, fmt.Sprintf("%d %s %s %s", d.Call.Index, d.Call.ID, d.Call.Name, d.Call.Arguments))
			return
		}
		pieces = append(pieces, d.Text)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plain, streamed) {
		t.Fatalf("streamed answer %+v, plain %+v", streamed, plain)
	}
	want := []string{"Running ", "the ", "tests ", "now.", `0 ` + plain.ToolCalls[0].ID + ` run {"cmd":"ls"}`}
	if !reflect.DeepEqual(pieces, want) {
		t.Fatalf("pieces %q, want %q", pieces, want)
	}
}
