package workflowfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// newClient runs a ledger on a real embedded JetStream and returns a
// client of it.
func newClient(t *testing.T) *client.Client {
	t.Helper()
	_, nc := natstest.Start(t)
	testrig.Ledger(t, nc.ConnectedUrl())
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Store stores the file and its script as one bundle, the one the workers
// open, and a session started with what it returns records it as rath
// start --workflow records it.
func TestStoreIsWhatASessionStartsWith(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	path := filepath.Join("testdata", "review.yaml")

	f, err := workflowfile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflowfile.Store(ctx, c, path)
	if err != nil {
		t.Fatal(err)
	}
	if wf.Name != "review" || wf.Name != f.Name() || wf.Hash == "" || wf.Hash != f.Hash() || wf.Ref == "" {
		t.Fatalf("stored %+v, loaded %s %s", wf, f.Name(), f.Hash())
	}
	again, err := f.Store(ctx, c)
	if err != nil || again != wf {
		t.Fatalf("stored again: %+v, %v; want %+v (the bundle is content-addressed)", again, err, wf)
	}

	raw, err := c.GetBlob(ctx, wf.Ref)
	if err != nil {
		t.Fatal(err)
	}
	opened, b, err := workflow.OpenBundle(raw)
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "reviewer.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if opened.Name != wf.Name || opened.Hash() != wf.Hash || string(b.Files["reviewer.yaml"]) != string(script) {
		t.Fatalf("bundle %s (%s) with files %v, want %s (%s) with reviewer.yaml", opened.Name, opened.Hash(), b.Files, wf.Name, wf.Hash)
	}

	s, err := rath.Start(ctx, c, rath.StartOptions{ID: "review", Workflow: wf, Task: "review the plan"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Workflow != wf.Name || st.WorkflowHash != wf.Hash || st.WorkflowRef != wf.Ref {
		t.Fatalf("session's workflow %q %q %q, want %+v", st.Workflow, st.WorkflowHash, st.WorkflowRef, wf)
	}
}

// A file that cannot be read, one with problems and one whose script is
// missing are errors naming what failed; nothing is stored for them.
func TestStoreErrors(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.yaml")
	invalid := write("invalid.yaml", "name: broken\nagents: []\nrules:\n  - name: r\n    when: event.type ==\n")
	noScript := write("no-script.yaml", "name: no-script\nagents:\n  - name: reviewer\n    provider: scripted\n    model: scripted-1\n    script: gone.yaml\n"+
		"rules:\n  - name: stop\n    when: event.type == \"rath.session.paused\"\n    route: {close: {outcome: cancelled, reason: paused}}\n")

	for _, tc := range []struct {
		name, path, want string
		is               error
	}{
		{"a file that does not exist", missing, "load workflow", nil},
		{"a file with problems", invalid, "invalid.yaml", nil},
		{"a script that does not exist", noScript, "store workflow " + noScript, workflow.ErrBundle},
	} {
		wf, err := workflowfile.Store(ctx, c, tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: %+v, %v; want an error naming %q", tc.name, wf, err, tc.want)
		}
		if wf != (rath.StoredWorkflow{}) {
			t.Errorf("%s: returned %+v with the error", tc.name, wf)
		}
	}
	if _, err := (workflowfile.File{}).Store(ctx, c); err == nil {
		t.Error("storing a File not loaded: no error")
	}
}

// A workflow named without its bundle would start a session no worker can
// run: Start refuses it and starts nothing.
func TestStartRefusesAWorkflowWithoutItsBundle(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	_, err := rath.Start(ctx, c, rath.StartOptions{ID: "nameless", Workflow: rath.StoredWorkflow{Name: "review", Hash: "abc"}, Task: "t"})
	if err == nil || !strings.Contains(err.Error(), "no bundle reference") {
		t.Fatalf("start: %v, want a refusal naming the missing bundle reference", err)
	}
	if _, err := c.State(ctx, "nameless"); err == nil {
		t.Fatal("the session was started")
	}
}
