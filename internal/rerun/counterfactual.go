package rerun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Labels of a counterfactual's session (a fork of the recorded session, or
// a new one when it runs from the start), beside those it inherits: the
// recheck run and the recorded session it re-runs. Selecting sessions by
// label leaves the sessions with LabelRecheck out.
const (
	LabelRecheck   = "recheck"
	LabelRecheckOf = "recheck_of"
)

// OutcomeRecheckTimeout closes a counterfactual that did not close within
// its wait, so that its agents stop.
const OutcomeRecheckTimeout = "recheck_timeout"

// Verdicts of a counterfactual, in CounterfactualResult.Verdict.
const (
	// VerdictUnchanged: graded the same, closed with the same outcome.
	VerdictUnchanged = "unchanged"
	// VerdictChanged: graded differently, or closed with another outcome.
	VerdictChanged = "changed"
	// VerdictUnaffected: the change affects no turn or decision of the
	// recorded session; nothing was re-run, the recorded grade stands.
	VerdictUnaffected = "unaffected"
	// VerdictNotClosed: the counterfactual did not close in time (closed
	// then as OutcomeRecheckTimeout), or could not be run: Error says.
	VerdictNotClosed = "not_closed"
)

// GradeFunc grades a closed session from its final state and last event:
// "" when it passed, else why not (eval.Grader.Grade, as a string).
type GradeFunc func(st *session.State, last events.Stored) string

// CounterfactualOptions configure Counterfactual.
type CounterfactualOptions struct {
	// Workflow is the changed workflow, stored as bundle Ref (the caller
	// stores it once for every session: workflow.Store), whose content is
	// Bundle.
	Workflow *workflow.Workflow
	Bundle   workflow.Bundle
	Ref      string
	// Grade grades both the recorded session and its counterfactual.
	Grade GradeFunc
	// Run names the recheck run (the label recheck).
	Run string
	// Wait bounds the wait for the counterfactual to close.
	Wait time.Duration
	// Recorded, when set, opens the recorded sessions' workflow bundles
	// (workflow.NewLibrary(c.GetBlob)), once per bundle for every session
	// that shares it; nil opens each session's anew.
	Recorded *workflow.Library
}

// Side is a session of a counterfactual's comparison, as graded.
type Side struct {
	Session string `json:"session"`
	Outcome string `json:"outcome,omitempty"`
	Passed  bool   `json:"passed"`
	Failure string `json:"failure,omitempty"`
	Head    uint64 `json:"head"`
}

// Cost is the work of a stretch of a session: its model calls, tokens and
// wall time, counted from its events (rath.model.called, the usage its
// events record, the span of their times).
type Cost struct {
	ModelCalls int64 `json:"model_calls"`
	TokensIn   int64 `json:"tokens_in"`
	TokensOut  int64 `json:"tokens_out"`
	Events     int   `json:"events"`
	WallMS     int64 `json:"wall_ms"`
}

// Add is the sum of two costs.
func (c Cost) Add(o Cost) Cost {
	return Cost{ModelCalls: c.ModelCalls + o.ModelCalls, TokensIn: c.TokensIn + o.TokensIn, TokensOut: c.TokensOut + o.TokensOut,
		Events: c.Events + o.Events, WallMS: c.WallMS + o.WallMS}
}

// Divergence is where a counterfactual's events first differ from the
// recorded session's after the point they share: the sequence in each (0
// past its end) and the kinds of event there.
type Divergence struct {
	Seq                uint64 `json:"seq"`
	Type               string `json:"type,omitempty"`
	CounterfactualSeq  uint64 `json:"counterfactual_seq"`
	CounterfactualType string `json:"counterfactual_type,omitempty"`
}

// CounterfactualResult is one recorded session re-run on a changed
// workflow from the first point the change can affect.
type CounterfactualResult struct {
	// Session is the recorded session asked for; Original the branch of it
	// graded (Session, or the last fork its workflow made of it when it
	// closed superseded).
	Session string `json:"session"`
	// Task is the recorded session's eval task (label eval_task), if any.
	Task   string `json:"task,omitempty"`
	Change string `json:"change"`
	Point  Point  `json:"point"`
	// FromStart says the counterfactual is a new session from the
	// recorded start, not a fork (Point.At is 0).
	FromStart      bool   `json:"from_start"`
	Original       Side   `json:"original"`
	Counterfactual *Side  `json:"counterfactual,omitempty"`
	Verdict        string `json:"verdict"`
	// Diverged is where the counterfactual's events first differ from the
	// original's after Point.At; nil when they do not.
	Diverged *Divergence `json:"diverged,omitempty"`
	// Reused is the original's prefix the counterfactual shares, not run
	// again; Ran what the counterfactual ran itself; Saved the share of a
	// from-the-start run (Reused + Ran) that reuse spared, in model calls,
	// tokens and wall time.
	Reused Cost   `json:"reused"`
	Ran    Cost   `json:"ran"`
	Saved  Saving `json:"saved"`
	Error  string `json:"error,omitempty"`
}

// Saving is the share (0..1) of a from-the-start run that reuse spared.
type Saving struct {
	ModelCalls float64 `json:"model_calls"`
	Tokens     float64 `json:"tokens"`
	Wall       float64 `json:"wall"`
}

func share(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// Counterfactual re-runs a recorded, closed session on a changed workflow
// from the first point the change can affect (Locate): it forks the
// session there with the changed workflow (rath.session.forked
// workflow_ref), so that the prefix is reused as recorded and never run
// again, asks the first affected agent for its turn as the recorded (or
// the changed) decision did, waits for the fork to close, grades both
// sessions with o.Grade, and reports the verdict, the first event where the
// runs diverge, and the model calls, tokens and time the reused prefix
// spared. A change that needs the start runs a new session from the
// recorded start instead; one that affects nothing runs nothing.
//
// An error is returned for what the caller asked that cannot work (the
// session unknown or still open: ErrUsage) and for the deployment failing;
// a counterfactual that does not close in time is a result (VerdictNotClosed).
func Counterfactual(ctx context.Context, c *client.Client, sessionID string, o CounterfactualOptions) (*CounterfactualResult, error) {
	orig, err := lastBranch(ctx, c, sessionID)
	if err != nil {
		return nil, err
	}
	log, err := c.Log(ctx, orig, client.Range{})
	if err != nil {
		return nil, fmt.Errorf("recheck %s: %w", sessionID, err)
	}
	st := &session.State{}
	for _, e := range log {
		session.Apply(st, e)
	}
	if st.Status != session.StatusClosed && st.Status != session.StatusArchived {
		return nil, usageError{fmt.Errorf("recheck %s: session %s is %s: only a closed session has an outcome to compare with", sessionID, orig, st.Status)}
	}
	if st.WorkflowRef == "" {
		return nil, usageError{fmt.Errorf("recheck %s: session %s ran no workflow bundle: there is nothing to change", sessionID, orig)}
	}
	lib := o.Recorded
	if lib == nil {
		lib = workflow.NewLibrary(c.GetBlob)
	}
	recorded, err := lib.Get(ctx, st.WorkflowRef)
	if err != nil {
		return nil, fmt.Errorf("recheck %s: its %w", sessionID, err)
	}
	oldWF := recorded.Workflow
	change, err := Diff(recorded.Bundle, o.Bundle)
	if err != nil {
		return nil, err
	}
	res := &CounterfactualResult{Session: sessionID, Task: st.Labels["eval_task"], Change: change.String(),
		Original: Side{Session: orig, Outcome: st.Outcome, Head: st.Seq}}
	res.Original.Failure = o.Grade(st, log[len(log)-1])
	res.Original.Passed = res.Original.Failure == ""
	res.Point = Locate(log, change, oldWF, o.Workflow)
	n := 0
	for n < len(log) && log[n].Seq <= res.Point.At {
		n++
	}
	res.Reused = costOf(log[:n])
	if n == len(log) {
		res.Verdict = VerdictUnaffected
		res.saved()
		return res, nil
	}

	labels := map[string]string{LabelRecheck: o.Run, LabelRecheckOf: orig}
	var id, turnID string
	from := res.Point.At
	if res.Point.At == 0 {
		res.FromStart = true
		start, err := log[0].Decode()
		if err != nil {
			return nil, fmt.Errorf("recheck %s: its start: %w", sessionID, err)
		}
		d := *start.(*events.SessionStarted)
		d.Labels = maps.Clone(d.Labels)
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
		maps.Copy(d.Labels, labels)
		d.Workflow, d.WorkflowHash, d.WorkflowRef = o.Workflow.Name, o.Workflow.Hash(), o.Ref
		ack, err := c.Start(ctx, "", d, events.WithSource(Source))
		if err != nil {
			return nil, fmt.Errorf("recheck %s: start it again: %w", sessionID, err)
		}
		id = ack.Session
	} else {
		ack, err := c.Fork(ctx, api.ForkRequest{Parent: orig, At: res.Point.At, Labels: labels, EventSource: Source,
			Reason:   fmt.Sprintf("counterfactual on %s: %s", o.Bundle.Path, res.Point.Why),
			Workflow: o.Workflow.Name, WorkflowHash: o.Workflow.Hash(), WorkflowRef: o.Ref})
		if err != nil {
			return nil, fmt.Errorf("recheck %s: %w", sessionID, err)
		}
		id = ack.Session
		turnID = "turn-" + events.DerivedID(ack.ID, "recheck")[:8]
		d := *res.Point.Decision
		d.TurnID = turnID
		opts := []events.Option{events.WithID(events.DerivedID(ack.ID, "recheck-decided")), events.WithCausation(ack.ID)}
		if _, err := c.Emit(ctx, id, &d, opts...); err != nil {
			return nil, fmt.Errorf("recheck %s: fork %s: its first decision: %w", sessionID, id, err)
		}
		opts[0] = events.WithID(events.DerivedID(ack.ID, "recheck-request"))
		if _, err := c.Emit(ctx, id, &events.TurnRequested{TurnID: turnID, Agent: d.Agent, Rule: d.Rule}, opts...); err != nil {
			return nil, fmt.Errorf("recheck %s: fork %s: its first turn: %w", sessionID, id, err)
		}
	}

	last, err := waitClosed(ctx, c, id, turnID, from, o.Wait)
	var tf *TurnFailedError
	var nc *NotClosedError
	switch {
	case errors.As(err, &tf):
		last = tf.Fork // closed, failed: graded as it is
	case errors.As(err, &nc):
		res.Verdict, res.Error = VerdictNotClosed, fmt.Sprintf("counterfactual %s not closed within %s", nc.Fork, o.Wait)
		_, _ = c.Close(context.WithoutCancel(ctx), nc.Fork, events.SessionClosed{Outcome: OutcomeRecheckTimeout,
			Reason: fmt.Sprintf("rath recheck %s: not closed within %s", o.Run, o.Wait)})
		res.Counterfactual = &Side{Session: nc.Fork}
		return res, nil
	case err != nil:
		return nil, fmt.Errorf("recheck %s: %w", sessionID, err)
	}
	cf, err := c.Log(ctx, last, client.Range{From: from + 1})
	if err != nil {
		return nil, fmt.Errorf("recheck %s: counterfactual %s: %w", sessionID, last, err)
	}
	if len(cf) == 0 {
		return nil, fmt.Errorf("recheck %s: counterfactual %s has no events after %d", sessionID, last, from)
	}
	cst, err := c.State(ctx, last)
	if err != nil {
		return nil, fmt.Errorf("recheck %s: %w", sessionID, err)
	}
	res.Counterfactual = &Side{Session: last, Outcome: cst.Outcome, Head: cst.Seq}
	res.Counterfactual.Failure = o.Grade(cst, cf[len(cf)-1])
	res.Counterfactual.Passed = res.Counterfactual.Failure == ""
	res.Verdict = VerdictUnchanged
	if res.Counterfactual.Passed != res.Original.Passed || res.Counterfactual.Outcome != res.Original.Outcome {
		res.Verdict = VerdictChanged
	}
	// What the counterfactual ran itself: its events after the point,
	// from its own first (the fork or the start) on.
	res.Ran = costOf(cf)
	res.Diverged = diverged(orig, log[n:], last, cf, res.FromStart)
	res.saved()
	return res, nil
}

func (r *CounterfactualResult) saved() { r.Saved = SavingOf(r.Reused, r.Ran) }

// SavingOf is the share of a from-the-start run (reused + ran) that
// reusing spared.
func SavingOf(reused, ran Cost) Saving {
	whole := reused.Add(ran)
	return Saving{ModelCalls: share(reused.ModelCalls, whole.ModelCalls),
		Tokens: share(reused.TokensIn+reused.TokensOut, whole.TokensIn+whole.TokensOut),
		Wall:   share(reused.WallMS, whole.WallMS)}
}

// diverged compares the original's events after the point (rest) with the
// counterfactual's (cf, its fork record first unless it ran from the
// start); the counterfactual's own first decision and turn request, which
// it asked for itself, compare as the selector's.
func diverged(orig string, rest []events.Stored, id string, cf []events.Stored, fromStart bool) *Divergence {
	if !fromStart && len(cf) > 0 && cf[0].Type == events.TypeSessionForked {
		cf = cf[1:]
	}
	i := replay.Diverge(orig, rest, id, cf)
	if i < 0 {
		return nil
	}
	d := &Divergence{}
	if i < len(rest) {
		d.Seq, d.Type = rest[i].Seq, rest[i].Type
	}
	if i < len(cf) {
		d.CounterfactualSeq, d.CounterfactualType = cf[i].Seq, cf[i].Type
	}
	return d
}

// costOf counts the model calls, tokens and wall time of a stretch of a
// session's events.
func costOf(evs []events.Stored) Cost {
	var c Cost
	var u session.Usage
	for _, e := range evs {
		switch e.Type {
		case events.TypeModelCalled:
			c.ModelCalls++
			fallthrough
		case events.TypeUsageRecorded:
			if d, err := e.Decode(); err == nil {
				switch d := d.(type) {
				case *events.ModelCalled:
					u.AddEvent(d)
				case *events.UsageRecorded:
					u.AddEvent(d)
				}
			}
		}
	}
	c.TokensIn, c.TokensOut, c.Events = u.Total.In, u.Total.Out, len(evs)
	if len(evs) > 0 {
		c.WallMS = evs[len(evs)-1].Time.Sub(evs[0].Time).Milliseconds()
	}
	return c
}

// lastBranch is the branch of a recorded session that holds its outcome:
// the session, or, while it closed superseded, the last fork its workflow
// made of it.
func lastBranch(ctx context.Context, c *client.Client, id string) (string, error) {
	for range 100 {
		st, err := c.State(ctx, id)
		if api.CodeOf(err) == api.CodeNotFound {
			return "", usageError{fmt.Errorf("recheck: no session %s", id)}
		}
		if err != nil {
			return "", err
		}
		if st.Outcome != "superseded" {
			return id, nil
		}
		g, err := c.Lineage(ctx, id)
		if err != nil {
			return "", err
		}
		next := newestChild(g.Root, id)
		if next == "" {
			return id, nil
		}
		id = next
	}
	return id, nil
}
