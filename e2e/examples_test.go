package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/eventstore"
)

// The example workflows (every examples/*/workflow.yaml, and the one
// docs/workflows.md shows, internal/workflow/testdata/fix-issue.yaml) load,
// their scripts read, and every tool their agents list is a real one: a
// tool the running suite registered (built-in, remember, …) or a tool of an
// MCP server the workflow declares.
func TestExampleWorkflowsUseRealTools(t *testing.T) {
	r := start(t)
	files, err := filepath.Glob("../examples/*/workflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../internal/workflow/testdata/fix-issue.yaml")
	if len(files) < 4 {
		t.Fatalf("examples: %v", files)
	}
	ctx := context.Background()
	registered := func(name string) (bool, string) {
		_, err := r.store.Tool(ctx, name)
		return err == nil, fmt.Sprint(err)
	}
	// The services register their tools as they start.
	testrig.Eventually(t, time.Minute, "the suite's tools registered", func() (bool, string) {
		for _, name := range []string{"run", "todo", "remember"} {
			if ok, why := registered(name); !ok {
				return false, name + ": " + why
			}
		}
		return true, ""
	})
	for _, f := range files {
		w, err := workflow.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := w.CheckScripts(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		for _, a := range w.Agents {
			for _, tool := range a.Tools {
				if strings.Contains(tool, ".") {
					continue // an MCP server's: Parse checked the workflow declares it
				}
				if _, err := r.store.Tool(ctx, tool); err != nil {
					t.Errorf("%s: agent %s lists %s, which no service registers: %v", f, a.Name, tool, err)
				}
			}
		}
	}
	if _, err := r.store.Tool(ctx, "shell"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("a tool nobody serves: %v, want not found", err)
	}
}
