// Package rath is the Go programming model of Rath: a Session is a value a
// program starts, forwards through agents and workflows, forks, merges,
// moves between sandbox backends and inspects, the way OpenRath's
// session = workflow.forward(session) reads in Python:
//
//	wf, err := workflowfile.Store(ctx, c, "by-hand.yaml")
//	s, err := rath.Start(ctx, c, rath.StartOptions{Workflow: wf, Task: "fix the test"})
//	s, err = rath.Agent("planner").Forward(ctx, s)
//	plan := s
//	s, err = rath.Agent("reviewer").Forward(ctx, s)
//	other, err := plan.Fork(ctx, 0, "", "review another way")
//
// (each err checked). A program drives a session either by hand, as here,
// in a workflow whose rules open no turns, or by its rules with
// s.Forward(ctx, rath.Workflow{}); forwarding by hand in a session whose
// rules also route races them (ADR 0029).
//
// There is no second store: every call is an event in the session's log,
// proposed through the ledger by the pkg/client Client it is given and
// recorded exactly as the CLI and the services record it (a forward is a
// rath.agent.turn.requested the agent's worker or server answers; a move is
// a rath.sandbox.requested the tool runner answers). A call that waits for
// an outcome watches the session until its events are stored and returns
// the session at the head where the outcome is complete. Agents written in
// Go are served with pkg/agentserver and forwarded to like any other.
//
// A Session value is immutable: the methods return the session at its new
// head and leave the receiver as it was, so an earlier value still names
// the earlier step (Fork at it, read its State).
package rath

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Session is a session at one of its heads: its ID and the sequence of the
// last event the value has seen.
type Session struct {
	c    *client.Client
	id   string
	head uint64
}

// ID returns the session's ID.
func (s Session) ID() string { return s.id }

// Head returns the sequence the value stands at: the last event of the
// step that produced it. Events stored since (another producer's) are not
// part of the value until a call moves it on.
func (s Session) Head() uint64 { return s.head }

// String returns "<id>@<head>".
func (s Session) String() string { return fmt.Sprintf("%s@%d", s.id, s.head) }

// StartOptions says what a session started with Start runs.
type StartOptions struct {
	// ID is the session's ID; "" lets the ledger choose one.
	ID string
	// Workflow is the stored workflow bundle the session runs
	// (pkg/workflowfile loads a workflow file and stores it, as rath start
	// --workflow does). The zero value starts a session without a workflow
	// (nothing routes it, and no agent takes its turns).
	Workflow StoredWorkflow
	// Task says what the session is for.
	Task string
	// Workspace is a directory of this program's host that seeds the
	// session's tool workspace: it is packed and stored as a blob
	// (client.SeedWorkspace).
	Workspace string
	// Labels are the session's labels.
	Labels map[string]string
}

// StoredWorkflow names a workflow bundle stored as a blob: the workflow's
// name, the hash of its spec and the bundle's blob reference, as
// pkg/workflowfile's Store returns them and a session records them at its
// start. pkg/rath takes the reference rather than a file so that it links
// no workflow parser.
type StoredWorkflow struct {
	Name string
	Hash string
	Ref  string
}

// Start starts a session and returns it at its first event.
func Start(ctx context.Context, c *client.Client, o StartOptions) (Session, error) {
	data := events.SessionStarted{Task: o.Task}
	if len(o.Labels) > 0 {
		data.Labels = maps.Clone(o.Labels)
	}
	if o.Workspace != "" {
		if err := c.SeedWorkspace(ctx, o.Workspace, &data); err != nil {
			return Session{}, fmt.Errorf("start session: %w", err)
		}
	}
	if wf := o.Workflow; wf != (StoredWorkflow{}) {
		// A name without a bundle would start a session no worker can run.
		if wf.Ref == "" {
			return Session{}, fmt.Errorf("start session: workflow %q has no bundle reference (store the file with pkg/workflowfile)", wf.Name)
		}
		data.Workflow, data.WorkflowHash, data.WorkflowRef = wf.Name, wf.Hash, wf.Ref
	}
	ack, err := c.Start(ctx, o.ID, data)
	if err != nil {
		return Session{}, fmt.Errorf("start session %q: %w", o.ID, err)
	}
	return Session{c: c, id: ack.Session, head: ack.Seq}, nil
}

// Open returns the session id at its current head.
func Open(ctx context.Context, c *client.Client, id string) (Session, error) {
	st, err := c.Overview(ctx, api.StateRequest{Session: id})
	if err != nil {
		return Session{}, fmt.Errorf("open session %s: %w", id, err)
	}
	return Session{c: c, id: id, head: st.Seq}, nil
}

// Forwarder moves a session on by a step: an agent's turn (Agent), the
// workflow's rules (Workflow), or anything a program composes of them.
type Forwarder interface {
	Forward(ctx context.Context, s Session) (Session, error)
}

// Forward moves s on through f: s.Forward(ctx, rath.Agent("coder")) is
// rath.Agent("coder").Forward(ctx, s).
func (s Session) Forward(ctx context.Context, f Forwarder) (Session, error) { return f.Forward(ctx, s) }

// Say appends a user message to the conversation (what a person tells the
// agents) and returns the session at it.
func (s Session) Say(ctx context.Context, text string) (Session, error) {
	ack, err := s.c.Emit(ctx, s.id, &events.ChunkAppended{Role: events.RoleUser, Content: text})
	if err != nil {
		return s, fmt.Errorf("say in session %s: %w", s.id, err)
	}
	return s.at(ack.Seq), nil
}

// Fork branches the session at sequence at (0: the value's head) into a
// new session id ("" lets the ledger choose), recording reason, and
// returns the fork at its first event. The fork reads the parent's log up
// to at and has its own workspace at the parent's commit there.
func (s Session) Fork(ctx context.Context, at uint64, id, reason string) (Session, error) {
	if at == 0 {
		at = s.head
	}
	ack, err := s.c.Fork(ctx, api.ForkRequest{Parent: s.id, At: at, ID: id, Reason: reason})
	if err != nil {
		return Session{}, fmt.Errorf("fork session %s at %d: %w", s.id, at, err)
	}
	return Session{c: s.c, id: ack.Session, head: ack.Seq}, nil
}

// Merge takes into s the events of from that s does not hold yet, with
// provenance (rath.session.merged), and returns s at the merge.
// errors.Is(err, ledgerapi.ErrNothingToMerge) when s holds them all.
func (s Session) Merge(ctx context.Context, from Session, reason string) (Session, error) {
	ack, err := s.c.Merge(ctx, api.MergeRequest{Target: s.id, Source: from.id, Reason: reason})
	if err != nil {
		return s, fmt.Errorf("merge %s into %s: %w", from.id, s.id, err)
	}
	return s.at(ack.Seq), nil
}

// Close ends the session with an outcome ("succeeded", "failed", …) and
// returns it at the close.
func (s Session) Close(ctx context.Context, outcome, reason string) (Session, error) {
	ack, err := s.c.Close(ctx, s.id, events.SessionClosed{Outcome: outcome, Reason: reason})
	if err != nil {
		return s, fmt.Errorf("close session %s: %w", s.id, err)
	}
	return s.at(ack.Seq), nil
}

// State returns the session folded up to the value's head.
func (s Session) State(ctx context.Context) (*session.State, error) { return s.StateAt(ctx, s.head) }

// StateAt returns the session folded up to sequence seq (0: the session's
// current head, which may be past the value's).
func (s Session) StateAt(ctx context.Context, seq uint64) (*session.State, error) {
	st, err := s.c.StateAt(ctx, s.id, seq)
	if err != nil {
		return nil, fmt.Errorf("state of %s at %d: %w", s.id, seq, err)
	}
	return st, nil
}

// Usage returns the tokens the session used up to the value's head, in
// total, by agent and by model.
func (s Session) Usage(ctx context.Context) (session.Usage, error) {
	st, err := s.State(ctx)
	if err != nil {
		return session.Usage{}, err
	}
	return st.Usage, nil
}

// ToolCalls returns the evidence of the session's tool calls up to the
// value's head (arguments, status, attempts, exit code, the workspace's
// commits before and after, the events that recorded it), in the order
// they were requested.
func (s Session) ToolCalls(ctx context.Context) ([]session.Tool, error) {
	st, err := s.State(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]session.Tool, 0, len(st.Tools))
	for _, t := range st.Tools {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b session.Tool) int { return cmpSeqs(a.Seqs, b.Seqs) })
	return out, nil
}

func cmpSeqs(a, b []uint64) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return -1
	case len(b) == 0:
		return 1
	case a[0] < b[0]:
		return -1
	case a[0] > b[0]:
		return 1
	}
	return 0
}

// at returns s at another head.
func (s Session) at(seq uint64) Session {
	s.head = max(s.head, seq)
	return s
}

// errStop ends a watch once the awaited event came.
var errStop = errors.New("stop watching")
