package worker

import "github.com/openrath/rath/internal/workflow"

// Labels of a session that run its agents on another model than their
// workflow names (a what-if fork: `rath replay --from N --fork --provider`).
// The session's labels are its start's merged with its forks', so a fork
// that records them changes the model of its own turns only.
const (
	LabelProvider = "rath.provider"
	LabelModel    = "rath.model"
	LabelBaseURL  = "rath.base_url"
)

// withModelLabels returns the agent with the provider, model and endpoint
// the session's labels name, if they name a provider; the agent's script
// is dropped then, since a live provider answers.
func withModelLabels(a workflow.Agent, labels map[string]string) workflow.Agent {
	p := labels[LabelProvider]
	if p == "" {
		return a
	}
	a.Provider, a.Model, a.BaseURL, a.Script, a.ScriptPath = p, labels[LabelModel], labels[LabelBaseURL], "", ""
	return a
}
