package rath

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// Outcomes a forward or a move returns as errors (match with errors.Is).
var (
	// ErrTurnFailed: the agent's turn ended with rath.agent.turn.failed
	// (Agent.Forward; the *TurnError says why).
	ErrTurnFailed = errors.New("turn failed")
	// ErrAwaitingApproval: the session waits for a person's decision on an
	// approval (Workflow.Forward returns the session at the request;
	// decide it with client.Approve or Reject, and forward again).
	ErrAwaitingApproval = errors.New("awaiting approval")
	// ErrMoveRefused: the tool runner refused a move between sandbox
	// backends (Session.To; the *MoveError says why).
	ErrMoveRefused = errors.New("sandbox move refused")
)

// TurnError is a turn that failed: its ID, agent and the reason recorded.
type TurnError struct {
	Session, TurnID, Agent, Reason string
}

func (e *TurnError) Error() string {
	return fmt.Sprintf("turn %s of agent %s in %s failed: %s", e.TurnID, e.Agent, e.Session, e.Reason)
}

// Is matches ErrTurnFailed.
func (e *TurnError) Is(target error) bool { return target == ErrTurnFailed }

// MoveError is a refused sandbox move.
type MoveError struct {
	Session, Backend, Reason string
}

func (e *MoveError) Error() string {
	return fmt.Sprintf("move of %s to sandbox %s refused: %s", e.Session, e.Backend, e.Reason)
}

// Is matches ErrMoveRefused.
func (e *MoveError) Is(target error) bool { return target == ErrMoveRefused }

// Agent is a Forwarder that asks one agent of the session's workflow for a
// turn, whoever takes it: the agent worker for a model-backed or scripted
// agent, a program's agentserver for a served one.
type Agent string

// Forward requests a turn of the agent (rath.agent.turn.requested, its
// rule empty: a program asked) and waits until the turn has ended and the
// tool calls it asked for have ended too, so the returned session holds the
// turn's whole evidence; a call a gate holds is not waited for (it waits
// for a person). A failed turn returns the session at the failure and a
// *TurnError. The selector routes the session after the turn as after any
// other (a workflow's rules may start the next turn meanwhile; the returned
// head is the turn's last event, not the session's).
//
// Forward waits as long as ctx lets it: a turn no agent takes (no worker or
// server running, or a turn another request superseded) never ends.
func (a Agent) Forward(ctx context.Context, s Session) (Session, error) {
	reqID := events.NewID()
	turnID := "turn-" + events.DerivedID(reqID, "turn")[:8]
	ack, err := s.c.Emit(ctx, s.id, &events.TurnRequested{TurnID: turnID, Agent: string(a)}, events.WithID(reqID))
	if err != nil {
		return s, fmt.Errorf("forward %s through agent %s: %w", s.id, a, err)
	}
	s = s.at(ack.Seq)
	var (
		ended   bool
		failure *TurnError
		calls   []string // the turn's calls not yet ended, gated ones left out
	)
	err = s.c.Watch(ctx, s.id, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return nil // not an event this forward waits for
		}
		switch d := d.(type) {
		case *events.ToolRequested:
			if ev.Causation == reqID && d.ApprovalID == "" {
				calls = append(calls, d.CallID)
			}
		case *events.ToolCompleted:
			calls = slices.DeleteFunc(calls, func(id string) bool { return id == d.CallID })
		case *events.ToolFailed:
			calls = slices.DeleteFunc(calls, func(id string) bool { return id == d.CallID })
		case *events.TurnCompleted:
			ended = ended || d.TurnID == turnID
		case *events.TurnFailed:
			if d.TurnID == turnID {
				ended, failure = true, &TurnError{Session: s.id, TurnID: turnID, Agent: string(a), Reason: d.Error}
			}
		case *events.SessionClosed:
			if !ended {
				return fmt.Errorf("forward %s through agent %s: the session closed before the turn ended: %s", s.id, a, d.Reason)
			}
			calls = nil // the calls still open never end
		}
		if ended && len(calls) == 0 {
			s = s.at(ev.Seq)
			return errStop
		}
		return nil
	}, client.From(ack.Seq+1))
	switch {
	case errors.Is(err, errStop) && failure != nil:
		return s, failure
	case errors.Is(err, errStop):
		return s, nil
	case err != nil && ctx.Err() != nil:
		return s, fmt.Errorf("forward %s through agent %s: waiting for turn %s: %w", s.id, a, turnID, ctx.Err())
	}
	return s, err
}

// Workflow is a Forwarder that lets the session's workflow run: the
// selector routes it by the workflow's rules, and Forward waits until the
// session closes (returning it at the close) or waits for a person
// (returning it at the approval request, with ErrAwaitingApproval).
//
// Forward waits as long as ctx lets it: a session whose rules route it
// nowhere stays open.
type Workflow struct{}

// Forward waits for the workflow's outcome from the value's head on.
func (Workflow) Forward(ctx context.Context, s Session) (Session, error) {
	var awaiting bool
	err := s.c.Watch(ctx, s.id, func(ev events.Stored) error {
		switch ev.Type {
		case events.TypeSessionClosed:
			s = s.at(ev.Seq)
			return errStop
		case events.TypeApprovalRequested:
			if ev.Seq > s.head {
				s, awaiting = s.at(ev.Seq), true
				return errStop
			}
		}
		return nil
	}, client.From(max(s.head, 1)))
	switch {
	case errors.Is(err, errStop) && awaiting:
		return s, fmt.Errorf("forward %s through its workflow: %w", s.id, ErrAwaitingApproval)
	case errors.Is(err, errStop):
		return s, nil
	case err != nil && ctx.Err() != nil:
		return s, fmt.Errorf("forward %s through its workflow: %w", s.id, ctx.Err())
	}
	return s, err
}

// To moves the session to another sandbox backend (events.BackendBwrap,
// events.BackendGVisor, events.BackendRemote, events.BackendLocal), or to a
// tool runner of another pool ("gpu/bwrap", ADR 0042), between tool
// calls: it appends
// rath.sandbox.requested and waits for the tool runner's answer. A
// placement returns the session at rath.sandbox.placed; a refusal (the
// backend it is on, one that does not work here, a workspace behind)
// returns it at rath.sandbox.refused with a *MoveError. The calls before
// the request finish where the session was; the calls after it run on
// backend.
func (s Session) To(ctx context.Context, backend, reason string) (Session, error) {
	pool, name, err := events.ParseWhere(backend)
	if err != nil {
		return s, fmt.Errorf("move %s: %w", s.id, err)
	}
	ack, err := s.c.Emit(ctx, s.id, &events.SandboxRequested{Backend: name, Pool: pool, Reason: reason})
	if err != nil {
		return s, fmt.Errorf("move %s to %s: %w", s.id, backend, err)
	}
	s = s.at(ack.Seq)
	var refused *MoveError
	err = s.c.Watch(ctx, s.id, func(ev events.Stored) error {
		if ev.Causation != ack.ID {
			return nil
		}
		switch ev.Type {
		case events.TypeSandboxPlaced:
		case events.TypeSandboxRefused:
			d, err := ev.Decode()
			if err != nil {
				return fmt.Errorf("move %s to %s: %w", s.id, backend, err)
			}
			refused = &MoveError{Session: s.id, Backend: backend, Reason: d.(*events.SandboxRefused).Reason}
		default:
			return nil
		}
		s = s.at(ev.Seq)
		return errStop
	}, client.From(ack.Seq+1))
	switch {
	case errors.Is(err, errStop) && refused != nil:
		return s, refused
	case errors.Is(err, errStop):
		return s, nil
	case err != nil && ctx.Err() != nil:
		return s, fmt.Errorf("move %s to %s: waiting for the tool runner: %w", s.id, backend, ctx.Err())
	}
	return s, err
}
