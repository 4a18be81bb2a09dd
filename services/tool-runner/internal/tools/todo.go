package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Todo is the built-in tool that keeps the session's pending work: it
// needs no workspace, and the runner runs it with Work instead of Call.
const Todo = "todo"

// WorkKindTodo is the kind of the work items the todo tool adds.
const WorkKindTodo = "todo"

const todoDescription = "Keep the session's list of work to do, which people and the workflow's rules see: action add with a description records an item (with the id you give, or a new one) and returns its ID; action done with an id (and an optional outcome) settles an open item; action list shows the open items."

const todoSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["action"],
  "properties": {
    "action": {"type": "string", "enum": ["add", "done", "list"], "description": "add an item, mark one done, or list the open ones."},
    "description": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "For add: what is to be done."},
    "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", "description": "For done: the item's ID, as add returned it. For add: an ID of your choosing (default: a new one)."},
    "outcome": {"type": "string", "maxLength": 2000, "description": "For done: how it ended, for example fixed or not needed."}
  }
}`

type todoArgs struct {
	Action      string `json:"action"`
	Description string `json:"description"`
	ID          string `json:"id"`
	Outcome     string `json:"outcome"`
}

// todoCall is todo's entry in the built-ins: the runner never runs it on a
// workspace (see Work).
func todoCall(context.Context, sandbox.Workspace, json.RawMessage) (Output, error) {
	return Output{}, fmt.Errorf("%s: runs on the session's state (tools.Work), not on a workspace", Todo)
}

// Work runs a todo call of agent, with call ID callID, on the session's
// open work: the event it records (*events.WorkPending for add,
// *events.WorkDone for done, nil for list) and the text the model reads.
// An item's ID is the one the call gives, or derives from the call, so a
// call run again adds the same item. Bad arguments are an *ArgError; done of an item that
// is not open is a Go error whose text says which are.
func Work(args json.RawMessage, callID, agent string, open map[string]session.Work) (any, string, error) {
	if err := validate(Todo, args); err != nil {
		return nil, "", err
	}
	a, err := decode[todoArgs](Todo, args)
	if err != nil {
		return nil, "", err
	}
	switch a.Action {
	case "add":
		if strings.TrimSpace(a.Description) == "" {
			return nil, "", &ArgError{Tool: Todo, Field: "description", Reason: "required for add"}
		}
		id := a.ID
		if id == "" {
			id = "todo-" + events.DerivedID("todo", callID)[:8]
		} else if _, taken := open[id]; taken {
			return nil, "", fmt.Errorf("%s: item %s is open already; open: %s", Todo, id, listOpen(open))
		}
		return &events.WorkPending{WorkID: id, Kind: WorkKindTodo, Description: a.Description, Assignee: agent},
			fmt.Sprintf("added %s: %s (%d open)", id, a.Description, len(open)+1), nil
	case "done":
		if a.ID == "" {
			return nil, "", &ArgError{Tool: Todo, Field: "id", Reason: "required for done"}
		}
		w, ok := open[a.ID]
		if !ok {
			return nil, "", fmt.Errorf("%s: no open item %s; open: %s", Todo, a.ID, listOpen(open))
		}
		return &events.WorkDone{WorkID: a.ID, Outcome: a.Outcome},
			fmt.Sprintf("done %s: %s (%d open)", a.ID, w.Description, len(open)-1), nil
	}
	return nil, "open: " + listOpen(open), nil
}

// listOpen lists open work oldest first, one "ID: description" per item.
func listOpen(open map[string]session.Work) string {
	if len(open) == 0 {
		return "none"
	}
	ids := make([]string, 0, len(open))
	for id := range open {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y string) int {
		return cmp.Or(cmp.Compare(open[x].Seq, open[y].Seq), strings.Compare(x, y))
	})
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "\n- %s: %s", id, open[id].Description)
	}
	return b.String()
}
