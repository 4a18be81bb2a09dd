package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/retail"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
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
	// The support example's tools are its shop's, which rath demo support
	// serves beside the suite, as a tool server of the tool runner's role.
	shopNC := natstest.ConnectAs(t, r.url, auth.RoleToolRunner)
	sc, err := client.New(shopNC, client.As(events.Service("tool-runner")))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- retail.NewServer(sc, nil, quiet).Serve(sctx, shopNC) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the shop: %v", err)
		}
	})
	registered := func(name string) (bool, string) {
		_, err := r.store.Tool(ctx, name)
		return err == nil, fmt.Sprint(err)
	}
	// The services register their tools as they start.
	testrig.Eventually(t, time.Minute, "the suite's tools registered", func() (bool, string) {
		for _, name := range []string{"run", "todo", "remember", "find_user"} {
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
