package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// Two bundles of one workflow file with other scripts get other scripted
// providers: the file's hash does not cover its scripts (a session started
// after a script changed answered from the old one).
func TestProviderPerScript(t *testing.T) {
	w := New(nil, nil, nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	wf, err := workflow.Parse([]byte("name: w\nagents: [{name: a, provider: scripted, script: a.yaml}]\nrules: [{name: r, when: 'true', route: {agent: a}}]\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(script string) string {
		t.Helper()
		loaded := &workflow.Loaded{Workflow: wf, Bundle: workflow.Bundle{Files: map[string][]byte{"a.yaml": []byte(script)}}}
		p, err := w.provider(loaded, wf.Agents[0])
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.Complete(context.Background(), provider.Request{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Content
	}
	if first, second := answer("- content: one\n"), answer("- content: two\n"); first != "one" || second != "two" {
		t.Fatalf("answers %q and %q, want one and two", first, second)
	}
}
