package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/openrath/rath/internal/workflow"
)

// modelChange puts agents of a workflow on another model: rath demo
// --provider (every agent) and rath recheck --model (every agent, or those
// --agent names).
type modelChange struct {
	provider, model, baseURL string
	// agents names the agents changed; none: all of them.
	agents []string
}

// parseModel reads --model PROVIDER/MODEL.
func parseModel(s string) (provider, model string, err error) {
	provider, model, ok := strings.Cut(s, "/")
	if !ok || provider == "" || model == "" {
		return "", "", fmt.Errorf("--model %q: want PROVIDER/MODEL (scripted/scripted-2, openai/gpt-4.1, anthropic/claude-sonnet-4-5)", s)
	}
	return provider, model, nil
}

// rewrite returns the workflow source raw (of the file path, for errors)
// with the change made in it: each changed agent's provider and model set,
// its base_url when the change has one, and its script dropped when its
// provider is no longer the scripted one. The result is the workflow a
// bundle records, so the change is in the record, not beside it.
func (m modelChange) rewrite(raw []byte, path string) ([]byte, error) {
	if m.provider == "" || m.model == "" {
		return nil, errors.New("a model change needs a provider and a model")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: not a workflow: %v", path, err)
	}
	agents := mappingValue(doc.Content[0], "agents")
	if agents == nil || agents.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: no agents list", path)
	}
	found := map[string]bool{}
	for _, agent := range agents.Content {
		if agent.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s:%d: an agent that is not a mapping", path, agent.Line)
		}
		name := ""
		if n := mappingValue(agent, "name"); n != nil {
			name = n.Value
		}
		if len(m.agents) > 0 && !slices.Contains(m.agents, name) {
			continue
		}
		found[name] = true
		setMapping(agent, "provider", m.provider)
		setMapping(agent, "model", m.model)
		if m.baseURL != "" {
			setMapping(agent, "base_url", m.baseURL)
		}
		if m.provider != workflow.ProviderScripted {
			deleteMapping(agent, "script")
		}
	}
	for _, a := range m.agents {
		if !found[a] {
			return nil, fmt.Errorf("--agent %q: %s has no such agent", a, path)
		}
	}
	return yaml.Marshal(&doc)
}
