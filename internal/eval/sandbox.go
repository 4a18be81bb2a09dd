package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// LabelGrades marks a run's grading fork: its value is the run's session.
// The fork inherits the run's labels (eval, eval_task, eval_try), so a
// listing of an eval's runs leaves out the sessions that carry this one.
const LabelGrades = "eval_grades"

// OutcomeGraded is the close of a grading fork once its checks ran.
const OutcomeGraded = "eval_graded"

// Source is the CloudEvents source of the events rath eval records.
const Source = "rath/eval"

// Tools a sandboxed grader calls, by their registered names.
const (
	toolRun      = "run"
	toolReadFile = "read_file"
)

// Grading is what a grader that needs the run's final workspace did: the
// grading fork it ran its calls on, and their results.
type Grading struct {
	// Fork is the grading fork: a fork of the run's session at the event
	// before its close, so that it holds the run's final workspace; As the
	// agent the calls were made as.
	Fork string `json:"fork"`
	As   string `json:"as"`
	// Command, ExitCode and Output are the command grader's: its argv,
	// its exit code (absent when it did not run) and the run tool's
	// result, cut to its last few KiB.
	Command  []string `json:"command,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Output   string   `json:"output,omitempty"`
	// StateFile and StateDiffs are the expected-state grader's: the file
	// compared and how it differed (none: equal).
	StateFile  string   `json:"state_file,omitempty"`
	StateDiffs []string `json:"state_diffs,omitempty"`
}

// maxOutput is how much of a grader command's output a report keeps.
const maxOutput = 4 << 10

// gradeSandbox runs a grader's command and expected-state checks on the
// run's final workspace, in the sandbox the tool runner gives the run's
// grading fork: a fork of session at closeSeq-1 (the event before the
// close), labelled LabelGrades, paused so that the selector routes it no
// turn, whose calls are requested as the grader's agent, as a user's are:
// the tool runner screens them against the workflow's gates and places the
// fork's workspace at the run's last commit, recording the placement. The
// fork is closed (OutcomeGraded) when the checks are done, whatever they
// found. It returns the first check that failed, or nil.
func gradeSandbox(ctx context.Context, c *client.Client, evalID, session string, closeSeq uint64, g Grader) (*Grading, *Failure) {
	gr := &Grading{As: g.As, Command: g.Command}
	if g.State != nil {
		gr.StateFile = g.State.File
	}
	fail := func(format string, args ...any) (*Grading, *Failure) {
		return gr, &Failure{Cause: CauseGrader, Detail: fmt.Sprintf(format, args...)}
	}
	ack, err := c.Fork(ctx, api.ForkRequest{Parent: session, At: closeSeq - 1, Labels: map[string]string{LabelGrades: session}, EventSource: Source,
		Reason: fmt.Sprintf("rath eval %s: grading fork of %s, on its final workspace", evalID, session)})
	if err != nil {
		return fail("grading fork of %s: %v", session, err)
	}
	gr.Fork = ack.Session
	defer func() {
		reason := fmt.Sprintf("rath eval %s: the grader's checks of %s ran", evalID, session)
		_, _ = c.Close(context.WithoutCancel(ctx), gr.Fork, events.SessionClosed{Outcome: OutcomeGraded, Reason: reason})
	}()
	paused, err := c.Pause(ctx, gr.Fork, fmt.Sprintf("rath eval %s: a grading fork runs the grader's calls only", evalID))
	if err != nil {
		st, serr := c.State(ctx, gr.Fork)
		if serr == nil && st.Status.Ended() {
			return fail("grading fork %s closed (%s: %s) before the grader's calls: a rule of the workflow routed its fork event", gr.Fork, st.Outcome, st.CloseReason)
		}
		return fail("pause grading fork %s: %v", gr.Fork, err)
	}
	if paused.Seq != ack.Seq+1 {
		// Something was routed between the fork and its pause: a turn may
		// be changing the workspace the grader is to look at.
		between, err := c.Log(ctx, gr.Fork, client.Range{From: ack.Seq + 1, To: paused.Seq - 1})
		if err != nil {
			return fail("grading fork %s: %v", gr.Fork, err)
		}
		types := make([]string, len(between))
		for i, ev := range between {
			types[i] = ev.Type
		}
		return fail("grading fork %s: a rule of the workflow routed its fork event before it was paused (%s): its workspace may not be the run's", gr.Fork, strings.Join(types, ", "))
	}

	if len(g.Command) > 0 {
		args, _ := json.Marshal(map[string]any{"command": g.Command})
		res, err := call(ctx, c, gr.Fork, "grade-command", toolRun, g.As, args)
		if err != nil {
			return fail("command %s: %v", argv(g.Command), err)
		}
		gr.ExitCode, gr.Output = &res.exit, tailString(res.result, maxOutput)
		if res.exit != 0 {
			return fail("command %s exited %d", argv(g.Command), res.exit)
		}
	}
	if g.State != nil {
		args, _ := json.Marshal(map[string]any{"path": g.State.File, "limit": 100000})
		res, err := call(ctx, c, gr.Fork, "grade-state", toolReadFile, g.As, args)
		if err != nil {
			return fail("state %s: %v", g.State.File, err)
		}
		if res.truncated {
			return fail("state %s: larger than read_file returns (256 KiB)", g.State.File)
		}
		if gr.StateDiffs, err = stateDiffs(g.State.Expected, []byte(res.result)); err != nil {
			return fail("state %s: %v", g.State.File, err)
		}
		if len(gr.StateDiffs) > 0 {
			return fail("state %s differs from the expected: %s", g.State.File, strings.Join(gr.StateDiffs, "; "))
		}
	}
	return gr, nil
}

type callResult struct {
	exit      int
	result    string
	truncated bool
}

// errDone ends a call's watch at its result.
var errDone = errors.New("call done")

// call requests one tool call on the grading fork and waits for its
// result: its completion (exit code and result), or an error for a failed
// call, one a gate holds for approval, or a fork that closed.
func call(ctx context.Context, c *client.Client, fork, callID, tool, agent string, args json.RawMessage) (callResult, error) {
	var res callResult
	ack, err := c.Emit(ctx, fork, &events.ToolRequested{CallID: callID, Tool: tool, Agent: agent, Arguments: args}, events.WithSource(Source))
	if err != nil {
		return res, fmt.Errorf("request %s: %w", tool, err)
	}
	var why error
	err = c.Watch(ctx, fork, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return nil
		}
		switch d := d.(type) {
		case *events.ToolCompleted:
			if d.CallID != callID {
				return nil
			}
			res.exit, res.result = d.ExitCode, d.Result
			if d.ResultRef != "" {
				data, err := c.GetBlob(ctx, d.ResultRef)
				if err != nil {
					why = fmt.Errorf("read the result %s: %w", d.ResultRef, err)
					return errDone
				}
				res.result = string(data)
			}
			return errDone
		case *events.ToolFailed:
			if d.CallID == callID {
				why = fmt.Errorf("the %s call failed: %s", tool, d.Error)
				return errDone
			}
		case *events.ApprovalRequested:
			if d.CallID == callID {
				why = fmt.Errorf("the workflow's gate %s holds the %s call for approval by %s: a grader's call must run unattended", d.Gate, tool, or(d.Approver, "someone"))
				return errDone
			}
		case *events.SessionClosed:
			why = fmt.Errorf("the grading fork closed (%s: %s) before the %s call's result", d.Outcome, d.Reason, tool)
			return errDone
		}
		return nil
	}, client.From(ack.Seq))
	switch {
	case errors.Is(err, errDone):
		if why == nil && tool == toolReadFile {
			res.result, res.truncated = readFileContent(res.result)
		}
		return res, why
	case err != nil:
		return res, fmt.Errorf("wait for the %s call's result: %w", tool, err)
	}
	return res, errors.New("the watch ended before the call's result")
}

// readFileContent is the file read_file returned: its result without the
// note it adds when it stops early (truncated), or for an empty file.
func readFileContent(result string) (string, bool) {
	if result == "[empty file]" {
		return "", false
	}
	if i := strings.LastIndex(result, "\n[showing lines "); i >= 0 && strings.HasSuffix(result, "]") {
		return result[:i], true
	}
	if i := strings.LastIndex(result, "\n[line "); i >= 0 && strings.HasSuffix(result, "]") && strings.Contains(result[i:], "was cut") {
		return result[:i], true
	}
	return result, false
}

func argv(cmd []string) string {
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]#~") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// tailString keeps the last n bytes of s, marked as cut.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + strings.ToValidUTF8(s[len(s)-n:], "")
}
