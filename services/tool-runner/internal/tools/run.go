package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

const runDescription = "Run a command in the workspace directory, without a shell: command is the argv. For pipes, redirection or several commands use [\"sh\", \"-c\", \"...\"]. The environment is minimal; do not rely on network access. Returns the exit code, stdout and stderr (each capped); the command is killed with everything it started when the timeout expires."

const runSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["command"],
  "properties": {
    "command": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "Program and arguments, for example [\"go\", \"test\", \"./...\"]."},
    "timeout_seconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 3600, "description": "Wall-clock limit in seconds. Default: the sandbox's, usually 120."}
  }
}`

type runArgs struct {
	Command        []string `json:"command"`
	TimeoutSeconds *int     `json:"timeout_seconds"`
}

func runCommand(ctx context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[runArgs](Run, raw)
	if err != nil {
		return Output{}, err
	}
	return runArgv(ctx, ws, Run, args.Command, args.TimeoutSeconds)
}

// runArgv runs a command for the run and validate tools.
func runArgv(ctx context.Context, ws sandbox.Workspace, tool string, argv []string, timeoutSeconds *int) (Output, error) {
	if argv[0] == "" {
		return Output{}, &ArgError{Tool: tool, Field: "command[0]", Reason: "must name a program"}
	}
	c := sandbox.Cmd{Args: argv}
	if timeoutSeconds != nil {
		c.Timeout = time.Duration(*timeoutSeconds) * time.Second
	}
	res, err := ws.Run(ctx, c)
	if err != nil {
		return Output{}, fmt.Errorf("%s: %w", tool, err)
	}
	return Output{
		Result:    describeRun(res),
		ExitCode:  res.ExitCode,
		Stdout:    res.Stdout,
		Stderr:    res.Stderr,
		Truncated: res.Truncated,
		Duration:  res.Duration,
		Limits:    res.Limits,
	}, nil
}

// describeRun writes a command's result for the model.
func describeRun(res sandbox.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d", res.ExitCode)
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, " (timed out after %s; the command and its children were killed)", res.Duration.Round(time.Millisecond))
	case res.Stopped != "":
		b.WriteString(" (stopped by the " + res.Stopped + ")")
	}
	b.WriteByte('\n')
	// A failure may come from a limit the command only saw as an error (a
	// refused fork, a refused allocation): the limits go with it.
	if res.ExitCode != 0 && res.Limits != "" {
		b.WriteString("limits: " + res.Limits + "\n")
	}
	for _, n := range res.Network {
		b.WriteString("network: " + n + "\n")
	}
	for _, s := range []struct {
		name  string
		text  string
		total int64
	}{{"stdout", res.Stdout, res.StdoutBytes}, {"stderr", res.Stderr, res.StderrBytes}} {
		if s.total == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s", s.name)
		if int64(len(s.text)) < s.total {
			fmt.Fprintf(&b, " (first %d of %d bytes)", len(s.text), s.total)
		}
		b.WriteString(" ---\n")
		b.WriteString(s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
