package worker

import (
	"testing"

	"github.com/openrath/rath/internal/workflow"
)

func TestWithModelLabels(t *testing.T) {
	a := workflow.Agent{Name: "coder", Provider: "scripted", Model: "scripted-1", Script: "coder.yaml", ScriptPath: "/x/coder.yaml"}
	if got := withModelLabels(a, map[string]string{"workspace": "repo"}); got.Provider != "scripted" || got.Script != "coder.yaml" {
		t.Errorf("without model labels: %+v", got)
	}
	got := withModelLabels(a, map[string]string{LabelProvider: "openai", LabelModel: "gpt-x", LabelBaseURL: "http://127.0.0.1:1"})
	if got.Provider != "openai" || got.Model != "gpt-x" || got.BaseURL != "http://127.0.0.1:1" || got.Script != "" || got.ScriptPath != "" || got.Name != "coder" {
		t.Errorf("with model labels: %+v", got)
	}
}
