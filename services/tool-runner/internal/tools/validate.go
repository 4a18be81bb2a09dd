package tools

import (
	"context"
	"encoding/json"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

const validateDescription = "Check the workspace by running a command (for example the tests) and record the verdict in the session: exit code 0 is a passed validation, anything else a failed one. Arguments as for run, plus an optional check name. Returns the command's result like run."

const validateSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["command"],
  "properties": {
    "command": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "Program and arguments of the check, for example [\"go\", \"test\", \"./...\"]."},
    "check": {"type": "string", "maxLength": 200, "description": "Name of the check, recorded with the verdict. Default: the command."},
    "timeout_seconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 3600, "description": "Wall-clock limit in seconds. Default: the sandbox's, usually 120."}
  }
}`

// ValidateArgs are the arguments of the validate tool.
type ValidateArgs struct {
	Command        []string `json:"command"`
	Check          string   `json:"check"`
	TimeoutSeconds *int     `json:"timeout_seconds"`
}

// validateCommand runs the check like run; the tool runner turns its exit
// code into the session's validation verdict (ValidationOf).
func validateCommand(ctx context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[ValidateArgs](Validate, raw)
	if err != nil {
		return Output{}, err
	}
	return runArgv(ctx, ws, Validate, args.Command, args.TimeoutSeconds)
}

// CheckName is the name a validate call records its verdict under: its check
// argument, or its command.
func CheckName(raw json.RawMessage) string {
	var a ValidateArgs
	if json.Unmarshal(raw, &a) != nil {
		return Validate
	}
	if a.Check != "" {
		return a.Check
	}
	name := ""
	for i, s := range a.Command {
		if i > 0 {
			name += " "
		}
		name += s
	}
	return name
}
