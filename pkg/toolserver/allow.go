package toolserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/openrath/rath/pkg/session"
)

// allowList reads which tools each agent of a session's workflow may call
// from the workflow bundle's tools table (docs/protocol.md, "Workflow
// bundles"), not from its spec: a tool server checks calls as the tool
// runner does without linking the workflow parser (YAML, CEL). A bundle
// never changes under its reference, so each is read once.
type allowList struct {
	fetch func(ctx context.Context, ref string) ([]byte, error)
	mu    sync.Mutex
	byRef map[string]map[string][]string
}

func newAllowList(fetch func(ctx context.Context, ref string) ([]byte, error)) *allowList {
	return &allowList{fetch: fetch, byRef: map[string]map[string][]string{}}
}

// check returns why the session's agent may not call the tool ("" if it
// may). Sessions without a workflow may call every tool. A bundle without a
// tools table refuses every call: the server cannot tell who may call what.
func (l *allowList) check(ctx context.Context, st *session.State, agent, tool string) string {
	if st.WorkflowRef == "" {
		return ""
	}
	table, err := l.table(ctx, st.WorkflowRef)
	if err != nil {
		return err.Error()
	}
	if table == nil {
		return fmt.Sprintf("workflow %s: its bundle %s has no tools table (written by an older rath start?), so a tool server cannot check agent %q's tools; start the session again with this rath", st.Workflow, st.WorkflowRef, agent)
	}
	allowed, ok := table[agent]
	if !ok {
		return fmt.Sprintf("agent %q is not in workflow %s", agent, st.Workflow)
	}
	if !slices.Contains(allowed, tool) {
		return fmt.Sprintf("tool %s is not allowed for agent %s (allowed: %v)", tool, agent, allowed)
	}
	return ""
}

// table returns the bundle's tools table (nil if it has none).
func (l *allowList) table(ctx context.Context, ref string) (map[string][]string, error) {
	l.mu.Lock()
	t, ok := l.byRef[ref]
	l.mu.Unlock()
	if ok {
		return t, nil
	}
	data, err := l.fetch(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", ref, err)
	}
	var b struct {
		Tools map[string][]string `json:"tools"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("workflow %s: open workflow bundle: %w", ref, err)
	}
	l.mu.Lock()
	l.byRef[ref] = b.Tools
	l.mu.Unlock()
	return b.Tools, nil
}
