package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
)

// ToolSpec is a tool's entry in the registry: what agents are offered, and
// who serves it. Any program can register a tool and serve its calls from
// the bus (see docs/tools.md).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// Server names who runs the tool: "tool-runner" for built-in and MCP
	// tools, or a custom server consuming the tool's requests.
	Server string `json:"server"`
}

// PutTool registers (or replaces) a tool.
func (s *Store) PutTool(ctx context.Context, t ToolSpec) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("register tool %s: %w", t.Name, err)
	}
	if _, err := s.tools.Put(ctx, t.Name, b); err != nil {
		return fmt.Errorf("register tool %s: %w", t.Name, err)
	}
	return nil
}

// Tool reads a registered tool; ErrNotFound if none has the name.
func (s *Store) Tool(ctx context.Context, name string) (ToolSpec, error) {
	e, err := s.tools.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ToolSpec{}, fmt.Errorf("tool %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return ToolSpec{}, fmt.Errorf("tool %s: %w", name, err)
	}
	var t ToolSpec
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return ToolSpec{}, fmt.Errorf("tool %s: %w", name, err)
	}
	return t, nil
}

// Tools lists every registered tool by name.
func (s *Store) Tools(ctx context.Context) ([]ToolSpec, error) {
	l, err := s.tools.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	var out []ToolSpec
	for k := range l.Keys() {
		t, err := s.Tool(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
