package provider

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Script is what Scripted answers for one agent: its turns, in order.
//
// A script file is YAML, either a list of turns or a mapping with a "turns"
// list:
//
//	turns:
//	  - content: Running the tests.
//	    tool_calls:
//	      - name: run_tests
//	        arguments: {package: ./...}
//	  - when_contains: FAIL
//	    content: Fixing the failure.
//	    tool_calls:
//	      - name: edit_file
//	        arguments: {path: main.go}
//	  - when_contains: ok
//	    content: All tests pass.
//	    tokens_in: 1200
//	    tokens_out: 40
type Script struct {
	Turns []Turn `yaml:"turns"`
}

// Turn is one scripted model answer.
type Turn struct {
	Content   string       `yaml:"content"`
	ToolCalls []ScriptCall `yaml:"tool_calls"`
	// TokensIn and TokensOut are reported as usage; zero derives them from
	// the text lengths (about four characters a token).
	TokensIn  int64 `yaml:"tokens_in"`
	TokensOut int64 `yaml:"tokens_out"`
	// WhenContains, when set, makes the turn apply only if the newest input
	// (the user and tool messages after the last assistant message) contains
	// it, so a script can branch on a tool's output.
	WhenContains string `yaml:"when_contains"`
	// StopReason defaults to StopToolUse when the turn calls tools, else
	// StopEndTurn.
	StopReason string `yaml:"stop_reason"`
	// OneOf makes the turn a choice: the first alternative whose
	// WhenContains occurs in the newest input answers (one without
	// WhenContains always does). Unlike turns skipped by WhenContains, the
	// alternatives share one position in the script, so the turns after
	// them stay aligned whichever was taken. A turn with OneOf has no other
	// fields.
	OneOf []Turn `yaml:"one_of"`
	// Choose makes the turn a seeded random choice: among the alternatives
	// whose WhenContains occurs in the newest input (or that have none),
	// one is drawn with probability proportional to its Weight, by a hash
	// of the request's Seed, the agent and the turn's position. The same
	// seed and conversation always draw the same alternative, so a replay
	// reproduces the run, while sessions with other seeds (rath eval gives
	// each try its own) take other paths. Like OneOf, the alternatives
	// share one position, and a turn with Choose has no other fields.
	Choose []Turn `yaml:"choose"`
	// Weight is an alternative's share of a Choose (default 1); it is
	// refused anywhere else.
	Weight int `yaml:"weight"`
}

// ScriptCall is a tool call in a Turn. In YAML, arguments may be any value;
// it is converted to JSON (a missing value becomes {}).
type ScriptCall struct {
	Name      string          `yaml:"name"`
	Arguments json.RawMessage `yaml:"-"`
}

// UnmarshalYAML rejects unknown keys, so a misspelt when_contains fails at
// load time instead of silently matching everything.
func (t *Turn) UnmarshalYAML(node *yaml.Node) error {
	if err := knownKeys(node, "content", "tool_calls", "tokens_in", "tokens_out", "when_contains", "stop_reason", "one_of", "choose", "weight"); err != nil {
		return err
	}
	type plain Turn
	if err := node.Decode((*plain)(t)); err != nil {
		return err
	}
	if t.Weight < 0 || (t.Weight == 0 && hasKey(node, "weight")) {
		return fmt.Errorf("line %d: weight %d: a weight is a positive integer (default 1)", node.Line, t.Weight)
	}
	if t.OneOf == nil && t.Choose == nil {
		return nil
	}
	kind, alts := "one_of", t.OneOf
	if t.Choose != nil {
		kind, alts = "choose", t.Choose
	}
	if t.OneOf != nil && t.Choose != nil {
		return fmt.Errorf("line %d: a turn has one_of or choose, not both", node.Line)
	}
	if len(alts) == 0 || t.Content != "" || t.ToolCalls != nil || t.TokensIn != 0 || t.TokensOut != 0 || t.WhenContains != "" || t.StopReason != "" || t.Weight != 0 {
		return fmt.Errorf("line %d: a turn with %s has a non-empty list of alternatives and no other fields", node.Line, kind)
	}
	for _, alt := range alts {
		if alt.OneOf != nil || alt.Choose != nil {
			return fmt.Errorf("line %d: %s alternatives cannot themselves be one_of or choose", node.Line, kind)
		}
		if kind == "one_of" && alt.Weight != 0 {
			return fmt.Errorf("line %d: weight is for the alternatives of choose; one_of takes the first that matches", node.Line)
		}
	}
	return nil
}

// UnmarshalYAML converts the arguments to JSON.
func (c *ScriptCall) UnmarshalYAML(node *yaml.Node) error {
	if err := knownKeys(node, "name", "arguments"); err != nil {
		return err
	}
	var raw struct {
		Name      string `yaml:"name"`
		Arguments any    `yaml:"arguments"`
	}
	if err := node.Decode(&raw); err != nil {
		return err
	}
	if raw.Name == "" {
		return fmt.Errorf("line %d: tool call without a name", node.Line)
	}
	args, err := yamlToJSON(raw.Arguments)
	if err != nil {
		return fmt.Errorf("line %d: arguments of %s: %w", node.Line, raw.Name, err)
	}
	c.Name, c.Arguments = raw.Name, args
	return nil
}

// UnmarshalYAML accepts a bare list of turns as well as {turns: [...]}.
func (s *Script) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.SequenceNode {
		return node.Decode(&s.Turns)
	}
	if err := knownKeys(node, "turns"); err != nil {
		return err
	}
	type plain Script
	return node.Decode((*plain)(s))
}

func knownKeys(node *yaml.Node, keys ...string) error {
	if node.Kind != yaml.MappingNode {
		return nil // node.Decode reports the type mismatch
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k := node.Content[i]
		found := false
		for _, want := range keys {
			if k.Value == want {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("line %d: unknown field %q (want one of %s)", k.Line, k.Value, strings.Join(keys, ", "))
		}
	}
	return nil
}

func hasKey(node *yaml.Node, key string) bool {
	for i := 0; node.Kind == yaml.MappingNode && i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			return true
		}
	}
	return false
}

// yamlToJSON converts a decoded YAML value to JSON. yaml.v3 decodes mappings
// with non-string keys to map[any]any, which encoding/json refuses, so keys
// are stringified first.
func yamlToJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(jsonable(v))
	if err != nil {
		return nil, err
	}
	return b, nil
}

func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonable(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonable(e)
		}
		return out
	default:
		return v
	}
}

// LoadScript reads a script file (see Script for the format).
func LoadScript(path string) (Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Script{}, fmt.Errorf("load script: %w", err)
	}
	return ParseScript(b, path)
}

// ParseScript decodes a script; name labels errors.
func ParseScript(data []byte, name string) (Script, error) {
	var s Script
	if err := yaml.Unmarshal(data, &s); err != nil {
		return Script{}, fmt.Errorf("load script %s: %w", name, err)
	}
	if len(s.Turns) == 0 {
		return Script{}, fmt.Errorf("load script %s: no turns", name)
	}
	return s, nil
}

// Scripted is a Provider that answers from per-agent scripts, for tests,
// demos and benchmarks without a model. Its answer is a function of the
// Request alone: the Nth assistant message in the conversation is answered
// by the first turn at or after index N whose WhenContains (if any) occurs in
// the newest input, or by the chosen alternative of a OneOf turn. Replaying a
// session therefore gives the same answers.
type Scripted struct {
	scripts map[string]Script
}

// NewScripted returns a Scripted provider over scripts, keyed by agent name.
func NewScripted(scripts map[string]Script) *Scripted {
	s := &Scripted{scripts: make(map[string]Script, len(scripts))}
	for agent, script := range scripts {
		s.scripts[agent] = script
	}
	return s
}

// Name returns "scripted".
func (s *Scripted) Name() string { return string(KindScripted) }

// Complete returns the scripted turn for req. Failures wrap ErrNoScript or
// ErrScriptExhausted and are not retryable.
//
// A Choose turn draws its alternative from req.Seed (see Turn.Choose); the
// Response's Choice says which it drew, so the draw is recorded with the
// model call.
func (s *Scripted) Complete(ctx context.Context, req Request) (Response, error) {
	resp, err := s.complete(ctx, req)
	if err == nil && req.Deltas != nil {
		for _, w := range strings.SplitAfter(resp.Content, " ") {
			if w != "" {
				req.Deltas(Delta{Text: w})
			}
		}
		for i, c := range resp.ToolCalls {
			req.Deltas(Delta{Call: &CallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)}})
		}
	}
	return resp, err
}

func (s *Scripted) complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	script, ok := s.scripts[req.Agent]
	if !ok {
		return Response{}, fmt.Errorf("scripted: agent %q: %w", req.Agent, ErrNoScript)
	}
	n := 0
	for _, m := range req.Messages {
		if m.Role == RoleAssistant {
			n++
		}
	}
	input := newestInput(req.Messages)
	for i := n; i < len(script.Turns); i++ {
		t := script.Turns[i]
		for alt, a := range t.OneOf {
			if a.WhenContains == "" || strings.Contains(input, a.WhenContains) {
				return a.response(req, fmt.Sprintf("%d%c", i, 'a'+alt)), nil
			}
		}
		if t.Choose != nil {
			if resp, ok := choose(req, t.Choose, input, i, n); ok {
				return resp, nil
			}
			continue
		}
		if t.OneOf == nil && (t.WhenContains == "" || strings.Contains(input, t.WhenContains)) {
			return t.response(req, strconv.Itoa(i)), nil
		}
	}
	return Response{}, fmt.Errorf("scripted: agent %q: no turn left for assistant message %d (script has %d turns): %w",
		req.Agent, n+1, len(script.Turns), ErrScriptExhausted)
}

// Choice is the draw of a Choose turn, as recorded with the model call
// (events.ScriptChoice): the turn's index in the script, the alternative
// drawn (0-based, among all of the turn's alternatives), how many matched
// and the seed.
type Choice struct {
	Turn        int
	Alternative int
	Of          int
	Seed        string
}

// choose draws among the alternatives of the Choose turn at script index
// i that match input; n is the agent's answer number in the conversation.
// ok is false when none matches: the script moves on, as it does past a
// turn whose WhenContains does not match.
func choose(req Request, alts []Turn, input string, i, n int) (Response, bool) {
	var matching []int
	total := uint64(0)
	for j, a := range alts {
		if a.WhenContains == "" || strings.Contains(input, a.WhenContains) {
			matching = append(matching, j)
			total += uint64(weight(a))
		}
	}
	if len(matching) == 0 {
		return Response{}, false
	}
	// A hash, not math/rand: the draw must be the same in every build,
	// so that a replay by another binary draws alike.
	sum := sha256.Sum256(fmt.Appendf(nil, "rath.scripted.choose\x00%s\x00%s\x00%d\x00%d", req.Seed, req.Agent, n, i))
	x := binary.BigEndian.Uint64(sum[:8]) % total
	pick := matching[len(matching)-1]
	for _, j := range matching {
		w := uint64(weight(alts[j]))
		if x < w {
			pick = j
			break
		}
		x -= w
	}
	resp := alts[pick].response(req, fmt.Sprintf("%d%c", i, 'a'+pick))
	resp.Choice = &Choice{Turn: i, Alternative: pick, Of: len(matching), Seed: req.Seed}
	return resp, true
}

func weight(t Turn) int {
	if t.Weight == 0 {
		return 1
	}
	return t.Weight
}

// newestInput joins the user and tool messages after the last assistant
// message: what the model would be answering.
func newestInput(msgs []Message) string {
	start := 0
	for i, m := range msgs {
		if m.Role == RoleAssistant {
			start = i + 1
		}
	}
	var b strings.Builder
	for _, m := range msgs[start:] {
		if m.Role == RoleUser || m.Role == RoleTool {
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// response is the turn's answer; step names its place in the script (its
// index, and a letter for an alternative of one_of) in tool call IDs.
func (t Turn) response(req Request, step string) Response {
	resp := Response{
		Content:    t.Content,
		StopReason: t.StopReason,
		TokensIn:   t.TokensIn,
		TokensOut:  t.TokensOut,
		Model:      req.Model,
	}
	if resp.Model == "" {
		resp.Model = string(KindScripted)
	}
	out := len(t.Content)
	for i, c := range t.ToolCalls {
		args := c.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{
			ID:        fmt.Sprintf("call_%s_%s_%d", req.Agent, step, i),
			Name:      c.Name,
			Arguments: append(json.RawMessage(nil), args...),
		})
		out += len(c.Name) + len(args)
	}
	if resp.StopReason == "" {
		resp.StopReason = StopEndTurn
		if len(resp.ToolCalls) > 0 {
			resp.StopReason = StopToolUse
		}
	}
	if resp.TokensIn == 0 {
		in := len(req.System)
		for _, m := range req.Messages {
			in += len(m.Content)
			for _, c := range m.ToolCalls {
				in += len(c.Name) + len(c.Arguments)
			}
		}
		for _, tool := range req.Tools {
			in += len(tool.Name) + len(tool.Description) + len(tool.Parameters)
		}
		resp.TokensIn = approxTokens(in)
	}
	if resp.TokensOut == 0 {
		resp.TokensOut = approxTokens(out)
	}
	return resp
}

// approxTokens estimates tokens from characters, at least 1.
func approxTokens(chars int) int64 {
	return int64(max(1, (chars+3)/4))
}
