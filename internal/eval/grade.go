package eval

import (
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
}

// Causes of a failed run, in Failure.Cause.
const (
	// CauseOutcome: the session closed with an outcome other than the
	// grader's.
	CauseOutcome = "outcome"
	// CauseGrader: the grader's CEL expression was false, or failed to
	// evaluate.
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
