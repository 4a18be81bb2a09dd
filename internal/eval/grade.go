package eval

import (
	"encoding/json"
	"fmt"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Grader decides whether a closed run passed. Every check it has must hold:
// the close outcome, when Outcome is set, and the CEL expression, when
// there is one.
type Grader struct {
	// Outcome is the outcome the session must close with ("succeeded").
	Outcome string
	// CEL is a boolean expression over the run's final state, with the
	// variables of a workflow rule's when (workflow.Activation): state is
	// the session's state when it closed and event its last event (the
	// rath.session.closed: event.data.outcome, event.data.reason).
	CEL *workflow.Condition
	// Command, when set, is an argv run in the sandbox on the run's final
	// workspace (the run tool, on the run's grading fork: sandbox.go); it
	// must exit 0.
	Command []string
	// State, when set, compares a JSON file of the run's final workspace
	// with the expected JSON (read with read_file on the grading fork).
	State *StateCheck
	// As is the agent of the task's workflow the grading fork's calls are
	// made as: the tool runner runs only what the workflow allows an agent.
	// The task file's as, or the first agent that may use the tools the
	// grader needs.
	As string
}

// StateCheck is an expected-state grader: the JSON document File of the
// final workspace must equal Expected (objects by key, in any order;
// numbers by value: internal/domainstate).
type StateCheck struct {
	File     string
	Expected json.RawMessage
	// ExpectedFile is where Expected came from, when the task file named a
	// file rather than giving it inline.
	ExpectedFile string
}

// sandboxed reports whether the grader needs the run's final workspace.
func (g Grader) sandboxed() bool { return len(g.Command) > 0 || g.State != nil }

// Causes of a failed run, in Failure.Cause.
const (
	// CauseOutcome: the session closed with an outcome other than the
	// grader's.
	CauseOutcome = "outcome"
	// CauseGrader: the grader's CEL expression was false, or failed to
	// evaluate; its command exited non-zero; its expected state differs.
	CauseGrader = "grader"
	// CauseTimeout: the session did not close within the run timeout.
	CauseTimeout = "timeout"
	// CauseError: the run could not be started or followed (the ledger
	// refused the start, the connection failed).
	CauseError = "error"
)

// Failure is why a run did not pass.
type Failure struct {
	Cause  string `json:"cause"`
	Detail string `json:"detail"`
}

func (f Failure) String() string { return f.Cause + ": " + f.Detail }

// Grade grades a closed session: st is its final state and last its last
// event (the close). It returns nil when the run passed.
func (g Grader) Grade(st *session.State, last events.Stored) *Failure {
	if g.Outcome != "" && st.Outcome != g.Outcome {
		detail := fmt.Sprintf("closed %s, want %s", or(st.Outcome, "without an outcome"), g.Outcome)
		if st.CloseReason != "" {
			detail += " (" + st.CloseReason + ")"
		}
		return &Failure{Cause: CauseOutcome, Detail: detail}
	}
	if g.CEL == nil {
		return nil
	}
	act, err := workflow.Activation(st, last)
	if err != nil {
		return &Failure{Cause: CauseGrader, Detail: fmt.Sprintf("%s: %v", g.CEL, err)}
	}
	held, err := g.CEL.Holds(act)
	switch {
	case err != nil:
		return &Failure{Cause: CauseGrader, Detail: fmt.Sprintf("%s: %v", g.CEL, err)}
	case !held:
		return &Failure{Cause: CauseGrader, Detail: fmt.Sprintf("%s is false", g.CEL)}
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
