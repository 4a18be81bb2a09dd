package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/toolserver"
)

// RememberTool is the name agents call the remember tool by (and list in a
// workflow agent's tools).
const RememberTool = "remember"

// rememberParams is the remember tool's argument schema. Scope and tags are
// checked again by Add, with the same rules.
var rememberParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "content": {"type": "string", "minLength": 1, "maxLength": 65536,
      "description": "What to remember: one fact, lesson or pattern, stated so that it makes sense on its own later."},
    "tags": {"type": "array", "maxItems": 32, "items": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^\\S+$"},
      "description": "Tags to find it by, such as failure-pattern."},
    "scope": {"type": "string",
      "description": "Who may recall it, as <kind>:<name> with kind user, agent, project, workflow or session. Default: the workflow's memory scope."},
    "evidence": {"type": "string", "enum": ["tool_result", "human_correction", "failed_attempt", "validation_signal"],
      "description": "What shows it is true. Default: tool_result."}
  },
  "required": ["content"],
  "additionalProperties": false
}`)

type rememberArgs struct {
	Content  string   `json:"content"`
	Tags     []string `json:"tags"`
	Scope    string   `json:"scope"`
	Evidence string   `json:"evidence"`
}

// Remember returns the remember tool, served over the bus with
// pkg/toolserver, so its calls, results and failures are in the session like
// any tool's. A call writes a new memory item whose provenance is the
// session and the call's rath.tool.call.requested event; the request ID is
// derived from that event, so another attempt of the same call writes once.
// workflows opens the session's workflow bundle, whose memory settings give
// the default scope (workflow.DefaultScope); a session without a workflow
// defaults to its own scope, session:<ID>.
func (m *Memory) Remember(workflows *workflow.Library) toolserver.Tool {
	return toolserver.Tool{
		Name: RememberTool,
		Description: "Remember something for later sessions and agents: a fact, a lesson or a failure pattern. " +
			"It is stored as a memory item with this call as its provenance, and later recalls can find it.",
		Parameters: rememberParams,
		Handle: func(ctx context.Context, raw json.RawMessage) (string, error) {
			call, ok := toolserver.CallFrom(ctx)
			if !ok || call.EventID == "" {
				return "", errors.New("remember: no tool call in the context")
			}
			var args rememberArgs
			if err := json.Unmarshal(raw, &args); err != nil {
				return "", fmt.Errorf("remember: arguments: %w", err)
			}
			if args.Evidence == "" {
				args.Evidence = memoryapi.EvidenceToolResult
			}
			if args.Scope == "" {
				scope, err := m.defaultScope(ctx, workflows, call)
				if err != nil {
					return "", err
				}
				args.Scope = scope
			}
			// The call's context names no principal: the agent worker
			// proposed the tool call, and the service writes on its own
			// account (Record.Actor rath/memory-svc, no rathfor on the
			// rath.memory.written event), for the tenant of the calling
			// session.
			rep, err := m.Add(ctx, memoryapi.AddRequest{
				RequestID: events.DerivedID("memory.remember", call.EventID),
				Session:   call.Session, Content: args.Content, Tags: args.Tags, Scope: args.Scope,
				Evidence: args.Evidence, EventIDs: []string{call.EventID},
			})
			if err != nil {
				return "", fmt.Errorf("remember: %w", err)
			}
			r := rep.Record
			return fmt.Sprintf("Remembered as memory item %s version %d in scope %s.", r.ItemID, r.Version, r.Scope), nil
		},
	}
}

// defaultScope is the scope of a remember call that names none.
func (m *Memory) defaultScope(ctx context.Context, workflows *workflow.Library, call toolserver.Call) (string, error) {
	st, err := m.state(ctx, call.Session, 0)
	if err != nil {
		return "", fmt.Errorf("remember: read session %s: %w", call.Session, err)
	}
	if st.WorkflowRef == "" {
		return memoryapi.ScopeSession + ":" + call.Session, nil
	}
	wf, err := workflows.Get(ctx, st.WorkflowRef)
	if err != nil {
		return "", fmt.Errorf("remember: workflow of session %s: %w", call.Session, err)
	}
	return wf.Workflow.DefaultScope(call.Agent), nil
}
